package operator

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"example.com/cache-operator/e2e/framework"
	"example.com/cache-operator/engine/objectstore"
)

// setStoreSecret points the cache's spec.backup at another Secret.
func setStoreSecret(t *testing.T, c *framework.Cluster, ns, cache, secret string) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"backup":{"store":{"secretName":%q}}}}`, secret)
	if _, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Patch(context.Background(), cache, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// Bad input gets a clear condition, a Warning Event, and loses nothing: the cache keeps serving.
// A missing Secret, one without a bucket, an unreachable endpoint, a bucket that does not exist;
// a schedule that does not parse is refused at kubectl apply; a backup in a newer snapshot format
// is refused as a restore source.
func TestBackupBadInput(t *testing.T) {
	parallel(t)
	c := framework.Setup(t)
	ctx := context.Background()
	metricsAddr := freeAddr(t)
	ns := c.RealNamespace(t, "badinput")
	startOperatorIn(t, c, ns, "--metrics-bind-address="+metricsAddr)
	deleteCachesOnCleanup(t, c, ns)
	store := c.ObjectStore(t)
	createCacheV2(t, c, ns, "bi", v2Spec(1, map[string]interface{}{
		"backup": map[string]interface{}{"store": map[string]interface{}{"secretName": "missing"}},
	}))
	dumpMembersOnFailure(t, c, ns, "bi")
	waitWhole(t, c, ns, "bi", 1, 3*time.Minute)
	msg := waitCondition(t, c, ns, "bi", "BackupsReady", "False", "StoreSecretInvalid", time.Minute)
	t.Logf("missing Secret: %s", msg)
	waitEvent(t, c, ns, "bi", "Warning", "StoreSecretInvalid", 30*time.Second)

	c.StoreSecret(t, ns, "nobucket", store, map[string]string{"bucket": ""})
	setStoreSecret(t, c, ns, "bi", "nobucket")
	t.Logf("Secret without a bucket: %s", waitConditionSaying(t, c, ns, "bi", "BackupsReady", "False", "StoreSecretInvalid", "missing keys: bucket", time.Minute))
	host, _, _ := net.SplitHostPort(strings.TrimPrefix(store.Endpoint, "http://"))
	c.StoreSecret(t, ns, "unreachable", store, map[string]string{"endpoint": "http://" + host + ":1"})
	setStoreSecret(t, c, ns, "bi", "unreachable")
	t.Logf("unreachable endpoint: %s", waitConditionSaying(t, c, ns, "bi", "BackupsReady", "False", "StoreUnreachable", ":1/", time.Minute))
	c.StoreSecret(t, ns, "nosuchbucket", store, map[string]string{"bucket": "no-such-bucket"})
	setStoreSecret(t, c, ns, "bi", "nosuchbucket")
	t.Logf("missing bucket: %s", waitConditionSaying(t, c, ns, "bi", "BackupsReady", "False", "BucketNotFound", "no-such-bucket", time.Minute))
	// A backup asked for meanwhile fails with the reason; the cache still serves.
	createBackup(t, c, ns, "nobucket-backup", "bi")
	if st := waitBackup(t, c, ns, "nobucket-backup", time.Minute); st.Phase != "Failed" || !strings.Contains(st.Message, "does not exist") {
		t.Errorf("a backup to a missing bucket: %+v; want Failed saying the bucket does not exist", st)
	}
	if n := value(scrape(t, metricsAddr), "cache_operator_backup_failures_total", map[string]string{"namespace": ns, "cache": "bi"}); n != 1 {
		t.Errorf("cache_operator_backup_failures_total{cache=bi} = %v; want 1", n)
	}
	if s, r, _ := condition(t, c, ns, "bi", "Ready"); s != "True" {
		t.Errorf("the cache is not Ready (%s) after bad backup settings; it must keep serving", r)
	}
	// onDelete: Retain (the default): no finalizer, deleting the cache never waits.
	if mc, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Get(ctx, "bi", metav1.GetOptions{}); err != nil || len(mc.GetFinalizers()) != 0 {
		t.Errorf("a cache with onDelete: Retain has finalizers %v (%v); want none", mc.GetFinalizers(), err)
	}
	c.StoreSecret(t, ns, "store", store, nil)
	setStoreSecret(t, c, ns, "bi", "store")
	waitCondition(t, c, ns, "bi", "BackupsReady", "True", "StoreReachable", time.Minute)

	// Schedules that do not parse are refused at once, by the CRD (no operator needed).
	for _, sched := range []string{"every day", "61 * * * *"} {
		patch := fmt.Sprintf(`{"spec":{"backup":{"schedule":%q}}}`, sched)
		_, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Patch(ctx, "bi", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		if err == nil {
			t.Errorf("schedule %q was accepted", sched)
			continue
		}
		t.Logf("schedule %q refused: %v", sched, err)
	}

	// A backup in a newer snapshot format than the cache reads is refused as a restore source.
	createBackup(t, c, ns, "b", "bi")
	st := waitBackup(t, c, ns, "b", 3*time.Minute)
	if st.Phase != "Completed" {
		t.Fatalf("backup b: %+v", st)
	}
	cl, err := store.Client()
	if err != nil {
		t.Fatal(err)
	}
	key := ns + "/bi/b.rdb"
	man, err := objectstore.ReadManifest(ctx, cl, store.Bucket, key)
	if err != nil {
		t.Fatal(err)
	}
	newer := ns + "/newer/b.rdb"
	if _, err := cl.CopyObject(ctx, minio.CopyDestOptions{Bucket: store.Bucket, Object: newer}, minio.CopySrcOptions{Bucket: store.Bucket, Object: key}); err != nil {
		t.Fatal(err)
	}
	man.Version = "8.0.2"
	if err := objectstore.WriteManifest(ctx, cl, store.Bucket, newer, man); err != nil {
		t.Fatal(err)
	}
	createCacheV2(t, c, ns, "older", v2Spec(1, map[string]interface{}{
		"restore": map[string]interface{}{"store": map[string]interface{}{"secretName": "store"}, "path": newer},
	}))
	msg = waitCondition(t, c, ns, "older", "Ready", "False", "RestoreFailed", 2*time.Minute)
	if !strings.Contains(msg, "the backup comes from redis 8.0.2 and this cache runs redis 7.0: redis 7.0 reads snapshot formats up to 10 and the data is in format 12") {
		t.Errorf("a restore from 8.0 into 7.0: %s", msg)
	}
	t.Logf("backup from a newer snapshot format: %s", msg)
	waitEvent(t, c, ns, "older", "Warning", "RestoreFailed", 30*time.Second)
}

// Deleting a cache whose store is unreachable (onDelete: Delete): a condition and a Warning Event
// say so, the operator retries, and the cache goes once the store is back, its folder emptied.
// The README's escape hatch (finalizers: []) releases a cache at once and leaves its objects.
func TestBackupDeletionWithStoreDown(t *testing.T) {
	c := framework.Setup(t)
	ctx := context.Background()
	startOperator(t, c)
	ns := c.RealNamespace(t, "storedown")
	deleteCachesOnCleanup(t, c, ns)
	store := c.ObjectStore(t)
	c.StoreSecret(t, ns, "store", store, nil)
	for _, name := range []string{"del", "hatch"} {
		createCacheV2(t, c, ns, name, v2Spec(1, map[string]interface{}{
			"backup": map[string]interface{}{"store": map[string]interface{}{"secretName": "store"}, "onDelete": "Delete"},
		}))
	}
	for _, name := range []string{"del", "hatch"} {
		waitWhole(t, c, ns, name, 1, 3*time.Minute)
		createBackup(t, c, ns, name+"-1", name)
		if st := waitBackup(t, c, ns, name+"-1", 3*time.Minute); st.Phase != "Completed" {
			t.Fatalf("backup %s-1: %+v", name, st)
		}
		mc, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if f := mc.GetFinalizers(); len(f) != 1 {
			t.Fatalf("%s (onDelete: Delete) has finalizers %v; want the operator's", name, f)
		}
	}
	c.ObjectStoreCommand(t, "stop-objectstore")
	stopped := true
	t.Cleanup(func() {
		if stopped {
			c.ObjectStoreCommand(t, "start-objectstore")
		}
	})
	for _, name := range []string{"del", "hatch"} {
		if err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		msg := waitCondition(t, c, ns, name, "BackupsReady", "False", "CleanupFailed", 2*time.Minute)
		t.Logf("%s deleted with the store down: %s", name, msg)
		if !strings.Contains(msg, "finalizers") {
			t.Errorf("the condition does not name the escape hatch: %s", msg)
		}
		waitEvent(t, c, ns, name, "Warning", "CleanupFailed", 30*time.Second)
	}
	// The escape hatch: the cache goes at once, its objects stay.
	if _, err := c.Kubectl(ctx, "patch", "managedcache", "hatch", "-n", ns, "--type=merge", "-p", `{"metadata":{"finalizers":[]}}`); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 30*time.Second, "hatch released", func() (bool, string, error) {
		gone, err := isGone(c, mcV2GVR, ns, "hatch")
		return gone, "still there", err
	})
	c.ObjectStoreCommand(t, "start-objectstore")
	stopped = false
	framework.Eventually(t, 3*time.Minute, "del deleted once the store is back", func() (bool, string, error) {
		// One read: gone, or what its condition says (a second read could find it gone).
		mc, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Get(ctx, "del", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		} else if err != nil {
			return false, "", err
		}
		if cond := conditionOf(mc, "BackupsReady"); cond != nil {
			return false, cond.Reason + ": " + cond.Message, nil
		}
		return false, "no BackupsReady condition", nil
	})
	if left, err := framework.ObjectKeys(ctx, store, ns+"/del/"); err != nil || len(left) != 0 {
		t.Errorf("the bucket still holds %v of del (%v)", left, err)
	}
	if kept, err := framework.ObjectKeys(ctx, store, ns+"/hatch/"); err != nil || len(kept) != 2 {
		t.Errorf("the escape hatch left %v of hatch (%v); want its backup and manifest", kept, err)
	}

	// Deleting a namespace: its cache (onDelete: Delete) empties its folder first; the store's
	// Secret, which the namespace's deletion would otherwise take first, is held until then.
	gone := c.RealNamespace(t, "nsdelete")
	c.StoreSecret(t, gone, "store", store, nil)
	createCacheV2(t, c, gone, "doomed", v2Spec(1, map[string]interface{}{
		"backup": map[string]interface{}{"store": map[string]interface{}{"secretName": "store"}, "onDelete": "Delete"},
	}))
	waitWhole(t, c, gone, "doomed", 1, 3*time.Minute)
	createBackup(t, c, gone, "doomed-1", "doomed")
	if st := waitBackup(t, c, gone, "doomed-1", 3*time.Minute); st.Phase != "Completed" {
		t.Fatalf("backup doomed-1: %+v", st)
	}
	framework.Eventually(t, 30*time.Second, "the store's Secret held", func() (bool, string, error) {
		sec, err := c.Kube.CoreV1().Secrets(gone).Get(ctx, "store", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return len(sec.Finalizers) == 1, fmt.Sprint(sec.Finalizers), nil
	})
	start := time.Now()
	if err := c.Kube.CoreV1().Namespaces().Delete(ctx, gone, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 3*time.Minute, "namespace "+gone+" deleted", func() (bool, string, error) {
		_, err := c.Kube.CoreV1().Namespaces().Get(ctx, gone, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		return false, "still there", err
	})
	left, err := framework.ObjectKeys(ctx, store, gone+"/doomed/")
	t.Logf("namespace with a cache (onDelete: Delete) deleted in %s; its folder holds %v afterwards", time.Since(start).Round(100*time.Millisecond), left)
	if err != nil || len(left) != 0 {
		t.Errorf("the deleted namespace's cache left %v in the bucket (%v)", left, err)
	}
}
