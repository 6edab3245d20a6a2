package lifecycle

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"example.com/cache-operator/e2e/framework"
	"example.com/cache-operator/engine/dataset"
)

var (
	cachesGVR  = schema.GroupVersionResource{Group: "cache.example.com", Version: "v2", Resource: "managedcaches"}
	backupsGVR = schema.GroupVersionResource{Group: "cache.example.com", Version: "v2", Resource: "managedcachebackups"}
)

// runOperator runs bin/cache-operator against c until stop is called, and waits until its
// webhooks serve.
func runOperator(t *testing.T, c *framework.Cluster) (stop func()) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	log, err := os.Create(filepath.Join(os.TempDir(), fmt.Sprintf("operator-fresh-cluster-%d.log", port)))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(c.Root, "bin", "cache-operator"), "--kubeconfig", c.Kubeconfig, fmt.Sprintf("--webhook-port=%d", port),
		"--member-networks="+framework.MemberNetworks, "--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			_ = cmd.Process.Signal(os.Interrupt)
			_ = cmd.Wait()
			log.Close()
		}
	}
	t.Cleanup(stop)
	framework.Eventually(t, 30*time.Second, "the operator's webhooks to serve (log "+log.Name()+")", func() (bool, string, error) {
		conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port), &tls.Config{InsecureSkipVerify: true}) // only: does it serve?
		if err != nil {
			return false, err.Error(), nil
		}
		conn.Close()
		return true, "", nil
	})
	return stop
}

func apply(t *testing.T, c *framework.Cluster, obj map[string]interface{}, gvr schema.GroupVersionResource) {
	t.Helper()
	u := &unstructured.Unstructured{Object: obj}
	if _, err := c.Dynamic.Resource(gvr).Namespace(u.GetNamespace()).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating %s %s/%s: %v", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
}

func cacheDoc(ns, name string, extra map[string]interface{}) map[string]interface{} {
	spec := map[string]interface{}{"replicas": int64(3), "engine": map[string]interface{}{"name": "redis", "version": "7.0"},
		"storage": map[string]interface{}{"size": "1Gi"}}
	for k, v := range extra {
		spec[k] = v
	}
	return map[string]interface{}{"apiVersion": "cache.example.com/v2", "kind": "ManagedCache",
		"metadata": map[string]interface{}{"name": name, "namespace": ns}, "spec": spec}
}

// primaryClient waits until the cache is Ready and returns a client of its primary as the clients'
// user.
func primaryClient(t *testing.T, c *framework.Cluster, ns, name string) (*redis.Client, string) {
	t.Helper()
	ctx := context.Background()
	var primary string
	framework.Eventually(t, 3*time.Minute, ns+"/"+name+" Ready", func() (bool, string, error) {
		mc, err := c.Dynamic.Resource(cachesGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		primary, _, _ = unstructured.NestedString(mc.Object, "status", "primary")
		conds, _, _ := unstructured.NestedSlice(mc.Object, "status", "conditions")
		for _, cc := range conds {
			m, _ := cc.(map[string]interface{})
			if m["type"] == "Ready" {
				return m["status"] == "True" && primary != "", fmt.Sprintf("%v: %v", m["reason"], m["message"]), nil
			}
		}
		return false, "no Ready condition", nil
	})
	sec, err := c.Kube.CoreV1().Secrets(ns).Get(ctx, name+"-auth", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod, err := c.Kube.CoreV1().Pods(ns).Get(ctx, primary, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cl := redis.NewClient(&redis.Options{Addr: pod.Status.PodIP + ":6379", Password: string(sec.Data["password"])})
	t.Cleanup(func() { cl.Close() })
	return cl, primary
}

func storeSecret(t *testing.T, c *framework.Cluster, ns string) {
	t.Helper()
	store := c.ObjectStore(t)
	if _, err := c.Kubectl(context.Background(), "create", "namespace", ns); err != nil {
		t.Fatal(err)
	}
	c.WaitDefaultServiceAccount(t, ns)
	c.StoreSecret(t, ns, "store", store, nil)
}

// TestRestoreIntoAFreshCluster backs up a cache, deletes the whole cluster (cluster.sh down), makes
// a new one (cluster.sh up) whose object store keeps its folder (OBJECTSTORE_DIR, as make test-e2e
// sets it), and restores the backup there from the bucket alone: a Secret and the object's key.
// It leaves the new cluster running, for TestClusterLifecycle.
func TestRestoreIntoAFreshCluster(t *testing.T) {
	if os.Getenv("CACHE_E2E_LIFECYCLE") != "1" {
		t.Skip("deletes the test cluster: run by `make test-e2e` after every other end-to-end test")
	}
	if os.Getenv("OBJECTSTORE_DIR") == "" {
		t.Fatal("OBJECTSTORE_DIR is not set: the object store would go with the cluster (make test-e2e sets it)")
	}
	c := framework.Setup(t)
	ctx := context.Background()
	stop := runOperator(t, c)
	storeSecret(t, c, "before")
	apply(t, c, cacheDoc("before", "src", map[string]interface{}{"backup": map[string]interface{}{"store": map[string]interface{}{"secretName": "store"}}}), cachesGVR)
	cl, _ := primaryClient(t, c, "before", "src")
	pipe := cl.Pipeline()
	for i := 0; i < 10000; i++ {
		pipe.HSet(ctx, fmt.Sprintf("user:%05d", i), "name", fmt.Sprintf("n%d", i), "visits", i)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	want, err := dataset.Of(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	apply(t, c, map[string]interface{}{"apiVersion": "cache.example.com/v2", "kind": "ManagedCacheBackup",
		"metadata": map[string]interface{}{"name": "last", "namespace": "before"}, "spec": map[string]interface{}{"cache": "src"}}, backupsGVR)
	var location string
	framework.Eventually(t, 3*time.Minute, "the backup to complete", func() (bool, string, error) {
		b, err := c.Dynamic.Resource(backupsGVR).Namespace("before").Get(ctx, "last", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		phase, _, _ := unstructured.NestedString(b.Object, "status", "phase")
		location, _, _ = unstructured.NestedString(b.Object, "status", "location")
		msg, _, _ := unstructured.NestedString(b.Object, "status", "message")
		return phase == "Completed", phase + ": " + msg, nil
	})
	stop()
	store := c.ObjectStore(t)
	key := strings.TrimPrefix(location, "s3://"+store.Bucket+"/")

	start := time.Now()
	t.Logf("down:\n%s", runScript(t, c, "down"))
	t.Logf("up:\n%s", runScript(t, c, "up"))
	fresh, err := framework.Connect(c.Dir, c.Name, "cache-operator-e2e")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a new cluster in %s", time.Since(start).Round(time.Second))
	if out, err := fresh.Kubectl(ctx, "get", "namespace", "before"); err == nil {
		t.Fatalf("the new cluster has the old one's namespace: %s", out)
	}
	if _, err := fresh.Kubectl(ctx, "apply", "--server-side", "--force-conflicts", "-k", filepath.Join(fresh.Root, "crd")); err != nil {
		t.Fatal(err)
	}
	if _, err := fresh.Kubectl(ctx, "wait", "--for=condition=Established", "crd/managedcaches.cache.example.com", "crd/managedcachebackups.cache.example.com", "--timeout=60s"); err != nil {
		t.Fatal(err)
	}
	if _, err := fresh.Kubectl(ctx, "create", "namespace", "cache-operator-system"); err != nil {
		t.Fatal(err)
	}
	runOperator(t, fresh)
	storeSecret(t, fresh, "after")
	restoreStart := time.Now()
	apply(t, fresh, cacheDoc("after", "src", map[string]interface{}{"restore": map[string]interface{}{
		"store": map[string]interface{}{"secretName": "store"}, "path": key}}), cachesGVR)
	rcl, primary := primaryClient(t, fresh, "after", "src")
	got, err := dataset.Of(ctx, rcl)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("restored %s from the bucket alone into a new cluster: Ready in %s, primary %s; %s (source %s)",
		location, time.Since(restoreStart).Round(100*time.Millisecond), primary, got, want)
	if got != want || primary != "src-0" {
		t.Errorf("restored %s on %s; want %s on src-0", got, primary, want)
	}
	if err := fresh.Dynamic.Resource(cachesGVR).Namespace("after").Delete(ctx, "src", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}
