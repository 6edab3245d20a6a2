package backups

import (
	"context"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/objectstore"
	"example.com/cache-operator/engine/support"
)

// What the cache controller asks of the backups (its Backups hooks).

// Status is the cache's status.backup and its BackupsReady condition (nil: none to show).
func (c *Controller) Status(mc *unstructured.Unstructured) (*api.BackupStatus, *metav1.Condition) {
	key := mc.GetNamespace() + "/" + mc.GetName()
	var out api.BackupStatus
	var last time.Time
	for _, b := range c.backupsOf(key) {
		st := statusOfBackup(b)
		if st.Phase != api.BackupCompleted {
			continue
		}
		if t, err := time.Parse(time.RFC3339, st.StartTime); err == nil && !t.Before(last) {
			last, out.LastBackup, out.LastBackupTime = t, b.GetName(), st.StartTime
		}
	}
	c.mu.Lock()
	st := c.state[key]
	var cond *metav1.Condition
	if st != nil {
		if !st.next.IsZero() {
			out.NextScheduleTime = st.next.UTC().Format(time.RFC3339)
		}
		if st.condition.Type != "" {
			cc := st.condition
			cond = &cc
		}
	}
	c.mu.Unlock()
	if out == (api.BackupStatus{}) {
		return nil, cond
	}
	return &out, cond
}

// WantsFinalizer says whether deleting mc must wait for its backups to be deleted from the bucket
// (spec.backup.onDelete: Delete).
func (c *Controller) WantsFinalizer(mc *unstructured.Unstructured) bool {
	spec, err := api.SpecFrom(mc)
	return err == nil && spec.Backup != nil && spec.Backup.OnDelete == api.BackupDelete
}

// Cleanup deletes every object of the cache in its store's bucket (its folder,
// <prefix>/<namespace>/<cache>/), then its ManagedCacheBackups. A store that cannot be reached
// is an error: the cache controller retries with backoff and says so in a condition and an Event.
// When the store's Secret is already gone (its namespace is being deleted), the store last read
// from it is used.
func (c *Controller) Cleanup(ctx context.Context, mc *unstructured.Unstructured) error {
	spec, err := api.SpecFrom(mc)
	if err != nil || spec.Backup == nil {
		return nil
	}
	if spec.Backup.OnDelete != api.BackupDelete {
		return c.releaseStores(ctx, mc.GetNamespace(), mc.GetName())
	}
	ns := mc.GetNamespace()
	store, err := c.storeOf(ctx, ns, spec.Backup.StoreSecret)
	if err != nil {
		remembered, ok := c.rememberedStore(ns, spec.Backup.StoreSecret)
		if !ok {
			return fmt.Errorf("deleting the backups (onDelete: Delete): %w", err)
		}
		klog.FromContext(ctx).Info("The store's Secret is unreadable; using the store last read from it", "err", err.Error())
		store = remembered
	}
	cl, err := store.Client()
	if err != nil {
		return err
	}
	folder := store.CacheFolder(ns, mc.GetName())
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cctx, ccancel := context.WithTimeout(ctx, storeTimeout)
	err = objectstore.Check(cctx, cl, store.Bucket)
	ccancel()
	if err != nil {
		return fmt.Errorf("deleting the backups in s3://%s/%s: %w", store.Bucket, folder, err)
	}
	// The store answers now, which may be long after the cleanup began: a cache released
	// meanwhile (the escape hatch) keeps its objects.
	if waiting, err := c.awaitsCleanup(ctx, ns, mc.GetName()); err != nil || !waiting {
		if !waiting && err == nil {
			klog.FromContext(ctx).Info("The cache was released meanwhile; its backups stay in the bucket")
		}
		return err
	}
	n, err := objectstore.DeleteFolder(ctx, cl, store.Bucket, folder)
	if err != nil {
		return fmt.Errorf("deleting the backups in s3://%s/%s (%d deleted so far): %w", store.Bucket, folder, n, err)
	}
	klog.FromContext(ctx).Info("Deleted the cache's backups from the bucket", "objects", n, "location", store.Location(folder))
	for _, b := range c.backupsOf(ns + "/" + mc.GetName()) {
		if err := c.client.Resource(api.BackupResource).Namespace(ns).Delete(ctx, b.GetName(), metav1.DeleteOptions{}); err != nil && !isNotFound(err) {
			return err
		}
	}
	c.forget(ns + "/" + mc.GetName())
	return c.releaseStores(ctx, ns, mc.GetName())
}

// ResolveRestore resolves a new cache's spec.restore: the object, its checksum and size, and
// the version it came from, read from the ManagedCacheBackup's status or from the manifest beside
// the object in the bucket. A backup the cache cannot load (by the support matrix: a newer snapshot format, another engine) is refused: the
// result carries the reason, and the first member's init container fails with it. An error means
// the source is not known yet (a backup still running, a store unreachable): retried.
func (c *Controller) ResolveRestore(ctx context.Context, mc *unstructured.Unstructured, spec api.Spec) (*api.RestoreStatus, error) {
	r := spec.Restore
	ns := mc.GetNamespace()
	rs := &api.RestoreStatus{Phase: api.RestoreRunning}
	if r.Backup != "" {
		obj, ok, err := c.backups.GetIndexer().GetByKey(ns + "/" + r.Backup)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("ManagedCacheBackup %s/%s does not exist", ns, r.Backup)
		}
		st := statusOfBackup(obj.(*unstructured.Unstructured))
		if st.Phase != api.BackupCompleted {
			return nil, fmt.Errorf("ManagedCacheBackup %s/%s is not completed (phase %q)", ns, r.Backup, st.Phase)
		}
		store, err := c.storeOf(ctx, ns, st.StoreSecret)
		if err != nil {
			return nil, err
		}
		rs.Location, rs.StoreSecret, rs.Path = st.Location, st.StoreSecret, strings.TrimPrefix(st.Location, "s3://"+store.Bucket+"/")
		rs.Checksum, rs.Bytes, rs.Keys, rs.Version = st.Checksum, st.Bytes, st.Keys, st.Version
		rs.Refused = refusal(st.Engine, st.Version, spec)
		for _, s := range st.Shards {
			rs.Shards = append(rs.Shards, api.RestoreShard{Shard: s.Shard, Slots: s.Slots, Checksum: s.Checksum, Bytes: s.Bytes, Keys: s.Keys,
				Path: strings.TrimPrefix(s.Location, "s3://"+store.Bucket+"/")})
		}
		switch {
		case rs.Refused != "":
		case len(st.Shards) > 0 && !spec.Sharded():
			rs.Refused = fmt.Sprintf("ManagedCacheBackup %s is of a sharded cache (%d shards, one object each): it restores only into a sharded cache of as many shards; each shard's object is an RDB file that redis-check-rdb and other tools read", r.Backup, len(st.Shards))
		case spec.Sharded() && len(st.Shards) == 0:
			rs.Refused = fmt.Sprintf("ManagedCacheBackup %s is of a primary/replica cache (one keyspace): it restores only into a primary/replica cache; a sharded cache restores a backup of a sharded cache of as many shards", r.Backup)
		case spec.Sharded() && int64(len(st.Shards)) != spec.Shards:
			rs.Refused = fmt.Sprintf("ManagedCacheBackup %s holds %d shards and this cache has %d: a sharded backup restores into a cache of as many shards, each shard serving the slots it served (restore into %d shards, then change spec.shards: the operator reshards online)", r.Backup, len(st.Shards), spec.Shards, len(st.Shards))
		}
	} else if spec.Sharded() {
		rs.Refused = "spec.restore.path: a sharded cache restores from a ManagedCacheBackup of a sharded cache (spec.restore.backup), whose status names each shard's object and slots"
	} else {
		store, cl, err := c.storeClient(ctx, ns, r.StoreSecret)
		if err != nil {
			return nil, err
		}
		m, err := objectstore.ReadManifest(ctx, cl, store.Bucket, r.Path)
		if err != nil {
			return nil, fmt.Errorf("reading the manifest of %s: %w", store.Location(r.Path), err)
		}
		rs.Location, rs.StoreSecret, rs.Path = store.Location(r.Path), r.StoreSecret, r.Path
		rs.Checksum, rs.Bytes, rs.Keys, rs.Version = m.SHA256, m.Bytes, m.Keys, m.Version
		rs.Refused = refusal(m.Engine, m.Version, spec)
	}
	if rs.Refused != "" {
		rs.Phase, rs.Message = api.RestoreFailed, rs.Refused
	}
	return rs, nil
}

// RestoreProgress is the next status.restore of a cache whose restore into member was resolved
// (rs) and has not completed: Completed once member is the primary the member pass observes,
// Failed with the reason when the operator refused it or member's restore container failed
// (initFailure: its termination message), Running otherwise.
func RestoreProgress(rs api.RestoreStatus, member, primary, initFailure string, now time.Time) api.RestoreStatus {
	next := rs
	switch {
	case rs.Refused != "":
		next.Phase, next.Message = api.RestoreFailed, rs.Refused
	case primary == member:
		next.Phase, next.Message = api.RestoreCompleted, ""
		next.CompletionTime = now.UTC().Format(time.RFC3339)
	case initFailure != "":
		next.Phase, next.Message = api.RestoreFailed, initFailure
	default:
		next.Phase, next.Message = api.RestoreRunning, member+" loads the backup"
	}
	return next
}

// refusal says why a backup of engine and version (the server's, such as 8.0.2) cannot be
// restored into a cache of spec, or "" (the support matrix's rule for a change of version).
func refusal(engine, version string, spec api.Spec) string {
	why := support.ChangeRefusal(engine, version, spec.Engine.Name, spec.Engine.Version)
	if why == "" {
		return ""
	}
	return fmt.Sprintf("the backup comes from %s %s and this cache runs %s %s: %s; restore it into a cache that can load it (%s)",
		engine, version, spec.Engine.Name, spec.Engine.Version, why, support.Summary())
}
