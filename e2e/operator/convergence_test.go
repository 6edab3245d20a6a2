package operator

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"example.com/cache-operator/e2e/framework"
	"example.com/cache-operator/engine/app"
	"example.com/cache-operator/engine/controller"
	"example.com/cache-operator/engine/dataplane"
	"example.com/cache-operator/engine/render"
	"example.com/cache-operator/engine/webhook"
	"example.com/cache-operator/templates"
)

// TestCrashConvergence creates 20 caches at once and kills the operator with SIGKILL at several
// moments of their convergence: every cache still ends Ready with exactly one child of each kind,
// and no password ever changes.
func TestCrashConvergence(t *testing.T) {
	parallel(t)
	c := framework.Setup(t)
	ctx := context.Background()
	ns := c.Namespace(t, "crash")
	const n = 20
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("cache-%02d", i)
	}
	start := time.Now()
	var wg sync.WaitGroup
	for _, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			createCache(t, c, ns, name, map[string]interface{}{"size": int64(3), "version": "7.2", "storageGi": int64(1)})
		}()
	}
	wg.Wait()

	// The password Secret is created once: its UID and its password never change. (The audit
	// log cannot count creates: a create in flight when the operator is killed is stored but
	// logged with the 504 the vanished client caused.)
	passwords, uids := map[string]string{}, map[string]string{}
	checkPasswords := func(moment string) {
		for _, name := range names {
			secret, err := getChild(c, "Secret", ns, name)
			if err != nil {
				continue // not created yet
			}
			pw := password(t, c, ns, name)
			if old, seen := passwords[name]; seen && (old != pw || uids[name] != string(secret.GetUID())) {
				t.Fatalf("%s: the password Secret of %s was replaced or its password changed", moment, name)
			}
			passwords[name], uids[name] = pw, string(secret.GetUID())
		}
	}
	logged := func(op *operator) int {
		total := 0
		for _, name := range names {
			total += op.reconciles(ns, name)
		}
		return total
	}
	// Kill after the 1st, the 5th and the 20th reconcile logged by each fresh process (a fresh
	// process reconciles every cache at least once, so 20 is always reached).
	for _, after := range []int{1, 5, n} {
		op := startOperatorIn(t, c, ns)
		base := logged(op)
		framework.Eventually(t, time.Minute, fmt.Sprintf("%d reconciles before the kill", after), func() (bool, string, error) {
			got := logged(op) - base
			return got >= after, fmt.Sprintf("%d reconciles", got), nil
		})
		op.stop(syscall.SIGKILL)
		checkPasswords(fmt.Sprintf("after the kill at %d reconciles", after))
	}
	startOperatorIn(t, c, ns)
	deleteCachesOnCleanup(t, c, ns)
	for _, name := range names {
		waitReady(t, c, ns, name, 3, 3*time.Minute)
	}
	t.Logf("%d caches of size 3 Ready %s after creation, through 3 SIGKILLs of the operator", n, time.Since(start).Round(100*time.Millisecond))
	checkPasswords("at the end")
	if len(passwords) != n {
		t.Fatalf("%d passwords, want %d", len(passwords), n)
	}

	// Exactly one child of each kind per cache.
	for kind, ch := range children {
		list, err := c.Dynamic.Resource(ch.gvr).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=cache-operator"})
		if err != nil {
			t.Fatal(err)
		}
		per := map[string]int{}
		for _, o := range list.Items {
			per[o.GetLabels()["app.kubernetes.io/instance"]]++
		}
		for _, name := range names {
			if per[name] != ch.count {
				t.Errorf("%s: %d %s children, want %d", name, per[name], kind, ch.count)
			}
		}
	}
}

// countingTransport counts the HTTP requests a client sends.
type countingTransport struct {
	next http.RoundTripper
	n    atomic.Int64
	mu   sync.Mutex
	last []string
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	c.mu.Lock()
	c.last = append(c.last, r.Method+" "+r.URL.Path)
	c.mu.Unlock()
	return c.next.RoundTrip(r)
}

// TestNoOpReconcileMakesNoRequests runs the controller in this process with a client that counts
// requests: a reconcile of a cache that is already right sends none (reads come from informers).
func TestNoOpReconcileMakesNoRequests(t *testing.T) {
	c := framework.Setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	ns := c.Namespace(t, "noop")

	// The operator's own wiring (engine/app) with a client that counts every request it sends.
	counter := &countingTransport{}
	ctrl := startInProcess(t, c, ctx, cancel, func(rt http.RoundTripper) http.RoundTripper { counter.next = rt; return counter })
	deleteCachesOnCleanup(t, c, ns)

	createCache(t, c, ns, "quiet", map[string]interface{}{"version": "7.2", "size": int64(3)})
	waitReady(t, c, ns, "quiet", 3, 2*time.Minute)

	for i := 0; i < 5; i++ {
		// Let the events of the last writes arrive, so that the next reconcile is a no-op: wait
		// until two polls in a row see the same reconcile count.
		// Events are sent asynchronously, so the request count must settle too.
		lastR, lastN := int64(-1), int64(-1)
		framework.Eventually(t, 30*time.Second, "the controller to be idle", func() (bool, string, error) {
			r, n := ctrl.Reconciles(), counter.n.Load()
			idle := r == lastR && n == lastN
			lastR, lastN = r, n
			return idle, fmt.Sprintf("reconciles=%d requests=%d", r, n), nil
		})
		reconciles, requests := ctrl.Reconciles(), counter.n.Load()
		counter.mu.Lock()
		counter.last = nil
		counter.mu.Unlock()
		// The annotation is written by the test's own client, not the counted one.
		if _, err := c.Kubectl(context.Background(), "annotate", "managedcache", "quiet", "-n", ns, fmt.Sprintf("reconcile=force-%d", i), "--overwrite"); err != nil {
			t.Fatal(err)
		}
		framework.Eventually(t, 30*time.Second, "the controller to reconcile", func() (bool, string, error) {
			return ctrl.Reconciles() > reconciles, "", nil
		})
		if d := counter.n.Load() - requests; d != 0 {
			counter.mu.Lock()
			sent := append([]string(nil), counter.last...)
			counter.mu.Unlock()
			sort.Strings(sent)
			t.Fatalf("no-op reconcile %d sent %d API requests: %s", i+1, d, strings.Join(sent, "; "))
		}
	}
	t.Logf("5 no-op reconciles: 0 API requests")
}

// startInProcess runs the operator's own wiring (engine/app) in this process until the test ends,
// its client's transport wrapped by wrap, its log in a file like the operator processes' logs; it
// returns the controller once its caches are synced. cancel stops it.
func startInProcess(t *testing.T, c *framework.Cluster, ctx context.Context, cancel context.CancelFunc, wrap func(http.RoundTripper) http.RoundTripper) *controller.Controller {
	t.Helper()
	logFile, err := os.Create(filepath.Join(c.Dir, "operator-inprocess.log"))
	if err != nil {
		t.Fatal(err)
	}
	klog.LogToStderr(false)
	klog.SetOutput(logFile)
	t.Cleanup(func() { klog.Flush(); klog.LogToStderr(true); logFile.Close() })
	rc := rest.CopyConfig(c.Config)
	rc.Wrap(wrap)
	started := make(chan *controller.Controller, 1)
	done := make(chan error, 1)
	go func() {
		done <- app.Run(ctx, app.Config{
			RESTConfig: rc, OnStarted: func(c *controller.Controller) { started <- c },
			Templates: templates.FS, QPS: 200, Burst: 400, Namespace: "cache-operator-system", Identity: "inprocess",
			Controller: controller.Options{Render: render.DefaultConfig()}, Workers: 2, Members: dataplane.Options{MemberNetworks: framework.MemberIPNets()},
			Webhook: webhook.Options{Port: 9444, Endpoint: webhook.Endpoint{URL: "https://127.0.0.1:9444"}, Namespace: "cache-operator-system",
				SecretName: "cache-operator-webhook-tls", CertLifetime: 365 * 24 * time.Hour},
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("in-process operator: %v", err)
		}
	})
	select {
	case ctrl := <-started:
		return ctrl
	case err := <-done:
		t.Fatalf("in-process operator stopped: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the in-process operator did not sync its caches within a minute")
	}
	return nil
}
