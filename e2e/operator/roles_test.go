package operator

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"example.com/cache-operator/e2e/framework"
)

const roleLabel = "cache.example.com/role"

// clusterIP returns the ClusterIP of a Service: this machine routes the cluster's Service range
// into the cluster's network namespace, so tests reach Services as clients in pods do.
func clusterIP(t *testing.T, c *framework.Cluster, ns, name string) string {
	t.Helper()
	svc, err := c.Kube.CoreV1().Services(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Service %s/%s: %v", ns, name, err)
	}
	return svc.Spec.ClusterIP
}

// newClient is a client with short bounds and no retries: a failed write is seen as failed.
func newClient(addr, pw string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, Password: pw, DialTimeout: 500 * time.Millisecond,
		ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond, MaxRetries: -1, PoolSize: 1,
		Protocol: 2, DisableIdentity: true})
}

// bulkClient is newClient with bounds for a loaded machine: for pipelines (a 1,000-key seed, a
// 2 MiB fill), reads of many keys, a WAIT of up to 10 s, and loads whose assertion is that every
// operation succeeds, not how fast (side by side with other tests, a 500 ms bound timed out a few
// operations in 10,000). Still no retries: a refused or failed operation is counted, not hidden.
func bulkClient(addr, pw string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, Password: pw, DialTimeout: 2 * time.Second, ReadTimeout: 15 * time.Second,
		WriteTimeout: 15 * time.Second, MaxRetries: -1, PoolSize: 1, Protocol: 2, DisableIdentity: true})
}

// memberPods returns a cache's pods by name.
func memberPods(t *testing.T, c *framework.Cluster, ns, cache string) []corev1.Pod {
	t.Helper()
	list, err := c.Kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + cache})
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	return list.Items
}

// statusPrimary returns status.primary of a cache.
func statusPrimary(t *testing.T, c *framework.Cluster, ns, cache string) string {
	t.Helper()
	mc, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Get(context.Background(), cache, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p, _, _ := unstructured.NestedString(mc.Object, "status", "primary")
	return p
}

// waitWhole waits until the cache is Ready with n members, a primary in status that is the one
// pod labelled primary, every replica in sync, and no member pod being deleted (a pod deleted
// after its handover looks whole while it terminates; the next fault must see its successor,
// with the successor's address); it returns the primary's pod.
func waitWhole(t *testing.T, c *framework.Cluster, ns, cache string, n int64, timeout time.Duration) *corev1.Pod {
	t.Helper()
	waitReady(t, c, ns, cache, n, timeout)
	var primary *corev1.Pod
	framework.Eventually(t, timeout, ns+"/"+cache+" whole: one labelled primary, named in status, not Degraded", func() (bool, string, error) {
		mc, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Get(context.Background(), cache, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		sp, _, _ := unstructured.NestedString(mc.Object, "status", "primary")
		degraded := ""
		conds, _, _ := unstructured.NestedSlice(mc.Object, "status", "conditions")
		for _, cd := range conds {
			if m, _ := cd.(map[string]interface{}); m["type"] == "Degraded" {
				degraded = fmt.Sprintf("%v/%v", m["status"], m["reason"])
			}
		}
		primary = nil
		var labelled, leaving []string
		for _, p := range memberPods(t, c, ns, cache) {
			if p.DeletionTimestamp != nil {
				leaving = append(leaving, p.Name) // replaced: its successor is not there yet
			}
			if p.Labels[roleLabel] == "primary" {
				labelled = append(labelled, p.Name)
				pp := p
				primary = &pp
			}
		}
		return len(labelled) == 1 && labelled[0] == sp && degraded == "False/AllMembersHealthy" && len(leaving) == 0,
			fmt.Sprintf("status.primary %q, labelled %v, Degraded %s, being deleted %v", sp, labelled, degraded, leaving), nil
	})
	return primary
}

// TestRoutingThroughServices: at sizes 1, 3 (valkey) and 5, writes through the read-write Service's
// ClusterIP, from this machine and from a pod, never meet a replica (0 READONLY in 10,000 each),
// the read-only Service reaches replicas only, and kubectl shows the primary.
func TestRoutingThroughServices(t *testing.T) {
	parallel(t)
	c := framework.Setup(t)
	ctx := context.Background()
	ns := c.RealNamespace(t, "routing")
	startOperatorIn(t, c, ns)
	deleteCachesOnCleanup(t, c, ns)
	sizes := []int64{1, 3, 5}
	for _, n := range sizes {
		// Size 3 runs engine valkey (Valkey 8.1 on the local nodes): the same protocol, the same
		// roles.
		engine := map[string]interface{}{"name": "redis", "version": "7.2"}
		if n == 3 {
			engine = map[string]interface{}{"name": "valkey", "version": "8.0"}
		}
		mc := &unstructured.Unstructured{Object: map[string]interface{}{
			"apiVersion": "cache.example.com/v2", "kind": "ManagedCache",
			"metadata": map[string]interface{}{"name": fmt.Sprintf("r%d", n), "namespace": ns},
			"spec":     map[string]interface{}{"replicas": n, "engine": engine, "storage": map[string]interface{}{"size": "1Gi"}},
		}}
		if _, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Create(ctx, mc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range sizes {
		name := fmt.Sprintf("r%d", n)
		primary := waitWhole(t, c, ns, name, n, 3*time.Minute)
		pw := password(t, c, ns, name)
		assertOnePrimary(t, c, ns, name, pw, "creation")
		out, err := c.Kubectl(ctx, "get", "managedcache", name, "-n", ns, "-o", "wide")
		if err != nil || !strings.Contains(out, "PRIMARY") || !strings.Contains(out, primary.Name) {
			t.Errorf("kubectl get -o wide does not show the primary %s: %v\n%s", primary.Name, err, out)
		}

		// From this machine: 200 connections of 50 writes each, so kube-proxy picks anew 200 times.
		rw := net.JoinHostPort(clusterIP(t, c, ns, name+"-rw"), "6379")
		readonly, failed := 0, 0
		var firstErr error
		for conn := 0; conn < 200; conn++ {
			cl := bulkClient(rw, pw)
			for i := 0; i < 50; i++ {
				// 5 s: a write that meets a replica answers READONLY at once; the bound is only
				// for a loaded machine, where 1 s once timed out 4 writes of 10,000 (and the
				// client's own 500 ms bound, one).
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err := cl.Incr(cctx, "host-writes").Err()
				cancel()
				switch {
				case err != nil && strings.Contains(err.Error(), "READONLY"):
					readonly++
				case err != nil:
					failed++
					if firstErr == nil {
						firstErr = err
					}
				}
			}
			cl.Close()
		}
		cl := newClient(rw, pw)
		got, err := cl.Get(ctx, "host-writes").Int()
		cl.Close()
		t.Logf("size %d: 10,000 writes from this machine through %s-rw: %d READONLY, %d other errors, counter %d", n, name, readonly, failed, got)
		if readonly != 0 || failed != 0 || got != 10000 || err != nil {
			t.Errorf("size %d: from this machine %d READONLY, %d failed (first: %v), counter %d (%v); want 0, 0, 10000", n, readonly, failed, firstErr, got, err)
		}

		// From a pod (a member's container has its engine's CLI, redis-cli or valkey-cli): 200
		// connections of 50 INCRs, as the clients' user (the internal user has no key); the
		// password on standard input.
		cli := "redis-cli"
		if n == 3 {
			cli = "valkey-cli" // the valkey image's, as in the official one
		}
		script := fmt.Sprintf(`read -r REDISCLI_AUTH; export REDISCLI_AUTH; for i in $(seq 200); do %[3]s --no-auth-warning -h %[1]s-rw -r 50 incr pod-writes; done | grep -c READONLY; %[3]s --no-auth-warning -h %[2]s-rw get pod-writes`, name, name, cli)
		out, err = c.ExecInput(ctx, ns, name+"-0", "redis", pw+"\n", "sh", "-c", script)
		lines := strings.Fields(out)
		t.Logf("size %d: 10,000 writes from pod %s-0 through %s-rw: READONLY count and counter: %v", n, name, name, lines)
		if len(lines) != 2 || lines[0] != "0" || lines[1] != "10000" {
			t.Errorf("size %d: from a pod: %q (%v); want 0 READONLY and the counter at 10000", n, out, err)
		}

		if n > 1 {
			// The read-only Service reaches replicas: reads work, writes are refused.
			ro := net.JoinHostPort(clusterIP(t, c, ns, name+"-ro"), "6379")
			framework.Eventually(t, time.Minute, name+"-ro serving reads from a replica", func() (bool, string, error) {
				cl := newClient(ro, pw)
				defer cl.Close()
				cctx, cancel := context.WithTimeout(ctx, time.Second)
				defer cancel()
				v, err := cl.Get(cctx, "host-writes").Result()
				werr := cl.Set(cctx, "x", "y", 0).Err()
				return v == "10000" && werr != nil && strings.Contains(werr.Error(), "READONLY"),
					fmt.Sprintf("read %q %v, write %v", v, err, werr), nil
			})
		}
		assertOnePrimary(t, c, ns, name, pw, "routing")
	}
	// Idle and healthy: members polled every second, and not one API write in 10 s.
	idle := time.Now()
	time.Sleep(10 * time.Second) // an observation window, not synchronisation
	if w := operatorWrites(t, c, ns, idle); len(w) != 0 {
		t.Errorf("the operator wrote while three healthy caches were idle: %v", w)
	} else {
		t.Logf("3 idle healthy caches (9 members): 0 API writes by the operator in 10 s")
	}
}

// TestFailoverAfterCrash: with a steady writer, the primary's container is SIGKILLed 5 times (the
// fault campaign adds more); a replica takes over each time (or the primary restarts in place
// first), and writes through the read-write Service succeed again.
func TestFailoverAfterCrash(t *testing.T) {
	runFailovers(t, "crash", 5, 5*time.Second, func(t *testing.T, c *framework.Cluster, p *corev1.Pod) {
		c.CrashContainer(t, p, "redis")
	}, nil)
}

// TestFailoverAfterNodeLoss: the primary's node is stopped 5 times (its agent and every process
// of its pods killed; the node object stays, its pods are not evicted): a replica takes over.
func TestFailoverAfterNodeLoss(t *testing.T) {
	runFailovers(t, "node", 5, 15*time.Second, func(t *testing.T, c *framework.Cluster, p *corev1.Pod) {
		c.StopNode(t, p.Spec.NodeName)
	}, func(t *testing.T, c *framework.Cluster, p *corev1.Pod) {
		c.StartNode(t, p.Spec.NodeName)
	})
}

// realCache is a size-3 cache on the real nodes, managed by an operator of the test's own,
// whole: its primary's pod, its password and the read-write Service's address.
type realCache struct {
	c              *framework.Cluster
	ns             string
	primary        *corev1.Pod
	password, addr string
	op             *operator
}

func newRealCache(t *testing.T, nsPrefix, name string, operatorArgs ...string) realCache {
	t.Helper()
	return newRealCacheAt(t, nsPrefix, name, "7.2", operatorArgs...)
}

// newRealCacheAt is newRealCache of redis at version.
func newRealCacheAt(t *testing.T, nsPrefix, name, version string, operatorArgs ...string) realCache {
	t.Helper()
	c := framework.Setup(t)
	ns := c.RealNamespace(t, nsPrefix)
	op := startOperatorIn(t, c, ns, operatorArgs...)
	deleteCachesOnCleanup(t, c, ns)
	dumpMembersOnFailure(t, c, ns, name)
	createCache(t, c, ns, name, map[string]interface{}{"size": int64(3), "version": version, "storageGi": int64(1)})
	primary := waitWhole(t, c, ns, name, 3, 3*time.Minute)
	return realCache{c: c, ns: ns, primary: primary, password: password(t, c, ns, name),
		addr: net.JoinHostPort(clusterIP(t, c, ns, name+"-rw"), "6379"), op: op}
}

func runFailovers(t *testing.T, what string, rounds int, p50Target time.Duration, kill, heal func(*testing.T, *framework.Cluster, *corev1.Pod)) {
	rc := newRealCache(t, "fo-"+what, "f")
	c, ns, pw, rw := rc.c, rc.ns, rc.password, rc.addr
	w := startWriter(t, rw, pw, 2_000_000, 25*time.Minute)
	var times []time.Duration
	var lostPer []int
	for round := 1; round <= rounds; round++ {
		primary := waitWhole(t, c, ns, "f", 3, 3*time.Minute)
		assertOnePrimary(t, c, ns, "f", pw, fmt.Sprintf("%s round %d: before", what, round))
		w.waitOK(t, time.Now(), time.Minute)
		before := len(w.lost(t, rw, pw))
		t0 := time.Now()
		kill(t, c, primary)
		d := w.waitFailedThenOK(t, t0, 2*time.Minute)
		times = append(times, d)
		newPrimary := statusPrimary(t, c, ns, "f")
		assertOnePrimary(t, c, ns, "f", pw, fmt.Sprintf("%s round %d: after the failover", what, round))
		if heal != nil {
			heal(t, c, primary)
		}
		waitWhole(t, c, ns, "f", 3, 3*time.Minute)
		assertOnePrimary(t, c, ns, "f", pw, fmt.Sprintf("%s round %d: healed", what, round))
		lost := len(w.lost(t, rw, pw)) - before
		lostPer = append(lostPer, lost)
		t.Logf("%s round %d: primary %s -> %s; writes through f-rw succeed again %v after the kill; %d acknowledged writes lost",
			what, round, primary.Name, newPrimary, d.Round(10*time.Millisecond), lost)
	}
	w.halt()
	failed, kinds := w.failedTime()
	maxLost := 0
	for _, l := range lostPer {
		maxLost = max(maxLost, l)
	}
	total := len(w.lost(t, rw, pw))
	t.Logf("%s: %d failovers: writes succeed again after p50 %v, max %v (target p50 <= %v); acknowledged writes lost per failover %v (max %d, total %d of %d); writes failed for %v in all, by kind %v",
		what, rounds, percentile(times, 0.5).Round(10*time.Millisecond), percentile(times, 1).Round(10*time.Millisecond), p50Target,
		lostPer, maxLost, total, len(w.acked), failed.Round(10*time.Millisecond), kinds)
	if p50 := percentile(times, 0.5); p50 > p50Target {
		t.Errorf("%s: p50 %v above the target %v", what, p50, p50Target)
	}
}

// TestEmptyRestartLosesNothing: the primary's data is deleted and its server restarted: it comes
// back empty as a replica, a replica with the data is promoted, and no key is lost.
func TestEmptyRestartLosesNothing(t *testing.T) {
	parallel(t)
	ctx := context.Background()
	rc := newRealCache(t, "empty", "e")
	c, ns, primary, pw, rw := rc.c, rc.ns, rc.primary, rc.password, rc.addr
	cl := bulkClient(rw, pw)
	defer cl.Close()
	const keys = 1001
	pipe := cl.Pipeline()
	for i := 0; i < keys; i++ {
		pipe.Set(ctx, fmt.Sprintf("k:%d", i), i, 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	// WAIT: both replicas have every write before the data goes.
	if n, err := cl.Do(ctx, "WAIT", 2, 10000).Int(); err != nil || n != 2 {
		t.Fatalf("WAIT 2: %d replicas acknowledged (%v)", n, err)
	}
	dir := dataDir(t, c, ns, primary.Name)
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("deleted the data of primary %s (%d entries in %s) and crashed it", primary.Name, len(entries), dir)
	c.CrashContainer(t, primary, "redis")
	framework.Eventually(t, 2*time.Minute, "another member primary", func() (bool, string, error) {
		p := statusPrimary(t, c, ns, "e")
		return p != "" && p != primary.Name, "status.primary " + p, nil
	})
	assertOnePrimary(t, c, ns, "e", pw, "the empty restart")
	waitWhole(t, c, ns, "e", 3, 3*time.Minute)
	for _, p := range memberPods(t, c, ns, "e") {
		mcl := newClient(net.JoinHostPort(p.Status.PodIP, "6379"), pw)
		framework.Eventually(t, time.Minute, p.Name+" holding every key", func() (bool, string, error) {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			n, err := mcl.DBSize(cctx).Result()
			return n == keys, fmt.Sprintf("%d keys (%v)", n, err), nil
		})
		mcl.Close()
	}
	t.Logf("after the empty restart of %s: %s is primary and all 3 members hold the %d keys: 0 lost", primary.Name, statusPrimary(t, c, ns, "e"), keys)
}

// dataDir returns the folder on this machine behind a member's volume (the local provisioner's
// hostPath).
func dataDir(t *testing.T, c *framework.Cluster, ns, pod string) string {
	t.Helper()
	ctx := context.Background()
	pvc, err := c.Kube.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data-"+pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv, err := c.Kube.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil || pv.Spec.HostPath == nil {
		t.Fatalf("volume of %s: %v (not a hostPath volume?)", pod, err)
	}
	return pv.Spec.HostPath.Path
}

// TestVersionChangeAndSwitchover: a version change of a size-3 cache under a steady writer rolls
// the replicas first, hands over, then restarts the old primary; then a switchover asked for by
// annotation. Writes fail for at most a moment, and no acknowledged write is lost.
func TestVersionChangeAndSwitchover(t *testing.T) {
	ctx := context.Background()
	rc := newRealCacheAt(t, "roll", "v", "7.0")
	c, ns, pw, rw := rc.c, rc.ns, rc.password, rc.addr
	wantServers(t, serverOf(t, c, ns, "v"), "redis", "7.0.", "before the roll")
	data := fillAndFingerprint(t, c, ns, "v", rc.primary.Name)
	w := startWriter(t, rw, pw, 2_000_000, 10*time.Minute)
	w.waitOK(t, time.Now(), time.Minute)

	r := rollTo(t, c, ns, "v", pw, rc.primary, `{"version":"8.0"}`)
	after := r.after
	wantServers(t, serverOf(t, c, ns, "v"), "redis", "8.0.", "after the roll")
	failed, kinds := w.failedTime()
	t.Logf("redis 7.0 -> 8.0 of a size-3 cache under a steady writer: rolled in %v, order %v, primary %s -> %s; writes failed for %v in all (target <= 2s), by kind %v",
		r.took.Round(100*time.Millisecond), r.order, r.before.Name, after.Name, failed.Round(10*time.Millisecond), kinds)
	if failed > 2*time.Second {
		t.Errorf("writes failed for %v during the version change; target <= 2s", failed)
	}
	// Back down: refused (8.0 writes a snapshot format 7.0 cannot read).
	_, err := c.Kubectl(ctx, "patch", "managedcaches.v2.cache.example.com", "v", "-n", ns, "--type=merge", "-p", `{"spec":{"engine":{"version":"7.0"}}}`)
	wantRejected(t, "redis 8.0 -> 7.0", err, "spec.engine: changing from redis 8.0 to redis 7.0 would lose the data: redis 7.0 reads snapshot formats up to 10 and the data is in format 12")
	t.Logf("redis 8.0 -> 7.0 refused: %v", err)

	// A switchover by annotation, to a replica: v-2 (then a scale-down to 2 removes the primary's
	// ordinal), or v-0 if v-2 is the primary already.
	target := "v-2"
	if after.Name == target {
		target = "v-0"
	}
	failedBefore, _ := w.failedTime()
	t0 := time.Now()
	annotate := []byte(fmt.Sprintf(`{"metadata":{"annotations":{"cache.example.com/switchover-to":%q}}}`, target))
	if _, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Patch(ctx, "v", types.MergePatchType, annotate, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, time.Minute, target+" primary and the annotation removed", func() (bool, string, error) {
		mc, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Get(ctx, "v", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		p, _, _ := unstructured.NestedString(mc.Object, "status", "primary")
		_, annotated := mc.GetAnnotations()["cache.example.com/switchover-to"]
		return p == target && !annotated, fmt.Sprintf("primary %s, annotation present %v", p, annotated), nil
	})
	switched := time.Since(t0)
	waitWhole(t, c, ns, "v", 3, 3*time.Minute)
	assertOnePrimary(t, c, ns, "v", pw, "the switchover")
	failedAfter, _ := w.failedTime()
	t.Logf("switchover %s -> %s by annotation: done in %v, writes failed for %v",
		after.Name, target, switched.Round(10*time.Millisecond), (failedAfter - failedBefore).Round(10*time.Millisecond))

	// A scale-down that removes the primary's ordinal hands over first.
	if target == "v-2" {
		t1 := time.Now()
		if _, err := c.Kubectl(ctx, "scale", "managedcache", "v", "-n", ns, "--replicas=2"); err != nil {
			t.Fatal(err)
		}
		framework.Eventually(t, 2*time.Minute, "v at 2 members with a primary among them", func() (bool, string, error) {
			pods := memberPods(t, c, ns, "v")
			p := statusPrimary(t, c, ns, "v")
			assertOnePrimary(t, c, ns, "v", pw, "a step of the scale-down")
			return len(pods) == 2 && (p == "v-0" || p == "v-1"), fmt.Sprintf("%d pods, primary %q", len(pods), p), nil
		})
		waitWhole(t, c, ns, "v", 2, 2*time.Minute)
		failedScale, _ := w.failedTime()
		t.Logf("scale-down 3 -> 2 removing the primary v-2: handed over to %s, done in %v, writes failed for %v",
			statusPrimary(t, c, ns, "v"), time.Since(t1).Round(100*time.Millisecond), (failedScale - failedAfter).Round(10*time.Millisecond))
	}
	w.halt()
	lost := w.lost(t, rw, pw)
	t.Logf("acknowledged writes lost over the roll, the switchover and the scale-down: %d of %d", len(lost), len(w.acked))
	if len(lost) != 0 {
		t.Errorf("%d acknowledged writes lost in planned changes (first %v)", len(lost), lost[:min(5, len(lost))])
	}
	checkDataSurvived(t, c, ns, "v", data)
}

// TestExistingCacheMovesToRoles: a cache made by the operator before roles (member 0 the primary
// by its ordinal, one headless Service, rendered here from testdata/legacy-templates) is handed
// to today's operator. It adopts member 0 as the primary (it holds the data), creates the -rw and
// -ro Services, and rolls the members replicas first with a handover at the end; a client of the
// read-write Service sees at most the handover, and no key is lost.
func TestExistingCacheMovesToRoles(t *testing.T) {
	c := framework.Setup(t)
	ctx := context.Background()
	legacy, err := filepath.Abs("testdata/legacy-templates")
	if err != nil {
		t.Fatal(err)
	}
	// The old operator had no member passes: with no network it may dial, it observes nothing.
	ns := c.RealNamespace(t, "legacy")
	old := startOperatorIn(t, c, ns, "--templates-dir="+legacy, "--member-networks=192.0.2.1/32")
	deleteCachesOnCleanup(t, c, ns)
	createCache(t, c, ns, "m", map[string]interface{}{"size": int64(3), "version": "7.2", "storageGi": int64(1)})
	waitReady(t, c, ns, "m", 3, 3*time.Minute)
	pw := password(t, c, ns, "m")
	m0, err := c.Kube.CoreV1().Pods(ns).Get(ctx, "m-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var role string
	framework.Eventually(t, 30*time.Second, "legacy m-0 to answer ROLE from this machine", func() (bool, string, error) {
		var err error
		role, err = roleOf(m0.Status.PodIP, pw)
		return err == nil, fmt.Sprint(err), nil
	})
	if role != "master" {
		t.Fatalf("legacy m-0 is %q; want the primary by its ordinal", role)
	}
	cl := newClient(net.JoinHostPort(m0.Status.PodIP, "6379"), pw)
	const keys = 500
	for i := 0; i < keys; i++ {
		if err := cl.Set(ctx, fmt.Sprintf("old:%d", i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	cl.Close()
	if _, err := c.Kube.CoreV1().Services(ns).Get(ctx, "m-rw", metav1.GetOptions{}); err == nil {
		t.Fatal("the legacy templates made a read-write Service")
	}
	old.stop(syscall.SIGTERM)

	startOperatorIn(t, c, ns)
	start := time.Now()
	framework.Eventually(t, time.Minute, "m-rw created and m-0 adopted as primary", func() (bool, string, error) {
		_, err := c.Kube.CoreV1().Services(ns).Get(ctx, "m-rw", metav1.GetOptions{})
		p := statusPrimary(t, c, ns, "m")
		return err == nil && p == "m-0", fmt.Sprintf("m-rw: %v; status.primary %q", err, p), nil
	})
	rw := net.JoinHostPort(clusterIP(t, c, ns, "m-rw"), "6379")
	w := startWriter(t, rw, pw, 2_000_000, 10*time.Minute)
	framework.Eventually(t, 5*time.Minute, "every member restarted on the new templates", func() (bool, string, error) {
		var old []string
		for _, p := range memberPods(t, c, ns, "m") {
			for _, e := range p.Spec.Containers[0].Env {
				if e.Name == "PRIMARY_HOST" && e.Value != "m-rw."+ns+".svc.cluster.local" {
					old = append(old, p.Name)
				}
			}
		}
		assertOnePrimary(t, c, ns, "m", pw, "a step of the move")
		return len(old) == 0, fmt.Sprintf("members still on the legacy template: %v", old), nil
	})
	after := waitWhole(t, c, ns, "m", 3, 3*time.Minute)
	w.halt()
	failed, kinds := w.failedTime()
	lost := w.lost(t, rw, pw)
	oldLost := 0
	rcl := newClient(rw, pw)
	defer rcl.Close()
	for i := 0; i < keys; i++ {
		if err := rcl.Get(ctx, fmt.Sprintf("old:%d", i)).Err(); err != nil {
			oldLost++
		}
	}
	t.Logf("legacy cache moved to roles in %v: primary m-0 -> %s; writes through m-rw failed for %v (by kind %v; windows %v); acknowledged writes lost %d of %d; legacy keys lost %d of %d",
		time.Since(start).Round(100*time.Millisecond), after.Name, failed.Round(10*time.Millisecond), kinds, w.failedWindows(), len(lost), len(w.acked), oldLost, keys)
	if len(lost) != 0 || oldLost != 0 {
		t.Errorf("keys lost in the move: %d acknowledged writes, %d legacy keys", len(lost), oldLost)
	}
	if failed > 2*time.Second {
		t.Errorf("writes through m-rw failed for %v during the move; want at most the handover (<= 2s); failures: %v", failed, w.failedWindows())
	}
}
