package operator

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"example.com/cache-operator/e2e/framework"
)

// scheduledSeen collects the scheduled backups of a cache as they come and go (retention deletes
// the oldest): name -> creation time.
type scheduledSeen map[string]time.Time

func (s scheduledSeen) look(t *testing.T, c *framework.Cluster, ns, cache string) (completed []string) {
	t.Helper()
	l, err := c.Dynamic.Resource(mcbGVR).Namespace(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "cache.example.com/scheduled=true"})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range l.Items {
		s[b.GetName()] = b.GetCreationTimestamp().Time
		if readBackup(&b).Phase == "Completed" {
			completed = append(completed, b.GetName())
		}
	}
	sort.Strings(completed)
	return completed
}

// slotOf is the slot time a scheduled backup's name carries (<cache>-YYYYMMDD-HHMMSS).
func slotOf(t *testing.T, cache, name string) time.Time {
	t.Helper()
	ts, err := time.Parse("20060102-150405", strings.TrimPrefix(name, cache+"-"))
	if err != nil {
		t.Fatalf("scheduled backup %s: no slot in its name: %v", name, err)
	}
	return ts
}

// A schedule of every 12 s with keep 3: five scheduled backups are taken, each within 60 s of its
// slot; three remain, as objects and in the bucket. Slots missed while the operator is stopped
// give one backup when it is back, not one per slot. A cache of one member is backed up from its
// primary, with the reason in status. The cache has the longest name a cache may have.
func TestBackupScheduleAndRetention(t *testing.T) {
	// The longest name a cache may have (52 characters): its scheduled backups' names, 68
	// characters, are past a label's 63 (their Jobs' labels once were, and they never ran).
	const sched = "sched-a-cache-named-with-fifty-two-characters-0001xx"
	parallel(t)
	c := framework.Setup(t)
	ctx := context.Background()
	ns := c.RealNamespace(t, "schedule")
	op := startOperatorIn(t, c, ns)
	deleteCachesOnCleanup(t, c, ns)
	store := c.ObjectStore(t)
	c.StoreSecret(t, ns, "store", store, nil)
	createCacheV2(t, c, ns, sched, v2Spec(1, map[string]interface{}{
		"backup": map[string]interface{}{"store": map[string]interface{}{"secretName": "store"}, "keep": int64(3), "schedule": "@every 12s", "onDelete": "Delete"},
	}))
	dumpMembersOnFailure(t, c, ns, sched)
	dumpBackupsOnFailure(t, c, ns)
	primary := waitWhole(t, c, ns, sched, 1, 3*time.Minute)
	fillKeys(t, memberClient(t, c, ns, sched, primary.Name), "s", 2000)

	seen := scheduledSeen{}
	var completed []string
	framework.Eventually(t, 4*time.Minute, "five scheduled backups, three kept", func() (bool, string, error) {
		completed = seen.look(t, c, ns, sched)
		keys, err := framework.ObjectKeys(ctx, store, ns+"/"+sched+"/")
		if err != nil {
			return false, "", err
		}
		return len(seen) >= 5 && len(completed) == 3 && len(keys) == 6,
			fmt.Sprintf("%d scheduled seen, completed %v, bucket %v", len(seen), completed, keys), nil
	})
	var late []time.Duration
	for name, created := range seen {
		d := created.Sub(slotOf(t, sched, name))
		late = append(late, d)
		if d < 0 || d > 60*time.Second {
			t.Errorf("scheduled backup %s created %s after its slot; want within 60 s", name, d)
		}
	}
	sort.Slice(late, func(i, j int) bool { return late[i] < late[j] })
	t.Logf("%d scheduled backups, created after their slots by %v; kept %v", len(seen), late, completed)
	b, err := c.Dynamic.Resource(mcbGVR).Namespace(ns).Get(ctx, completed[len(completed)-1], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st := readBackup(b); st.Reason != "FromPrimary" || st.Member != primary.Name || !strings.Contains(st.Message, "no replica was in sync") {
		t.Errorf("a backup of a one-member cache: reason %q member %q message %q; want FromPrimary from %s", st.Reason, st.Member, st.Message, primary.Name)
	}

	// Missed slots while the operator is away: one backup when it is back. It is stopped between
	// two backups, so that what it exports on its return comes from the statuses alone.
	// Two minutes: side by side with other tests, backups of 12 s slots can run back to back (in
	// CI one was still Running a minute after its snapshot had streamed).
	framework.Eventually(t, 2*time.Minute, "no backup running", func() (bool, string, error) {
		unfinished := unfinishedBackups(t, c, ns)
		return len(unfinished) == 0, fmt.Sprintf("unfinished: %v", unfinished), nil
	})
	op.stop(syscall.SIGTERM)
	stopped := time.Now()
	// What the operator made before it stopped (while this test waited for a gap, the schedule
	// went on) is counted now; only what appears after this is made while it is stopped.
	seen.look(t, c, ns, sched)
	before := len(seen)
	framework.Eventually(t, 2*time.Minute, "three slots to pass with the operator stopped", func() (bool, string, error) {
		return time.Since(stopped) > 3*12*time.Second+5*time.Second, time.Since(stopped).Round(time.Second).String(), nil
	})
	seen.look(t, c, ns, sched)
	if len(seen) != before {
		t.Fatalf("scheduled backups were created while the operator was stopped: %d -> %d", before, len(seen))
	}
	// The last completed backup before the restart: the restarted operator exports it at once,
	// from the backups' statuses, not after its next backup.
	var lastBefore time.Time
	list, err := c.Dynamic.Resource(mcbGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		st := readBackup(&list.Items[i])
		if at, err := time.Parse(time.RFC3339, st.StartTime); err == nil && st.Phase == "Completed" && at.After(lastBefore) {
			lastBefore = at
		}
	}
	// A backup created between the check and the stop may have run meanwhile: its Job's
	// completion, seen at the restart, would be exported first.
	unfinished := unfinishedBackups(t, c, ns)
	metricsAddr := freeAddr(t)
	restarted := time.Now()
	startOperatorIn(t, c, ns, "--metrics-bind-address="+metricsAddr)
	deleteCachesOnCleanup(t, c, ns) // again: cleanups run last first, this one while this operator runs (onDelete: Delete)
	labels := `{cache="` + sched + `",namespace="` + ns + `"}`
	var firstSeen, interval float64
	framework.Eventually(t, 30*time.Second, "the restarted operator to export the last backup and the schedule", func() (bool, string, error) {
		v, err := framework.Metric(metricsAddr, "cache_operator_backup_last_success_timestamp_seconds"+labels)
		if err != nil {
			return false, err.Error(), nil
		}
		if firstSeen == 0 {
			firstSeen = v
		}
		interval, err = framework.Metric(metricsAddr, "cache_operator_backup_schedule_interval_seconds"+labels)
		return err == nil, fmt.Sprintf("last success %v, interval %v (%v)", v, interval, err), nil
	})
	first := time.Unix(int64(firstSeen), 0)
	t.Logf("restarted operator: last backup exported as started at %s (the last completed before the restart: %s); schedule interval %v s",
		first.UTC().Format(time.RFC3339), lastBefore.UTC().Format(time.RFC3339), interval)
	switch {
	case len(unfinished) > 0 && (first.Before(lastBefore) || first.After(restarted)):
		t.Errorf("after a restart (%v unfinished): last backup exported as started at %s; want one started before the restart, at or after %s",
			unfinished, first.UTC().Format(time.RFC3339), lastBefore.UTC().Format(time.RFC3339))
	case len(unfinished) == 0 && !first.Equal(lastBefore):
		t.Errorf("after a restart: last backup exported as started at %s; want the last completed before it, %s",
			first.UTC().Format(time.RFC3339), lastBefore.UTC().Format(time.RFC3339))
	}
	if interval != 12 {
		t.Errorf("schedule interval %v s; want 12 (@every 12s)", interval)
	}
	var caughtUp time.Time
	framework.Eventually(t, 30*time.Second, "one backup for the missed slots", func() (bool, string, error) {
		seen.look(t, c, ns, sched)
		var since []string
		for name, created := range seen {
			if !created.Before(restarted.Add(-time.Second)) {
				since = append(since, name)
				caughtUp = created
			}
		}
		return len(since) == 1, fmt.Sprintf("created since the restart: %v", since), nil
	})
	t.Logf("the operator, back %s after stopping (3 slots missed), created one backup %s after its start",
		restarted.Sub(stopped).Round(time.Second), caughtUp.Sub(restarted).Round(100*time.Millisecond))
	framework.Eventually(t, 30*time.Second, "most of the way to the next slot, 12 s after the catch-up", func() (bool, string, error) {
		return time.Since(caughtUp) > 9*time.Second, "", nil
	})
	var since []string
	seen.look(t, c, ns, sched)
	for name, created := range seen {
		if !created.Before(restarted.Add(-time.Second)) {
			since = append(since, name)
		}
	}
	if len(since) != 1 {
		t.Errorf("%d backups created within 9 s of the catch-up (%v); want one for all the missed slots", len(since), since)
	}
}

// unfinishedBackups names the backups in ns that are neither Completed nor Failed.
func unfinishedBackups(t *testing.T, c *framework.Cluster, ns string) []string {
	t.Helper()
	list, err := c.Dynamic.Resource(mcbGVR).Namespace(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i := range list.Items {
		if ph := readBackup(&list.Items[i]).Phase; ph != "Completed" && ph != "Failed" {
			out = append(out, list.Items[i].GetName()+" "+ph)
		}
	}
	return out
}
