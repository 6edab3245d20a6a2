// Package deployed tests the operator as the README deploys it: `kubectl apply --server-side -k
// manifests/`, two replicas from bin/cache-operator on the real nodes, in-cluster configuration,
// webhooks reached by the API server through the Service, probes, and leader election.
package deployed

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"example.com/cache-operator/e2e/framework"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

const (
	opNS     = "cache-operator-system"
	selector = "control-plane=controller-manager"
)

var (
	mcV1 = schema.GroupVersionResource{Group: "cache.example.com", Version: "v1", Resource: "managedcaches"}
	mcV2 = schema.GroupVersionResource{Group: "cache.example.com", Version: "v2", Resource: "managedcaches"}
)

func TestMain(m *testing.M) {
	if os.Getenv("CACHE_E2E") == "1" {
		// The real nodes run image cache-operator from bin/cache-operator (localcluster/node/images.yaml).
		if _, err := framework.BuildOperator(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}

// deploy runs make deploy's script (kubectl apply --server-side -k manifests/, as the README
// says), and removes the operator (not the CRD, nor the caches) when the test ends, pointing the
// CRD's conversion webhook back at the address the other tests' operators serve.
func deploy(t *testing.T, c *framework.Cluster) {
	t.Helper()
	ctx := context.Background()
	cmd := exec.CommandContext(ctx, filepath.Join(c.Root, "hack", "deploy.sh"))
	cmd.Env = append(cmd.Environ(), "KUBECTL="+filepath.Join(c.Root, "bin", "cluster", "kubectl")+" --kubeconfig "+c.Kubeconfig)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/deploy.sh: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := c.Kubectl(ctx, "patch", "crd", "managedcaches.cache.example.com", "--type=merge", "-p",
			`{"spec":{"conversion":{"webhook":{"clientConfig":{"service":null,"url":"https://127.0.0.1:9443/convert"}}}}}`); err != nil {
			t.Logf("cleanup: %v\n%s", err, out)
		}
		for _, args := range [][]string{
			{"delete", "deployment", "cache-operator", "-n", opNS, "--ignore-not-found", "--wait=true", "--timeout=90s"},
			{"delete", "service,poddisruptionbudget", "-l", "app.kubernetes.io/name=cache-operator", "-n", opNS, "--ignore-not-found"},
			{"delete", "poddisruptionbudget", "cache-operator", "-n", opNS, "--ignore-not-found"},
			{"delete", "lease", "cache-operator", "-n", opNS, "--ignore-not-found"},
			{"delete", "validatingwebhookconfiguration", "cache-operator", "--ignore-not-found"},
		} {
			if out, err := c.Kubectl(ctx, args...); err != nil {
				t.Logf("cleanup %v: %v\n%s", args, err, out)
			}
		}
	})
}

// waitAvailable waits until the Deployment has all its replicas Ready and up to date, and returns
// how long that took.
func waitAvailable(t *testing.T, c *framework.Cluster, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	framework.Eventually(t, timeout, "the operator Deployment to have 2 ready, updated replicas", func() (bool, string, error) {
		d, err := c.Kube.AppsV1().Deployments(opNS).Get(context.Background(), "cache-operator", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		s := d.Status
		return s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == 2 && s.ReadyReplicas == 2 && s.Replicas == 2,
			fmt.Sprintf("replicas %d, updated %d, ready %d; pods: %s", s.Replicas, s.UpdatedReplicas, s.ReadyReplicas, podSummary(c)), nil
	})
	return time.Since(start)
}

func podSummary(c *framework.Cluster) string {
	pods, err := c.Kube.CoreV1().Pods(opNS).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, p := range pods.Items {
		out = append(out, fmt.Sprintf("%s on %s %s ready=%v", p.Name, p.Spec.NodeName, p.Status.Phase, framework.PodReady(&p)))
	}
	return strings.Join(out, "; ")
}

// leader returns the pod name of the Lease holder ("" when there is none).
func leader(c *framework.Cluster) (string, error) {
	l, err := c.Kube.CoordinationV1().Leases(opNS).Get(context.Background(), "cache-operator", metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if l.Spec.HolderIdentity == nil {
		return "", nil
	}
	pod, _, _ := strings.Cut(*l.Spec.HolderIdentity, "_")
	return pod, nil
}

func cacheDoc(ns, name string, replicas int) string {
	return fmt.Sprintf("apiVersion: cache.example.com/v2\nkind: ManagedCache\nmetadata: {name: %s, namespace: %s}\n"+
		"spec: {replicas: %d, engine: {version: \"7.2\"}, storage: {size: 1Gi}}\n", name, ns, replicas)
}

func apply(t *testing.T, c *framework.Cluster, doc string) {
	t.Helper()
	if err := c.ApplyServerSide(context.Background(), doc); err != nil {
		t.Fatal(err)
	}
}

// serviceRecreated deletes the cache's Service and waits until the operator has recreated it:
// proof that a leader reconciles. It returns how long that took.
func serviceRecreated(t *testing.T, c *framework.Cluster, ns, name string, timeout time.Duration) time.Duration {
	t.Helper()
	ctx := context.Background()
	old, err := c.Kube.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := c.Kube.CoreV1().Services(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, timeout, "the deleted Service to be recreated", func() (bool, string, error) {
		s, err := c.Kube.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, "not yet; leader " + must(leader(c)), nil
		}
		return err == nil && s.UID != old.UID, "", err
	})
	return time.Since(start)
}

func must(s string, err error) string {
	if err != nil {
		return err.Error()
	}
	return s
}

// conversionProbe reads the caches through v1, which the API server converts through the webhook
// Service, every 100 ms until stop is called; it returns how many reads failed and the first error.
func conversionProbe(c *framework.Cluster, ns string) (stop func() (ok, failed int64, first string)) {
	var okN, failedN atomic.Int64
	var firstErr atomic.Value
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := c.Dynamic.Resource(mcV1).Namespace(ns).List(ctx, metav1.ListOptions{})
			cancel()
			if err != nil {
				failedN.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
			} else {
				okN.Add(1)
			}
		}
	}()
	return func() (int64, int64, string) {
		close(done)
		wg.Wait()
		first, _ := firstErr.Load().(string)
		return okN.Load(), failedN.Load(), first
	}
}

// warnings returns the Warning Events of the caches in ns since t0.
func warnings(t *testing.T, c *framework.Cluster, ns string, t0 time.Time) []string {
	t.Helper()
	evs, err := c.Kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "type=Warning"})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range evs.Items {
		if e.InvolvedObject.Kind == "ManagedCache" && !e.LastTimestamp.Time.Before(t0.Truncate(time.Second)) {
			out = append(out, e.Reason+": "+e.Message)
		}
	}
	return out
}

func TestDeployedOperator(t *testing.T) {
	c := framework.Setup(t)
	ctx := context.Background()
	start := time.Now()
	deploy(t, c)
	waitAvailable(t, c, 3*time.Minute)
	t.Logf("deployed: 2 replicas Ready %v after kubectl apply began", time.Since(start).Round(100*time.Millisecond))
	ns := c.RealNamespace(t, "deployed")
	apply(t, c, cacheDoc(ns, "sessions", 3))
	c.WaitCacheReady(t, ns, "sessions", 3, 3*time.Minute)
	t.Logf("the cache on the real nodes Ready %v after the deploy began", time.Since(start).Round(100*time.Millisecond))
	pods, err := c.Kube.CoreV1().Pods(opNS).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" || !strings.HasPrefix(p.Spec.NodeName, "real-") {
			t.Errorf("operator pod %s runs on %q, want a real node", p.Name, p.Spec.NodeName)
		}
	}

	t.Run("leader failover", func(t *testing.T) {
		old, err := leader(c)
		if err != nil || old == "" {
			t.Fatalf("no leader: %q, %v", old, err)
		}
		t0 := time.Now()
		if err := c.Kube.CoreV1().Pods(opNS).Delete(ctx, old, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		framework.Eventually(t, time.Minute, "another replica to take the lease", func() (bool, string, error) {
			now, err := leader(c)
			return now != "" && now != old, "holder " + now, err
		})
		t.Logf("leader %s deleted: a new leader in %v", old, time.Since(t0).Round(100*time.Millisecond))
		t.Logf("the new leader recreated a deleted child in %v", serviceRecreated(t, c, ns, "sessions", time.Minute).Round(100*time.Millisecond))
		waitAvailable(t, c, 2*time.Minute)
	})

	t.Run("upgrade", func(t *testing.T) {
		t0 := time.Now()
		stopProbe := conversionProbe(c, ns)
		// A rolling change of the Deployment, as a new release would make.
		if out, err := c.Kubectl(ctx, "patch", "deployment", "cache-operator", "-n", opNS, "--type=json", "-p",
			`[{"op":"add","path":"/spec/template/spec/containers/0/args/-","value":"--workers=3"}]`); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		apply(t, c, cacheDoc(ns, "during-upgrade", 1))
		rollout := waitAvailable(t, c, 3*time.Minute)
		okReads, failedReads, first := stopProbe()
		t.Logf("rolling upgrade done in %v; v1 reads through the conversion webhook during it: %d ok, %d failed", rollout.Round(100*time.Millisecond), okReads, failedReads)
		if failedReads > 0 {
			t.Errorf("%d of %d conversion reads failed during the rolling upgrade; first: %s", failedReads, okReads+failedReads, first)
		}
		c.WaitCacheReady(t, ns, "during-upgrade", 1, 2*time.Minute)
		serviceRecreated(t, c, ns, "sessions", time.Minute)
		if w := warnings(t, c, ns, t0); len(w) > 0 {
			t.Errorf("Warning Events during the upgrade (a failed reconcile): %v", w)
		}
	})

	t.Run("cold start", func(t *testing.T) {
		// Caches stored as v1, as before the storage version moved to v2: listing them in v2 needs
		// the conversion webhook, reached through the Service, which routes only to Ready pods.
		setStorageVersion(t, c, "v1")
		for i := 0; i < 3; i++ {
			doc := fmt.Sprintf("apiVersion: cache.example.com/v1\nkind: ManagedCache\nmetadata: {name: old-%d, namespace: %s}\nspec: {size: 1, version: \"7.2\", storageGi: 1}\n", i, ns)
			apply(t, c, doc)
		}
		setStorageVersion(t, c, "v2")
		stored := storedVersions(t, c)
		if !strings.Contains(stored, "v1") {
			t.Fatalf("storedVersions %s; want v1 among them", stored)
		}
		// Every operator pod at once.
		current, err := c.Kube.CoreV1().Pods(opNS).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		if out, err := c.Kubectl(ctx, "delete", "pods", "-n", opNS, "-l", selector, "--wait=false"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		waitGone(t, c, current.Items)
		t.Logf("all operator pods deleted at once: the old ones gone %v later (SIGTERM, shutdown)", time.Since(t0).Round(100*time.Millisecond))
		waitAvailable(t, c, 3*time.Minute)
		t.Logf("all operator pods deleted at once: both Ready again %v later", time.Since(t0).Round(100*time.Millisecond))
		for i := 0; i < 3; i++ {
			c.WaitCacheReady(t, ns, fmt.Sprintf("old-%d", i), 1, 2*time.Minute)
		}
		framework.Eventually(t, time.Minute, "the storage migration to record only v2", func() (bool, string, error) {
			s := storedVersions(t, c)
			return s == `["v2"]`, s, nil
		})
		t.Logf("cold start to caches stored as v1 migrated and Ready: %v", time.Since(t0).Round(100*time.Millisecond))
	})

	t.Run("whole cluster restart", func(t *testing.T) {
		began := time.Now()
		took := c.RestartCluster(t)
		t0 := time.Now()
		t.Logf("cluster restarted in %v (real nodes and their pods stopped, control plane stopped and started)", took.Round(100*time.Millisecond))
		// The pods' processes died with their nodes: wait for new ones, not for the stale status.
		waitPodsReadySince(t, c, opNS, selector, 2, began)
		t.Logf("after the restart: both operator replicas running again and Ready in %v", time.Since(t0).Round(100*time.Millisecond))
		waitPodsReadySince(t, c, ns, "app.kubernetes.io/instance=sessions", 3, began)
		c.WaitCacheReady(t, ns, "sessions", 3, 3*time.Minute)
		t.Logf("after the restart: the cache's members Ready again in %v", time.Since(t0).Round(100*time.Millisecond))
		t.Logf("after the restart: a change reconciled %v later (a new leader waits for the killed leader's lease to expire)",
			serviceRecreated(t, c, ns, "sessions", time.Minute).Round(100*time.Millisecond))
	})
}

// waitPodsReadySince waits until want pods matching selector in ns are Ready, each having become
// Ready after since (so a status from before a restart does not count).
func waitPodsReadySince(t *testing.T, c *framework.Cluster, ns, selector string, want int, since time.Time) {
	t.Helper()
	framework.Eventually(t, 3*time.Minute, fmt.Sprintf("%d pods %s in %s Ready again", want, selector, ns), func() (bool, string, error) {
		pods, err := c.Kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, "", err
		}
		n := 0
		var seen []string
		for _, p := range pods.Items {
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady {
					fresh := cond.Status == corev1.ConditionTrue && !cond.LastTransitionTime.Time.Before(since.Truncate(time.Second))
					if fresh {
						n++
					}
					seen = append(seen, fmt.Sprintf("%s Ready=%s since %s", p.Name, cond.Status, cond.LastTransitionTime.Format(time.TimeOnly)))
				}
			}
		}
		return n >= want, strings.Join(seen, "; "), nil
	})
}

func waitGone(t *testing.T, c *framework.Cluster, pods []corev1.Pod) {
	t.Helper()
	framework.Eventually(t, time.Minute, "the old operator pods to be gone", func() (bool, string, error) {
		for _, p := range pods {
			cur, err := c.Kube.CoreV1().Pods(opNS).Get(context.Background(), p.Name, metav1.GetOptions{})
			if err == nil && cur.UID == p.UID {
				return false, p.Name + " still there", nil
			}
		}
		return true, "", nil
	})
}

func storedVersions(t *testing.T, c *framework.Cluster) string {
	t.Helper()
	out, err := c.Kubectl(context.Background(), "get", "crd", "managedcaches.cache.example.com", "-o", "jsonpath={.status.storedVersions}")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// setStorageVersion makes version the CRD's storage version.
func setStorageVersion(t *testing.T, c *framework.Cluster, version string) {
	t.Helper()
	v1, v2 := version == "v1", version == "v2"
	patch := fmt.Sprintf(`[{"op":"replace","path":"/spec/versions/0/storage","value":%v},{"op":"replace","path":"/spec/versions/1/storage","value":%v}]`, v1, v2)
	if out, err := c.Kubectl(context.Background(), "patch", "crd", "managedcaches.cache.example.com", "--type=json", "-p", patch); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}
