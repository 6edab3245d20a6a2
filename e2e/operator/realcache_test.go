package operator

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"example.com/cache-operator/e2e/framework"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// redisCLI runs this machine's redis-cli against host. The password goes through REDISCLI_AUTH,
// never on the command line.
func redisCLI(ctx context.Context, host, password string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "redis-cli", append([]string{"-h", host, "-p", "6379"}, args...)...)
	cmd.Env = append(os.Environ(), "REDISCLI_AUTH="+password)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// serverProcess returns the PID of the redis-server process in a pod's container, found through
// /proc: its cgroup is the pod's on a real node (localcluster/node names it <parent>/<pod UID>/<container>).
func serverProcess(pod *corev1.Pod) string {
	entries, _ := os.ReadDir("/proc")
	marker := "/" + string(pod.UID) + "/redis"
	for _, e := range entries {
		comm, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err != nil || strings.TrimSpace(string(comm)) != "redis-server" {
			continue
		}
		cg, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if err == nil && strings.Contains(string(cg), marker) {
			return e.Name()
		}
	}
	return ""
}

// TestCacheOnRealNodes: the operator's cache is three real redis-server processes that demand the
// Secret's password and replicate from the primary the operator chose (status.primary).
func TestCacheOnRealNodes(t *testing.T) {
	parallel(t)
	c := framework.Setup(t)
	ctx := context.Background()
	ns := c.RealNamespace(t, "real")
	startOperatorIn(t, c, ns)
	deleteCachesOnCleanup(t, c, ns)
	createCache(t, c, ns, "sessions", map[string]interface{}{
		"size": int64(3), "version": "7.2", "storageGi": int64(1), "evictionPolicy": "allkeys-lru",
	})
	start := time.Now()
	mc := waitReady(t, c, ns, "sessions", 3, 3*time.Minute)
	t.Logf("size-3 cache Ready on real nodes %s after creation", time.Since(start).Round(100*time.Millisecond))
	// A healthy start is a quiet one: checked once the test's other steps have given every Event
	// of the start time to arrive, and before the link break below (which does warn).
	readyAt := conditionOf(mc, "Ready").LastTransitionTime.Time
	t.Cleanup(func() { assertNoWarnings(t, c, ns, readyAt) })

	pods := make([]*corev1.Pod, 3)
	pids := map[string]bool{}
	for i := range pods {
		p, err := c.Kube.CoreV1().Pods(ns).Get(ctx, fmt.Sprintf("sessions-%d", i), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pods[i] = p
		if !strings.HasPrefix(p.Spec.NodeName, "real-") {
			t.Fatalf("%s runs on %q, not on a real node", p.Name, p.Spec.NodeName)
		}
		pid := serverProcess(p)
		if pid == "" {
			t.Fatalf("no redis-server process for %s (UID %s) on this machine", p.Name, p.UID)
		}
		pids[pid] = true
		latency := "?"
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				latency = cond.LastTransitionTime.Sub(p.CreationTimestamp.Time).String()
			}
		}
		t.Logf("%s: node %s, IP %s, redis-server PID %s, pod created -> Ready %s (1 s resolution)", p.Name, p.Spec.NodeName, p.Status.PodIP, pid, latency)
	}
	if len(pids) != 3 {
		t.Fatalf("want three distinct redis-server processes, found %v", pids)
	}

	pw := password(t, c, ns, "sessions")
	primaryName := statusPrimary(t, c, ns, "sessions")
	var primary *corev1.Pod
	var replicas []*corev1.Pod
	for _, p := range pods {
		if p.Name == primaryName {
			primary = p
		} else {
			replicas = append(replicas, p)
		}
	}
	if primary == nil || len(replicas) != 2 {
		t.Fatalf("status.primary %q is not one of the three members", primaryName)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if out, _ := redisCLI(cctx, primary.Status.PodIP, "", "ping"); !strings.Contains(out, "NOAUTH") {
		t.Errorf("ping without a password: want NOAUTH, got %q", out)
	}
	if out, _ := redisCLI(cctx, primary.Status.PodIP, "not-the-password", "ping"); !strings.Contains(out, "WRONGPASS") {
		t.Errorf("ping with a wrong password: want WRONGPASS, got %q", out)
	}
	if out, err := redisCLI(cctx, primary.Status.PodIP, pw, "ping"); out != "PONG" {
		t.Fatalf("ping with the Secret's password: %q %v", out, err)
	}
	value := fmt.Sprintf("written-%d", time.Now().UnixNano())
	if out, err := redisCLI(cctx, primary.Status.PodIP, pw, "set", "e2e:key", value); out != "OK" {
		t.Fatalf("SET on the primary %s: %q %v", primary.Name, out, err)
	}
	for _, p := range replicas {
		framework.Eventually(t, 30*time.Second, "the key replicated to "+p.Name, func() (bool, string, error) {
			gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			out, err := redisCLI(gctx, p.Status.PodIP, pw, "get", "e2e:key")
			return out == value, out, err
		})
		if role, err := roleOf(p.Status.PodIP, pw); role != "slave" {
			t.Errorf("%s: INFO replication says role %q (%v), want a replica", p.Name, role, err)
		}
	}
	// kubectl exec reaches the server inside the pod, as the README shows: redis-cli there
	// authenticates as the internal user with the mounted password.
	out, err := c.Exec(ctx, ns, "sessions-0", "redis", "sh", "-c", `REDISCLI_AUTH="$(cat /var/run/cache/internal/internal-password)" redis-cli --user internal ping`)
	if err != nil || strings.TrimSpace(out) != "PONG" {
		t.Errorf("kubectl exec sessions-0 -- redis-cli --user internal ping: %q %v", out, err)
	}
}

// TestStaleReplicaIsNotReady: a replica whose link to the primary is down (here its masterauth,
// the internal user's password, made wrong) answers PING but is not Ready, so it leaves
// the Services' endpoints and the cache counts it out; once the link is back it is Ready again.
func TestStaleReplicaIsNotReady(t *testing.T) {
	parallel(t)
	ctx := context.Background()
	rc := newRealCache(t, "stale", "s")
	c, ns := rc.c, rc.ns
	replicaName := "s-2"
	if rc.primary.Name == replicaName {
		replicaName = "s-1"
	}
	replica, err := c.Kube.CoreV1().Pods(ns).Get(ctx, replicaName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cli := func(args ...string) string {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		out, err := redisCLI(cctx, replica.Status.PodIP, internalPassword(t, c, ns, "s"), append([]string{"--user", "internal"}, args...)...)
		if err != nil {
			t.Fatalf("redis-cli %v: %q %v", args, out, err)
		}
		return out
	}
	cli("config", "set", "masterauth", "not-the-password")
	cli("client", "kill", "type", "master")
	broke := time.Now()
	framework.Eventually(t, time.Minute, replicaName+" unready with its link down, the cache counting 2 members", func() (bool, string, error) {
		p, err := c.Kube.CoreV1().Pods(ns).Get(ctx, replicaName, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		mc, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Get(ctx, "s", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		ready, _, _ := unstructured.NestedInt64(mc.Object, "status", "readyReplicas")
		link := cli("info", "replication")
		return !framework.PodReady(p) && ready == 2, fmt.Sprintf("pod Ready %v, cache readyReplicas %d, link %v", framework.PodReady(p), ready,
			strings.Contains(link, "master_link_status:up")), nil
	})
	t.Logf("a replica with its link down was unready %v after the link broke", time.Since(broke).Round(100*time.Millisecond))
	if out := cli("ping"); out != "PONG" {
		t.Errorf("the stale replica answers PING with %q; the point is that PING alone says nothing", out)
	}
	cli("config", "set", "masterauth", internalPassword(t, c, ns, "s"))
	framework.Eventually(t, time.Minute, replicaName+" Ready again once its link is up", func() (bool, string, error) {
		p, err := c.Kube.CoreV1().Pods(ns).Get(ctx, replicaName, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return framework.PodReady(p), fmt.Sprintf("pod Ready %v", framework.PodReady(p)), nil
	})
	waitReady(t, c, ns, "s", 3, time.Minute)
}

// assertNoWarnings fails the test when a Warning Event in ns (which holds one cache: the Events
// name the cache or its children) happened no later than until (second resolution, as Events).
func assertNoWarnings(t *testing.T, c *framework.Cluster, ns string, until time.Time) {
	t.Helper()
	events, err := c.Kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Errorf("listing the Events of %s: %v", ns, err)
		return
	}
	seen, before := 0, 0
	for _, e := range events.Items {
		when := e.FirstTimestamp.Time
		if when.IsZero() {
			when = e.EventTime.Time
		}
		if when.After(until.Truncate(time.Second)) {
			continue
		}
		before++
		if e.Type != corev1.EventTypeWarning {
			continue
		}
		seen++
		t.Errorf("Warning Event before Ready: %s %s/%s %s (x%d): %.300s", when.Format(time.RFC3339), e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, max(e.Count, 1), e.Message)
	}
	t.Logf("%d Warning Events of %d Events in %s until Ready at %s (%d Events so far)", seen, before, ns, until.Format(time.RFC3339), len(events.Items))
}
