package operator

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"example.com/cache-operator/e2e/framework"
	"example.com/cache-operator/engine/dataset"
	"example.com/cache-operator/engine/objectstore"
)

// A backup of a size-3 cache is taken from a replica in sync (the primary does not fork), lands
// in the cluster's object store with its checksum, and restores into a new cache, from the
// ManagedCacheBackup and from the bucket alone, with the same keys and values. A corrupt object
// is refused: that cache stays without a primary, never empty as if restored. Deleting the
// source cache (onDelete: Delete) empties its folder in the bucket.
func TestBackupAndRestore(t *testing.T) {
	c := framework.Setup(t)
	ctx := context.Background()
	metricsAddr := freeAddr(t)
	ns := c.RealNamespace(t, "backup")
	startOperator(t, c, "--metrics-bind-address="+metricsAddr)
	deleteCachesOnCleanup(t, c, ns)
	store := c.ObjectStore(t)
	c.StoreSecret(t, ns, "store", store, nil)
	createCacheV2(t, c, ns, "src", v2Spec(3, map[string]interface{}{
		"backup": map[string]interface{}{"store": map[string]interface{}{"secretName": "store"}, "keep": int64(3), "onDelete": "Delete"},
	}))
	dumpMembersOnFailure(t, c, ns, "src")
	primary := waitWhole(t, c, ns, "src", 3, 3*time.Minute)
	waitCondition(t, c, ns, "src", "BackupsReady", "True", "StoreReachable", time.Minute)
	pc := memberClient(t, c, ns, "src", primary.Name)
	fillKeys(t, pc, "data", 30000)
	want := fingerprint(t, pc)
	// Every replica holds the data before the backup starts (it is taken from one of them).
	framework.Eventually(t, time.Minute, "replicas in sync", func() (bool, string, error) {
		mc, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Get(ctx, "src", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		members, _, _ := unstructured.NestedSlice(mc.Object, "status", "members")
		lagging := 0
		for _, m := range members {
			if _, ok := m.(map[string]interface{})["lagBytes"]; ok {
				lagging++
			}
		}
		return len(members) == 3 && lagging == 0, fmt.Sprintf("%d members, %d lagging", len(members), lagging), nil
	})
	forks := infoStat(t, c, ns, "src", primary.Status.PodIP, "stats", "total_forks")

	start := time.Now()
	createBackup(t, c, ns, "b1", "src")
	st := waitBackup(t, c, ns, "b1", 180*time.Second)
	took := time.Since(start)
	t.Logf("backup b1: %s in %s (%s): %d bytes, %d keys, %s %s, from %s, sha256 %s, at %s", st.Phase, took.Round(100*time.Millisecond),
		st.Reason, st.Bytes, st.Keys, st.Engine, st.Version, st.Member, st.Checksum, st.Location)
	wantLoc := fmt.Sprintf("s3://%s/%s/src/b1.rdb", store.Bucket, ns)
	switch {
	case st.Phase != "Completed":
		t.Fatalf("backup b1 %s (%s): %s", st.Phase, st.Reason, st.Message)
	case st.Reason != "FromReplica" || st.Member == primary.Name || !strings.HasPrefix(st.Member, "src-"):
		t.Errorf("backup b1 taken from %s (%s); want a replica, not the primary %s", st.Member, st.Reason, primary.Name)
	case st.Keys != want.Keys || st.Bytes == 0 || len(st.Checksum) != 64:
		t.Errorf("backup b1 records %d keys, %d bytes, checksum %q; want %d keys", st.Keys, st.Bytes, st.Checksum, want.Keys)
	case st.Engine != "redis" || !strings.HasPrefix(st.Version, "7.0.") || st.Location != wantLoc || st.StartTime == "" || st.EndTime == "":
		t.Errorf("backup b1: engine %q version %q location %q start %q end %q; want redis 7.0.x at %s", st.Engine, st.Version, st.Location, st.StartTime, st.EndTime, wantLoc)
	}
	if after := infoStat(t, c, ns, "src", primary.Status.PodIP, "stats", "total_forks"); after != forks {
		t.Errorf("the primary forked during a backup taken from its replica: total_forks %s -> %s", forks, after)
	}
	key := fmt.Sprintf("%s/src/b1.rdb", ns)
	cl, err := store.Client()
	if err != nil {
		t.Fatal(err)
	}
	man, err := objectstore.ReadManifest(ctx, cl, store.Bucket, key)
	if err != nil || man.SHA256 != st.Checksum || man.Bytes != st.Bytes || man.Keys != st.Keys {
		t.Errorf("the bucket's manifest %+v (%v) does not match the status %+v", man, err, st)
	}
	waitEvent(t, c, ns, "src", "Normal", "BackupCompleted", 30*time.Second)
	framework.Eventually(t, 30*time.Second, "status.backup.lastBackup", func() (bool, string, error) {
		mc, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Get(ctx, "src", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		last, _, _ := unstructured.NestedString(mc.Object, "status", "backup", "lastBackup")
		at, _, _ := unstructured.NestedString(mc.Object, "status", "backup", "lastBackupTime")
		return last == "b1" && at == st.StartTime, fmt.Sprintf("lastBackup %q at %q", last, at), nil
	})
	wide, err := c.Kubectl(ctx, "get", "managedcache", "src", "-n", ns, "-o", "wide")
	if err != nil || !strings.Contains(wide, "LAST-BACKUP") {
		t.Errorf("kubectl get mc -o wide shows no last backup: %v\n%s", err, wide)
	}
	t.Logf("kubectl get mc -o wide:\n%s", wide)
	table, _ := c.Kubectl(ctx, "get", "managedcachebackups", "-n", ns)
	t.Logf("kubectl get managedcachebackups:\n%s", table)

	// The backup's metrics.
	fams := scrape(t, metricsAddr)
	at, _ := time.Parse(time.RFC3339, st.StartTime)
	for name, want := range map[string]float64{
		"cache_operator_backup_last_success_timestamp_seconds": float64(at.Unix()),
		"cache_operator_backup_bytes":                          float64(st.Bytes),
	} {
		if got := value(fams, name, map[string]string{"namespace": ns, "cache": "src"}); got != want {
			t.Errorf("%s{cache=src} = %v; want %v", name, got, want)
		}
	}
	if d := value(fams, "cache_operator_backup_duration_seconds", map[string]string{"namespace": ns, "cache": "src"}); d <= 0 {
		t.Errorf("cache_operator_backup_duration_seconds{cache=src} = %v", d)
	}

	// Restore from the ManagedCacheBackup.
	restoreInto(t, c, ns, "dst", map[string]interface{}{"backup": "b1"}, want)
	if n := value(scrape(t, metricsAddr), "cache_operator_restores_total", map[string]string{"namespace": ns, "cache": "dst", "result": "completed"}); n != 1 {
		t.Errorf("cache_operator_restores_total{cache=dst,result=completed} = %v; want 1", n)
	}

	// Restore from the bucket alone: another namespace that has only the store's Secret and the
	// object's key (no ManagedCacheBackup there).
	ns2 := c.RealNamespace(t, "fromstore")
	deleteCachesOnCleanup(t, c, ns2)
	c.StoreSecret(t, ns2, "store", store, nil)
	restoreInto(t, c, ns2, "fresh", map[string]interface{}{"store": map[string]interface{}{"secretName": "store"}, "path": key}, want)

	// A corrupt copy (one byte flipped, its manifest intact) is refused.
	obj, err := cl.GetObject(ctx, store.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var data bytes.Buffer
	if _, err := data.ReadFrom(obj); err != nil {
		t.Fatal(err)
	}
	corrupt := data.Bytes()
	corrupt[len(corrupt)/2] ^= 0x40
	badKey := fmt.Sprintf("%s/elsewhere/corrupt.rdb", ns)
	if _, err := cl.PutObject(ctx, store.Bucket, badKey, bytes.NewReader(corrupt), int64(len(corrupt)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := objectstore.WriteManifest(ctx, cl, store.Bucket, badKey, man); err != nil {
		t.Fatal(err)
	}
	createCacheV2(t, c, ns2, "bad", v2Spec(3, map[string]interface{}{
		"restore": map[string]interface{}{"store": map[string]interface{}{"secretName": "store"}, "path": badKey},
	}))
	msg := waitCondition(t, c, ns2, "bad", "Ready", "False", "RestoreFailed", 2*time.Minute)
	t.Logf("corrupt object: Ready=False RestoreFailed: %s", msg)
	if !strings.Contains(msg, "is corrupt") {
		t.Errorf("the refusal does not say the object is corrupt: %s", msg)
	}
	waitEvent(t, c, ns2, "bad", "Warning", "RestoreFailed", 30*time.Second)
	if n := value(scrape(t, metricsAddr), "cache_operator_restores_total", map[string]string{"namespace": ns2, "cache": "bad", "result": "failed"}); n != 1 {
		t.Errorf("cache_operator_restores_total{cache=bad,result=failed} = %v; want 1", n)
	}
	// The members that started empty are not made primary: the cache takes no writes.
	dmsg := waitCondition(t, c, ns2, "bad", "Degraded", "True", "NoPrimary", time.Minute)
	if p := statusPrimary(t, c, ns2, "bad"); p != "" || !strings.Contains(dmsg, "restores the backup") {
		t.Errorf("a cache whose restore failed has primary %q (Degraded: %s); want none, waiting for bad-0", p, dmsg)
	}

	// The store's Secret is held while a cache deletes its backups through it.
	if sec, err := c.Kube.CoreV1().Secrets(ns).Get(ctx, "store", metav1.GetOptions{}); err != nil || !strings.Contains(fmt.Sprint(sec.Finalizers), "cache.example.com/backup-store") {
		t.Errorf("the store's Secret is not held for src's deletion: finalizers %v (%v)", sec.Finalizers, err)
	}
	// Deleting the source with onDelete: Delete empties its folder in the bucket, then releases it.
	if err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Delete(ctx, "src", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, time.Minute, "src deleted", func() (bool, string, error) {
		gone, err := isGone(c, mcV2GVR, ns, "src")
		return gone, "still there", err
	})
	left, err := framework.ObjectKeys(ctx, store, ns+"/src/")
	if err != nil || len(left) != 0 {
		t.Errorf("after deleting src (onDelete: Delete) the bucket still holds %v (%v)", left, err)
	}
	if other, _ := framework.ObjectKeys(ctx, store, ns+"/elsewhere/"); len(other) != 2 {
		t.Errorf("deleting src touched objects outside its folder: %v left of 2", other)
	}
	bl, err := c.Dynamic.Resource(mcbGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(bl.Items) != 0 {
		t.Errorf("after deleting src, %d ManagedCacheBackups remain (%v)", len(bl.Items), err)
	}
	framework.Eventually(t, 30*time.Second, "the store's Secret released", func() (bool, string, error) {
		sec, err := c.Kube.CoreV1().Secrets(ns).Get(ctx, "store", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return len(sec.Finalizers) == 0, fmt.Sprint(sec.Finalizers), nil
	})
}

// restoreInto creates a cache restoring from source and checks it: Ready, the restored member
// the primary, and every key and value equal to want on each member.
func restoreInto(t *testing.T, c *framework.Cluster, ns, name string, source map[string]interface{}, want dataset.Fingerprint) {
	t.Helper()
	restoreIntoSpec(t, c, ns, name, v2Spec(3, map[string]interface{}{"restore": source}), want)
}

// restoreIntoSpec is restoreInto of a cache of spec (3 members, with its spec.restore).
func restoreIntoSpec(t *testing.T, c *framework.Cluster, ns, name string, spec map[string]interface{}, want dataset.Fingerprint) {
	t.Helper()
	source := spec["restore"]
	start := time.Now()
	createCacheV2(t, c, ns, name, spec)
	dumpMembersOnFailure(t, c, ns, name)
	primary := waitWhole(t, c, ns, name, 3, 3*time.Minute)
	t.Logf("restore %v into %s/%s: Ready in %s", source, ns, name, time.Since(start).Round(100*time.Millisecond))
	if primary.Name != name+"-0" {
		t.Errorf("the primary of the restored cache is %s; want %s-0, the member that restored", primary.Name, name)
	}
	mc, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	phase, _, _ := unstructured.NestedString(mc.Object, "status", "restore", "phase")
	if phase != "Completed" {
		t.Errorf("status.restore.phase %q; want Completed", phase)
	}
	for i := 0; i < 3; i++ {
		pod := fmt.Sprintf("%s-%d", name, i)
		cl := memberClient(t, c, ns, name, pod)
		var got dataset.Fingerprint
		framework.Eventually(t, time.Minute, pod+" holds the restored data", func() (bool, string, error) {
			got = fingerprint(t, cl)
			return got == want, got.String(), nil
		})
		t.Logf("%s: %s (source %s)", pod, got, want)
	}
	// Every member restored the snapshot with its replication history: the replicas resumed from
	// the restored primary with partial resyncs, and every member's AOF was turned on and written.
	full := infoStat(t, c, ns, name, primary.Status.PodIP, "stats", "sync_full")
	partial, _ := strconv.Atoi(infoStat(t, c, ns, name, primary.Status.PodIP, "stats", "sync_partial_ok"))
	if full != "0" || partial < 2 {
		t.Errorf("the restored primary served %s full syncs and %d partial ones; want none and at least 2", full, partial)
	}
	for i := 0; i < 3; i++ {
		p, err := c.Kube.CoreV1().Pods(ns).Get(context.Background(), fmt.Sprintf("%s-%d", name, i), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		framework.Eventually(t, time.Minute, p.Name+"'s AOF on and written", func() (bool, string, error) {
			on := infoStat(t, c, ns, name, p.Status.PodIP, "persistence", "aof_enabled")
			rw := infoStat(t, c, ns, name, p.Status.PodIP, "persistence", "aof_rewrite_in_progress")
			return on == "1" && rw == "0", "aof_enabled " + on + ", aof_rewrite_in_progress " + rw, nil
		})
	}
	waitEvent(t, c, ns, name, "Normal", "Restored", 30*time.Second)
	// Once completed, the ConfigMap says so: a first member that starts again later, even on a new
	// empty volume, never restores the old backup over what the cache became.
	framework.Eventually(t, 30*time.Second, name+"-config's restore key", func() (bool, string, error) {
		cm, err := c.Kube.CoreV1().ConfigMaps(ns).Get(context.Background(), name+"-config", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return cm.Data["restore"] == "completed", cm.Data["restore"], nil
	})
}
