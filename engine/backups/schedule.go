package backups

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/metrics"
	"example.com/cache-operator/engine/objectstore"
)

func parseSchedule(s string) (cron.Schedule, error) { return api.ParseSchedule(s) }

// ScheduledName is the name of the backup the schedule creates for the slot at t: the same slot
// always gives the same name, so a second pass (or a second leader) creates nothing twice.
func ScheduledName(cache string, t time.Time) string {
	return cache + "-" + t.UTC().Format("20060102-150405")
}

// schedule creates the backup of the first slot past the last scheduled backup (or the cache's
// creation) once that slot has come. Slots missed while the operator was away give one backup,
// not one per slot: the next slot is counted from the backup just created. It returns the time to
// the next slot.
func (c *Controller) schedule(ctx context.Context, mc *unstructured.Unstructured, spec api.Spec, backups []*unstructured.Unstructured) (time.Duration, error) {
	key := mc.GetNamespace() + "/" + mc.GetName()
	st := c.stateOf(key)
	if spec.Backup.Schedule == "" {
		c.setNext(st, key, time.Time{})
		metrics.BackupSchedule(mc.GetNamespace(), mc.GetName(), 0)
		return 0, nil
	}
	sched, err := parseSchedule(spec.Backup.Schedule)
	if err != nil {
		metrics.BackupSchedule(mc.GetNamespace(), mc.GetName(), 0)
		return 0, nil // checkStore reports it
	}
	last := mc.GetCreationTimestamp().Time
	for _, b := range backups {
		if t := b.GetCreationTimestamp().Time; b.GetLabels()[api.LabelScheduled] == "true" && t.After(last) {
			last = t
		}
	}
	now := c.opts.Now()
	slot := sched.Next(last)
	if !now.Before(slot) {
		name := ScheduledName(mc.GetName(), slot)
		b := &unstructured.Unstructured{}
		b.SetAPIVersion(api.GroupVersion.String())
		b.SetKind(api.BackupKind)
		b.SetNamespace(mc.GetNamespace())
		b.SetName(name)
		b.SetLabels(map[string]string{api.LabelBackupCache: mc.GetName(), api.LabelScheduled: "true"})
		_ = unstructured.SetNestedField(b.Object, mc.GetName(), "spec", "cache")
		_, err := c.client.Resource(api.BackupResource).Namespace(mc.GetNamespace()).Create(ctx, b, metav1.CreateOptions{FieldManager: api.FieldManager})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return 0, fmt.Errorf("ManagedCacheBackup/%s/%s: %w", mc.GetNamespace(), name, err)
		}
		if err == nil {
			late := now.Sub(slot).Round(time.Second)
			klog.FromContext(ctx).Info("Scheduled backup created", "backup", name, "slot", slot.UTC(), "late", late)
			c.recorder.Eventf(mc, corev1.EventTypeNormal, api.EventBackupScheduled, "Created backup %s for the slot at %s (%s after it)", name, slot.UTC().Format(time.RFC3339), late)
		}
		last = now
	}
	next := sched.Next(maxTime(last, now))
	c.setNext(st, key, next)
	metrics.BackupSchedule(mc.GetNamespace(), mc.GetName(), longestInterval(sched, next, 8))
	return next.Sub(now) + 100*time.Millisecond, nil
}

// longestInterval is the longest time between two of the n slots of sched from the slot at from
// (a schedule on weekdays only waits longest from Friday to Monday). The stale-backup alert
// compares a cache's last backup with it.
func longestInterval(sched cron.Schedule, from time.Time, n int) time.Duration {
	var longest time.Duration
	for t := from; n > 0; n-- {
		next := sched.Next(t)
		if next.IsZero() {
			break
		}
		longest, t = max(longest, next.Sub(t)), next
	}
	return longest
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func (c *Controller) setNext(st *cacheState, key string, next time.Time) {
	c.mu.Lock()
	changed := !st.next.Equal(next)
	st.next = next
	c.mu.Unlock()
	if changed {
		c.reconciles.Add(key)
	}
}

// retain keeps spec.backup.keep completed backups, the newest: older ones are deleted from the
// bucket (the data and its manifest), then as objects. As many failed backups are kept, for
// their reasons; older failed ones go too.
func (c *Controller) retain(ctx context.Context, mc *unstructured.Unstructured, spec api.Spec, backups []*unstructured.Unstructured) error {
	var completed, failed []*unstructured.Unstructured
	for _, b := range backups {
		if b.GetDeletionTimestamp() != nil {
			continue
		}
		switch phaseOf(b) {
		case api.BackupCompleted:
			completed = append(completed, b)
		case api.BackupFailed:
			failed = append(failed, b)
		}
	}
	newestFirst := func(list []*unstructured.Unstructured) {
		sort.SliceStable(list, func(i, j int) bool {
			si, sj := statusOfBackup(list[i]).StartTime, statusOfBackup(list[j]).StartTime
			if si != sj {
				return si > sj
			}
			ti, tj := list[i].GetCreationTimestamp(), list[j].GetCreationTimestamp()
			return tj.Before(&ti)
		})
	}
	newestFirst(completed)
	newestFirst(failed)
	keep := int(spec.Backup.Keep)
	var drop []*unstructured.Unstructured
	if len(completed) > keep {
		drop = append(drop, completed[keep:]...)
	}
	if len(failed) > keep {
		drop = append(drop, failed[keep:]...)
	}
	for _, b := range drop {
		if err := c.deleteBackup(ctx, b); err != nil {
			return err
		}
		klog.FromContext(ctx).Info("Backup deleted by retention", "backup", b.GetName(), "keep", keep)
		c.recorder.Eventf(mc, corev1.EventTypeNormal, api.EventBackupDeleted, "Backup %s deleted (keep %d)", b.GetName(), keep)
	}
	return nil
}

// deleteBackup deletes a backup's objects in the bucket, then the ManagedCacheBackup.
func (c *Controller) deleteBackup(ctx context.Context, b *unstructured.Unstructured) error {
	st := statusOfBackup(b)
	if st.Location != "" && st.StoreSecret != "" {
		store, cl, err := c.storeClient(ctx, b.GetNamespace(), st.StoreSecret)
		if err != nil {
			return err
		}
		key := strings.TrimPrefix(st.Location, "s3://"+store.Bucket+"/")
		if len(st.Shards) > 0 && strings.HasSuffix(key, "/") {
			// A sharded backup's folder: every shard's object and manifest.
			if _, err := objectstore.DeleteFolder(ctx, cl, store.Bucket, key); err != nil {
				return fmt.Errorf("deleting %s: %w", st.Location, err)
			}
		} else if err := objectstore.DeleteBackup(ctx, cl, store.Bucket, key); err != nil {
			return fmt.Errorf("deleting %s: %w", st.Location, err)
		}
	}
	err := c.client.Resource(api.BackupResource).Namespace(b.GetNamespace()).Delete(ctx, b.GetName(),
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptrUID(b)}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("ManagedCacheBackup/%s/%s: %w", b.GetNamespace(), b.GetName(), err)
	}
	return nil
}
