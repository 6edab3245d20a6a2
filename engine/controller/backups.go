package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/backups"
	"example.com/cache-operator/engine/metrics"
	"example.com/cache-operator/engine/status"
)

// Backups is what the controller asks of the backups (package backups): a cache's backup status
// and condition, whether its deletion waits for its backups to be deleted from the bucket (and
// that deletion), and the resolution of a new cache's spec.restore.
type Backups interface {
	Status(mc *unstructured.Unstructured) (*api.BackupStatus, *metav1.Condition)
	WantsFinalizer(mc *unstructured.Unstructured) bool
	Cleanup(ctx context.Context, mc *unstructured.Unstructured) error
	ResolveRestore(ctx context.Context, mc *unstructured.Unstructured, spec api.Spec) (*api.RestoreStatus, error)
}

// resolveRestore makes sure a cache with spec.restore has its source in status.restore before any
// child is rendered: the first member's init container is rendered from it. It returns mc with the
// resolved status (not yet written: the pass's status write carries it), or false with the
// pending status written.
func (c *Controller) resolveRestore(ctx context.Context, mc *unstructured.Unstructured, spec api.Spec) (*unstructured.Unstructured, bool, error) {
	if spec.Restore == nil || c.backups == nil || api.RestoreStatusOf(mc).Resolved() {
		return mc, true, nil
	}
	rs, err := c.backups.ResolveRestore(ctx, mc, spec)
	if err != nil {
		c.recorder.Eventf(mc, corev1.EventTypeWarning, api.ReasonRestorePending, "Waiting for the restore's source: %v", err)
		st := status.Invalid(mc, api.ReasonRestorePending, "waiting for the restore's source: "+err.Error())
		st.Restore = &api.RestoreStatus{Message: err.Error()}
		if werr := c.writeStatus(ctx, mc, st); werr != nil {
			return nil, false, werr
		}
		return nil, false, fmt.Errorf("ManagedCache/%s/%s: spec.restore: %w", mc.GetNamespace(), mc.GetName(), err)
	}
	if rs.Refused != "" {
		if c.firstRestoreOutcome(mc, "failed", rs.Location) {
			c.recorder.Eventf(mc, corev1.EventTypeWarning, api.ReasonRestoreFailed, "Restore refused: %s", rs.Refused)
			metrics.RestoreFinished(mc.GetNamespace(), mc.GetName(), "failed")
		}
	} else {
		into := api.RestoreMember(mc.GetName())
		if spec.Sharded() {
			into = restoredShards(mc, spec)
		}
		c.recorder.Eventf(mc, corev1.EventTypeNormal, api.EventRestoreStarted, "Restoring %s (%d bytes, %d keys, %s) into %s", rs.Location, rs.Bytes, rs.Keys, rs.Version, into)
	}
	out := mc.DeepCopy()
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(rs)
	if err != nil {
		return nil, false, err
	}
	if err := unstructured.SetNestedField(out.Object, raw, "status", "restore"); err != nil {
		return nil, false, err
	}
	return out, true, nil
}

// backupStatus fills status.backup, status.restore (as advanceRestore left it) and the conditions
// they bring.
func (c *Controller) backupStatus(mc *unstructured.Unstructured, spec api.Spec, s *api.Status, view api.MembersView, viewOK bool) {
	s.Restore = api.RestoreStatusOf(mc)
	if c.backups != nil {
		b, cond := c.backups.Status(mc)
		s.Backup = b
		if cond != nil && spec.Backup != nil {
			meta.SetStatusCondition(&s.Conditions, *cond)
		} else if spec.Backup == nil {
			meta.RemoveStatusCondition(&s.Conditions, api.ConditionBackupsReady)
		}
	}
	status.ApplyRestore(s, spec, mc.GetGeneration())
}

// advanceRestore returns mc with status.restore moved on (backups.RestoreProgress: Completed
// once the restored member is the primary the member pass observes, Failed with its restore
// container's message), with an Event and the metric on each change; mc itself when nothing
// moves. The status write of the pass carries it.
func (c *Controller) advanceRestore(mc *unstructured.Unstructured, spec api.Spec, view api.MembersView, viewOK bool) *unstructured.Unstructured {
	rs := api.RestoreStatusOf(mc)
	if spec.Restore == nil || !rs.Resolved() || rs.Phase == api.RestoreCompleted {
		return mc
	}
	member := api.RestoreMember(mc.GetName())
	primary, initFailure := "", ""
	if viewOK && view.Observed {
		primary = view.Primary
	}
	for _, p := range c.informers.MemberPods(mc.GetNamespace(), mc.GetName()) {
		if p.Name == member {
			initFailure = p.InitFailure
		}
	}
	if spec.Sharded() {
		// Each shard's first member loads its shard's object: the restore is over once the
		// cluster is whole (every slot served, every shard with its members) with every
		// member's AOF on; it failed when one of them could not restore.
		member, primary, initFailure = restoredShards(mc, spec), "", ""
		if viewOK && view.Observed && view.ClusterWhole && view.AOFOff == "" {
			primary = member
		}
		for _, p := range c.informers.MemberPods(mc.GetNamespace(), mc.GetName()) {
			if _, ordinal, ok := api.ShardMemberOf(mc.GetName(), p.Name); ok && ordinal == 0 && p.InitFailure != "" && initFailure == "" {
				initFailure = p.Name + ": " + p.InitFailure
			}
		}
	}
	next := backups.RestoreProgress(*rs, member, primary, initFailure, time.Now())
	if next.Phase == rs.Phase && next.Message == rs.Message {
		return mc
	}
	switch {
	case next.Phase == rs.Phase:
	case next.Phase == api.RestoreCompleted:
		if c.firstRestoreOutcome(mc, "completed", rs.Location) {
			if spec.Sharded() {
				c.recorder.Eventf(mc, corev1.EventTypeNormal, api.EventRestored, "Restored %s into %s: every shard serves the slots it served in the backup", rs.Location, member)
			} else {
				c.recorder.Eventf(mc, corev1.EventTypeNormal, api.EventRestored, "Restored %s into %s, now the primary", rs.Location, member)
			}
			metrics.RestoreFinished(mc.GetNamespace(), mc.GetName(), "completed")
		}
	case next.Phase == api.RestoreFailed && rs.Refused == "" && c.firstRestoreOutcome(mc, "failed", rs.Location):
		c.recorder.Eventf(mc, corev1.EventTypeWarning, api.ReasonRestoreFailed, "Restore of %s failed: %s", rs.Location, next.Message)
		metrics.RestoreFinished(mc.GetNamespace(), mc.GetName(), "failed")
	}
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&next)
	if err != nil {
		return mc
	}
	out := mc.DeepCopy()
	_ = unstructured.SetNestedField(out.Object, raw, "status", "restore")
	return out
}

// firstRestoreOutcome says whether this is the first time this process reports the outcome of
// mc's restore of location; a pass working from a copy older than its own status write comes
// to the same outcome again and must not count it twice.
func (c *Controller) firstRestoreOutcome(mc *unstructured.Unstructured, outcome, location string) bool {
	v := string(mc.GetUID()) + " " + outcome + " " + location
	prev, loaded := c.restoreOutcomes.Swap(mc.GetNamespace()+"/"+mc.GetName(), v)
	return !loaded || prev.(string) != v
}

// forgetRestoreOutcomes drops the outcomes remembered for the deleted cache namespace/name.
func (c *Controller) forgetRestoreOutcomes(namespace, name string) {
	c.restoreOutcomes.Delete(namespace + "/" + name)
}

// cleanupBackups runs the backups' cleanup of a deleted cache; a failure is reported in the
// BackupsReady condition and a Warning Event, and retried with backoff.
func (c *Controller) cleanupBackups(ctx context.Context, mc *unstructured.Unstructured) error {
	if c.backups == nil {
		return nil
	}
	err := c.backups.Cleanup(ctx, mc)
	if err == nil {
		return nil
	}
	msg := fmt.Sprintf("%v; retrying with backoff. To release the cache and leave its backups in the bucket: kubectl patch managedcache %s -n %s --type=merge -p '{\"metadata\":{\"finalizers\":[]}}'",
		err, mc.GetName(), mc.GetNamespace())
	c.recorder.Eventf(mc, corev1.EventTypeWarning, api.ReasonCleanupFailed, "Deleting the backups: %s", msg)
	st := api.StatusOf(mc)
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: api.ConditionBackupsReady, Status: metav1.ConditionFalse,
		Reason: api.ReasonCleanupFailed, Message: msg, ObservedGeneration: mc.GetGeneration()})
	if werr := c.writeStatus(ctx, mc, st); werr != nil {
		return werr
	}
	return err
}

// restoredShards names the members that load a sharded restore's objects, for its status and
// Events: "the first members of the 3 shards (c-s0-0, ...)".
func restoredShards(mc *unstructured.Unstructured, spec api.Spec) string {
	names := make([]string, spec.Shards)
	for i := range names {
		names[i] = api.ShardSetName(mc.GetName(), i) + "-0"
	}
	return fmt.Sprintf("the first members of the %d shards (%s)", spec.Shards, strings.Join(names, ", "))
}
