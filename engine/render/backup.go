package render

import (
	"fmt"
	"sort"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"example.com/cache-operator/engine/api"
)

// StoreEnvVar maps one key of a store's Secret to the environment variable the operator's
// backup and restore commands read (api.StoreEnv); Optional keys may be absent.
type StoreEnvVar struct {
	Name, Key string
	Optional  bool
}

// storeEnv is api.StoreEnv in a stable order.
func storeEnv() []StoreEnvVar {
	required := map[string]bool{api.StoreEndpoint: true, api.StoreBucket: true, api.StoreAccessKey: true, api.StoreSecretKey: true}
	var out []StoreEnvVar
	for key, name := range api.StoreEnv {
		out = append(out, StoreEnvVar{Name: name, Key: key, Optional: !required[key]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// RestoreValues are what the first member's init container needs to fill its volume: the source
// as status.restore resolved it when the cache was created (so the pod template never changes
// afterwards), or why the operator refused it.
type RestoreValues struct {
	// Member is the pod elected first, whose restore must succeed (every member restores).
	Member string
	// StoreSecret, Path, Checksum and Bytes: the object and what it must be.
	StoreSecret, Path, Checksum, Bytes string
	// Refused, when set, makes the container fail with this reason instead.
	Refused string
	// State is the restore's phase as the ConfigMap's key StateKey publishes it (api.RestoreDone once
	// completed: the container then does nothing, whatever the volume holds).
	State, StateKey string
	// Done is the value of StateKey once the restore completed (api.RestoreDone).
	Done string
	// Only: Member alone restores (a sharded cache's shard: a member holding keys claims their
	// slots, so the others start empty and sync).
	Only bool
}

// restoreShards is status.restore.shards of a sharded cache whose restore resolved them.
func restoreShards(mc *unstructured.Unstructured, spec api.Spec) []api.RestoreShard {
	if rs := api.RestoreStatusOf(mc); spec.Sharded() && spec.Restore != nil && rs.Resolved() {
		return rs.Shards
	}
	return nil
}

// restoreValues is the restore of a cache with spec.restore whose status resolved it; nil
// otherwise.
func restoreValues(mc *unstructured.Unstructured, spec api.Spec) *RestoreValues {
	rs := api.RestoreStatusOf(mc)
	if spec.Restore == nil || !rs.Resolved() {
		return nil
	}
	r := &RestoreValues{Member: api.RestoreMember(mc.GetName()), StoreSecret: rs.StoreSecret, Path: rs.Path,
		Checksum: rs.Checksum, Refused: rs.Refused, State: "pending", StateKey: api.RestoreStateKey, Done: api.RestoreDone}
	if rs.Phase == api.RestoreCompleted {
		r.State = api.RestoreDone
	}
	if rs.Bytes > 0 {
		r.Bytes = strconv.FormatInt(rs.Bytes, 10)
	}
	if r.StoreSecret == "" {
		r.StoreSecret = "none" // refused before a store was known; the container reads no key
	}
	return r
}

// BackupJob is what the backup Job template needs (templates/job-backup.yaml).
type BackupJob struct {
	// Name is the ManagedCacheBackup's, JobName its Job's; Label is the value of the backup's
	// label on both (api.BackupLabelValue of Name; set by BackupJobFor).
	Name, JobName, Label string
	// StoreSecret names the store's Secret.
	StoreSecret string
	// Parts are what the Job streams, a container each: one member of a primary/replica cache,
	// one member of each shard of a sharded cache.
	Parts []BackupPart
}

// BackupPart is one member streamed to one object.
type BackupPart struct {
	// Container names the Job's container ("backup"; "backup-s<shard>" for a shard).
	Container string
	// Member is the pod to back up, MemberHost its stable DNS name; FromPrimary says it is the
	// primary (no replica was in sync).
	Member, MemberHost string
	FromPrimary        bool
	// ObjectKey is where the data goes.
	ObjectKey string
}

// BackupJobFor renders the Job that takes backup (a ManagedCacheBackup) of mc, owned by backup.
func (r *Renderer) BackupJobFor(mc, backup *unstructured.Unstructured, spec api.Spec, cfg Config, job BackupJob) (*unstructured.Unstructured, error) {
	v := NewValues(mc, spec, cfg, Auth{})
	job.Label = api.BackupLabelValue(job.Name)
	v.Backup = &job
	objs, err := r.renderFiles(r.jobFiles, v)
	if err != nil {
		return nil, err
	}
	if len(objs) != 1 || objs[0].GetKind() != "Job" {
		return nil, fmt.Errorf("the backup Job templates rendered %d objects; want one Job", len(objs))
	}
	obj := objs[0]
	t := true
	obj.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: api.GroupVersion.String(), Kind: api.BackupKind,
		Name: backup.GetName(), UID: backup.GetUID(), Controller: &t, BlockOwnerDeletion: &t}})
	return obj, nil
}
