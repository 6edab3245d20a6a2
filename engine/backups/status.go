package backups

import (
	"context"
	"fmt"
	"reflect"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/metrics"
)

// backupStatus is a ManagedCacheBackup's status, as the CRD declares it.
type backupStatus struct {
	Phase       string `json:"phase,omitempty"`
	Reason      string `json:"reason,omitempty"`
	Message     string `json:"message,omitempty"`
	StartTime   string `json:"startTime,omitempty"`
	EndTime     string `json:"endTime,omitempty"`
	Bytes       int64  `json:"bytes,omitempty"`
	Keys        int64  `json:"keys,omitempty"`
	Checksum    string `json:"checksum,omitempty"`
	Engine      string `json:"engine,omitempty"`
	Version     string `json:"version,omitempty"`
	Member      string `json:"member,omitempty"`
	Location    string `json:"location,omitempty"`
	StoreSecret string `json:"storeSecret,omitempty"`
	Job         string `json:"job,omitempty"`
	// Shards: a sharded cache's backup, one object per shard (sharded.go).
	Shards []shardBackup `json:"shards,omitempty"`
}

func statusOfBackup(b *unstructured.Unstructured) backupStatus {
	var s backupStatus
	if raw, ok := b.Object["status"].(map[string]interface{}); ok {
		_ = runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &s)
	}
	return s
}

func phaseOf(b *unstructured.Unstructured) string { return statusOfBackup(b).Phase }

// setStatus writes a backup's status when it changed (over the resourceVersion read: a conflict is
// retried from the informer's newer copy).
func (c *Controller) setStatus(ctx context.Context, b *unstructured.Unstructured, s backupStatus) error {
	if reflect.DeepEqual(statusOfBackup(b), s) {
		return nil
	}
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&s)
	if err != nil {
		return err
	}
	out := b.DeepCopy()
	out.Object["status"] = raw
	if _, err := c.client.Resource(api.BackupResource).Namespace(b.GetNamespace()).UpdateStatus(ctx, out, metav1.UpdateOptions{FieldManager: api.FieldManager}); err != nil {
		return fmt.Errorf("ManagedCacheBackup/%s/%s: writing status: %w", b.GetNamespace(), b.GetName(), err)
	}
	b.Object["status"] = raw
	return nil
}

func ptrUID(o metav1.Object) *types.UID {
	u := o.GetUID()
	return &u
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }

// exportLastBackup exports the cache's last completed backup (from the backups' statuses) as
// metrics when this process has not: a new leader, or one restarted, has the series at once, so
// that the stale-backup alert does not wait for a next backup that may never come.
func (c *Controller) exportLastBackup(key string, mc *unstructured.Unstructured, backups []*unstructured.Unstructured) {
	var last backupStatus
	var lastStart time.Time
	for _, b := range backups {
		st := statusOfBackup(b)
		if st.Phase != api.BackupCompleted {
			continue
		}
		if t, err := time.Parse(time.RFC3339, st.StartTime); err == nil && t.After(lastStart) {
			last, lastStart = st, t
		}
	}
	if lastStart.IsZero() || !c.markExported(key, lastStart) {
		return
	}
	end, err := time.Parse(time.RFC3339, last.EndTime)
	took := end.Sub(lastStart)
	if err != nil || took < 0 {
		took = 0
	}
	metrics.BackupCompleted(mc.GetNamespace(), mc.GetName(), lastStart, took, last.Bytes)
}

// markExported records that the backup of cache key started at start is exported, and says
// whether it is newer than the last one exported.
func (c *Controller) markExported(key string, start time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.stateLocked(key)
	if !start.After(st.exported) {
		return false
	}
	st.exported = start
	return true
}
