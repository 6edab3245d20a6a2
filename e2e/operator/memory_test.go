package operator

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"example.com/cache-operator/e2e/framework"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestMemoryDoesNotGrowWithForeignObjects measures the operator's memory with N caches, then
// after F objects that are not its own (Secrets, Services, StatefulSets) appear in the cluster:
// its informers watch only what carries its labels, so the foreign objects never reach it.
// CACHE_SCALE_CACHES and CACHE_SCALE_FOREIGN set N and F (defaults 50 and 6000; the README's
// figure is N=1000, F=10000). Before the informers were label-selected, the RSS grew by 52 MiB
// with 10,000 such objects (about 31 MiB at the default 6,000), so the 10 MiB bound can fail.
func TestMemoryDoesNotGrowWithForeignObjects(t *testing.T) {
	c := framework.Setup(t)
	ctx := context.Background()
	n, f := envInt("CACHE_SCALE_CACHES", 50), envInt("CACHE_SCALE_FOREIGN", 6000)
	ns := c.Namespace(t, "mem")
	foreignNS := c.Namespace(t, "foreign")
	metrics := freeAddr(t)
	op := startOperator(t, c, "--metrics-bind-address="+metrics, "--kube-api-qps=300", "--kube-api-burst=600", "--workers=8")
	deleteCachesOnCleanup(t, c, ns)
	start := time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			createCache(t, c, ns, fmt.Sprintf("m%04d", i), map[string]interface{}{"size": int64(1), "version": "7.2", "storageGi": int64(1)})
		}()
	}
	wg.Wait()
	settled := func(what string) float64 {
		t.Helper()
		var rss float64
		framework.Eventually(t, 15*time.Minute, what, func() (bool, string, error) {
			list, err := c.Kube.AppsV1().StatefulSets(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=cache-operator"})
			if err != nil {
				return false, "", err
			}
			depth, err := framework.Metric(metrics, "workqueue_depth")
			if err != nil {
				return false, "", err
			}
			rss, err = framework.RSSMiB(op.cmd.Process.Pid)
			return len(list.Items) == n && depth == 0, fmt.Sprintf("%d/%d StatefulSets, queue depth %v, RSS %.1f MiB", len(list.Items), n, depth, rss), err
		})
		// The highest RSS over a few seconds of quiet.
		for i := 0; i < 10; i++ {
			if r, err := framework.RSSMiB(op.cmd.Process.Pid); err == nil && r > rss {
				rss = r
			}
			time.Sleep(500 * time.Millisecond) // sampling, not synchronisation
		}
		return rss
	}
	base := settled(fmt.Sprintf("%d caches reconciled", n))
	heap, _ := framework.Metric(metrics, "go_memstats_heap_inuse_bytes")
	t.Logf("%d caches reconciled in %v: operator RSS %.1f MiB, heap in use %.1f MiB", n, time.Since(start).Round(time.Second), base, heap/(1<<20))

	fstart := time.Now()
	if err := c.CreateForeignObjects(ctx, foreignNS, f); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d foreign objects (Secrets, headless Services, StatefulSets) created in %v", f, time.Since(fstart).Round(time.Second))
	after := settled("the operator quiet again")
	heap2, _ := framework.Metric(metrics, "go_memstats_heap_inuse_bytes")
	t.Logf("with %d foreign objects: operator RSS %.1f MiB (%+.1f MiB), heap in use %.1f MiB", f, after, after-base, heap2/(1<<20))
	if after-base > 10 {
		t.Errorf("the operator's RSS grew by %.1f MiB with %d objects that are not its own; want under 10 MiB", after-base, f)
	}
}
