package operator

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"example.com/cache-operator/e2e/framework"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// scrape reads and parses /metrics at addr.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scraping %s: %v", addr, err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing the metrics of %s: %v", addr, err)
	}
	return fams
}

// value sums the samples of family name whose labels include want (counter, gauge, or a
// histogram's sample count).
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	f := fams[name]
	if f == nil {
		return 0
	}
	total := 0.0
next:
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if labels[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			total += m.GetCounter().GetValue()
		case m.Gauge != nil:
			total += m.GetGauge().GetValue()
		case m.Histogram != nil:
			total += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return total
}

func httpStatus(url string) int {
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestMetricsAndHealth scrapes the operator while a cache converges: the figures move as the
// work does.
func TestMetricsAndHealth(t *testing.T) {
	c := framework.Setup(t)
	ctx := context.Background()
	ns := c.Namespace(t, "metrics")
	const metrics, health = "127.0.0.1:18080", "127.0.0.1:18081"
	startOperator(t, c, "--metrics-bind-address="+metrics, "--health-probe-bind-address="+health)
	deleteCachesOnCleanup(t, c, ns)
	framework.Eventually(t, 30*time.Second, "/readyz to answer 200", func() (bool, string, error) {
		code := httpStatus("http://" + health + "/readyz")
		return code == 200, fmt.Sprintf("status %d", code), nil
	})
	if code := httpStatus("http://" + health + "/healthz"); code != 200 {
		t.Errorf("/healthz answered %d", code)
	}
	before := scrape(t, metrics)
	if _, err := applyYAML(ctx, c, v1Doc(ns, "m", 3, "7.2")); err != nil {
		t.Fatal(err)
	}
	waitReady(t, c, ns, "m", 3, 2*time.Minute)
	var after map[string]*dto.MetricFamily
	framework.Eventually(t, 30*time.Second, "the fleet gauge to count the Ready cache", func() (bool, string, error) {
		after = scrape(t, metrics)
		n := value(after, "cache_operator_managedcaches", map[string]string{"ready": "True"})
		return n >= 1, fmt.Sprintf("ready=True: %v", n), nil
	})
	for _, tc := range []struct {
		name   string
		labels map[string]string
	}{
		{"cache_operator_reconcile_total", map[string]string{"result": "success"}},
		{"cache_operator_reconcile_duration_seconds", map[string]string{"result": "success"}},
		{"cache_operator_children_total", map[string]string{"kind": "StatefulSet", "outcome": "created"}},
		{"cache_operator_children_total", map[string]string{"kind": "Secret", "outcome": "created"}},
		{"cache_operator_children_total", map[string]string{"outcome": "unchanged"}},
		{"workqueue_adds_total", map[string]string{"name": "managedcache"}},
		{"workqueue_work_duration_seconds", map[string]string{"name": "managedcache"}},
		{"rest_client_requests_total", map[string]string{"code": "201", "method": "POST"}},
		{"rest_client_request_duration_seconds", map[string]string{"verb": "PATCH"}},
	} {
		b, a := value(before, tc.name, tc.labels), value(after, tc.name, tc.labels)
		if a <= b {
			t.Errorf("%s%v did not move: %v before, %v after", tc.name, tc.labels, b, a)
		}
	}
	for _, name := range []string{"workqueue_depth", "workqueue_retries_total", "workqueue_unfinished_work_seconds",
		"workqueue_longest_running_processor_seconds", "workqueue_queue_duration_seconds", "cache_operator_reconcile_errors_total"} {
		if after[name] == nil {
			t.Errorf("%s is not exposed", name)
		}
	}
	// Bounded cardinality: no metric carries a cache's name but the per-member series
	// (TestMemberMetricsOnRealNodes counts those), whose labels are the cache's and its members'.
	for name, f := range after {
		if strings.HasPrefix(name, "cache_operator_member_") && name != "cache_operator_member_polls_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if strings.Contains(l.GetValue(), ns) {
					t.Errorf("%s has a per-object label %s=%s", name, l.GetName(), l.GetValue())
				}
			}
		}
	}
}

// leaseHolder returns the holder of the operator's Lease and when it was acquired.
func leaseHolder(c *framework.Cluster) (string, time.Time, error) {
	l, err := c.Kube.CoordinationV1().Leases("cache-operator-system").Get(context.Background(), "cache-operator", metav1.GetOptions{})
	if err != nil {
		return "", time.Time{}, err
	}
	var acquired time.Time
	if l.Spec.AcquireTime != nil {
		acquired = l.Spec.AcquireTime.Time
	}
	if l.Spec.HolderIdentity == nil {
		return "", acquired, nil
	}
	return *l.Spec.HolderIdentity, acquired, nil
}

// TestLeaderElection: two replicas, exactly one reconciles; the leader is paused (SIGSTOP) past its
// lease while 20 caches converge, the other takes over within the lease duration, every cache
// changes, then the old leader is resumed: the audit log shows no write of it after the takeover
// (its writes are fenced by the lease; without the fence it wrote Events and children), and it
// exits non-zero. Every cache converges with one child of each kind and its password intact.
// Then a SIGTERM hands the lease over at once: released, not left to expire.
func TestLeaderElection(t *testing.T) {
	c := framework.Setup(t)
	ctx := context.Background()
	ns := c.Namespace(t, "leader")
	const leaseDuration = 8 * time.Second
	election := []string{"--leader-elect", "--leader-elect-lease-duration=8s", "--leader-elect-renew-deadline=5s", "--leader-elect-retry-period=1s"}
	ops := map[string]*operator{}
	for _, id := range []string{"replica-a", "replica-b"} {
		ops[id] = startOperator(t, c, append(election, "--identity="+id)...)
	}
	var leader string
	framework.Eventually(t, 30*time.Second, "a leader", func() (bool, string, error) {
		h, _, err := leaseHolder(c)
		leader = h
		return ops[h] != nil, "holder " + h, err
	})
	follower := "replica-a"
	if leader == follower {
		follower = "replica-b"
	}
	deleteCachesOnCleanup(t, c, ns)

	const n = 20
	names := make([]string, n)
	var wg sync.WaitGroup
	for i := range names {
		names[i] = fmt.Sprintf("ha-%02d", i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			createCache(t, c, ns, names[i], map[string]interface{}{"size": int64(3), "version": "7.2", "storageGi": int64(1)})
		}()
	}
	wg.Wait()
	reconciled := func(op *operator) int {
		total := 0
		for _, name := range names {
			total += op.reconciles(ns, name)
		}
		return total
	}
	framework.Eventually(t, time.Minute, "the leader to make progress", func() (bool, string, error) {
		got := reconciled(ops[leader])
		return got >= 10, fmt.Sprintf("%d reconciles", got), nil
	})
	if got := reconciled(ops[follower]); got != 0 {
		t.Fatalf("the follower %s reconciled %d times while %s led", follower, got, leader)
	}
	passwords := map[string]string{}
	for _, name := range names {
		if _, err := getChild(c, "Secret", ns, name); err == nil {
			passwords[name] = password(t, c, ns, name)
		}
	}

	// Pause the leader past its lease (SIGSTOP: a stalled process or VM), let the follower take
	// over, give the paused leader work it would do on waking (every cache changes), then resume it.
	// It must not write once it has lost the lease, and it must exit.
	old := ops[leader]
	if err := old.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	var acquired time.Time
	framework.Eventually(t, 3*leaseDuration, "the follower to take the lease", func() (bool, string, error) {
		h, at, err := leaseHolder(c)
		acquired = at
		return h == follower, "holder " + h, err
	})
	// The takeover is measured to the lease's acquireTime (written by the new leader; one
	// machine, one clock). A follower polls every retry period plus up to 1.2x jitter (1s to
	// 2.2s): it sees the last renewal up to one poll late, and the expiry up to one poll late.
	takeover := acquired.Sub(paused)
	bound := leaseDuration + 2*time.Duration(2.2*float64(time.Second))
	t.Logf("takeover: the follower acquired the lease %s after the leader was paused (lease duration %s, retry period 1s)",
		takeover.Round(10*time.Millisecond), leaseDuration)
	if takeover <= 0 || takeover > bound {
		t.Errorf("takeover took %s; want within the lease duration plus two polls of the follower (%s)", takeover, bound)
	}
	for _, name := range names {
		if _, err := c.Kubectl(ctx, "annotate", "managedcache", name, "-n", ns, "poke=after-pause", "--overwrite"); err != nil {
			t.Fatal(err)
		}
	}
	err := old.resume(3 * leaseDuration)
	t.Logf("the resumed old leader exited: %v", err)
	if err == nil {
		t.Errorf("the old leader exited with status 0 after losing the lease")
	}
	start := time.Now()
	for _, name := range names {
		waitReady(t, c, ns, name, 3, 3*time.Minute)
	}
	t.Logf("all %d caches Ready %s after the takeover", n, time.Since(start).Round(100*time.Millisecond))
	for name, pw := range passwords {
		if got := password(t, c, ns, name); got != pw {
			t.Errorf("the password of %s changed across the takeover", name)
		}
	}
	for kind, ch := range children {
		list, err := c.Dynamic.Resource(ch.gvr).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=cache-operator"})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != n*ch.count {
			t.Errorf("%d %s children for %d caches; want %d each", len(list.Items), kind, n, ch.count)
		}
	}
	// No write by the old leader after the kill; none by the follower before the takeover.
	framework.Eventually(t, 10*time.Second, "the audit log to have the new leader's writes", func() (bool, string, error) {
		events, err := c.AuditEvents()
		if err != nil {
			return false, "", err
		}
		var bad []string
		newLeaderWrites, oldLeaderWrites := 0, 0
		for _, ev := range events {
			if ev.ObjectRef == nil || ev.ObjectRef.Namespace != ns {
				continue
			}
			switch {
			case strings.Contains(ev.UserAgent, leader) && !ev.RequestReceivedTimestamp.Before(acquired):
				bad = append(bad, fmt.Sprintf("old leader %s %s/%s at %s", ev.Verb, ev.ObjectRef.Resource, ev.ObjectRef.Name, ev.RequestReceivedTimestamp))
			case strings.Contains(ev.UserAgent, leader):
				oldLeaderWrites++
			case strings.Contains(ev.UserAgent, follower) && ev.RequestReceivedTimestamp.Before(paused):
				bad = append(bad, fmt.Sprintf("follower %s %s/%s before the takeover", ev.Verb, ev.ObjectRef.Resource, ev.ObjectRef.Name))
			case strings.Contains(ev.UserAgent, follower):
				newLeaderWrites++
			}
		}
		if len(bad) > 0 {
			sort.Strings(bad)
			t.Fatalf("writes by a replica that did not hold the lease: %v", bad)
		}
		return newLeaderWrites > 0 && oldLeaderWrites > 0, fmt.Sprintf("%d writes by the old leader before the takeover, %d by the new leader", oldLeaderWrites, newLeaderWrites), nil
	})

	// Graceful handover: a SIGTERM releases the lease, so a waiting replica takes it at once.
	ops["replica-c"] = startOperator(t, c, append(election, "--identity=replica-c")...)
	deleteCachesOnCleanup(t, c, ns) // again: cleanups run last-in first-out, and replica-c must still run
	framework.Eventually(t, 30*time.Second, "replica-c to follow", func() (bool, string, error) {
		code := 0
		b, _ := readFile(ops["replica-c"].log)
		if strings.Contains(b, `"Following the leader" leader="`+follower+`"`) {
			code = 1
		}
		return code == 1, "", nil
	})
	terminated := time.Now()
	ops[follower].stop(syscall.SIGTERM) // returns once the process has exited
	// A released lease names no holder (or already the next one); an abandoned one still names
	// the exited replica until it expires.
	if h, _, err := leaseHolder(c); err != nil || h == follower {
		t.Errorf("after %s exited the lease names %q (%v); want it released", follower, h, err)
	}
	var handover time.Duration
	framework.Eventually(t, 3*leaseDuration, "replica-c to take the lease", func() (bool, string, error) {
		h, _, err := leaseHolder(c)
		handover = time.Since(terminated)
		return h == "replica-c", "holder " + h, err
	})
	t.Logf("graceful handover: %s after SIGTERM", handover.Round(10*time.Millisecond))
	if handover >= leaseDuration {
		t.Errorf("handover took %s, as long as a lease left to expire (%s): the lease was not released", handover, leaseDuration)
	}
	if b, _ := readFile(ops[follower].log); !strings.Contains(b, "Released the lease") {
		t.Errorf("%s did not log releasing the lease", follower)
	}
}
