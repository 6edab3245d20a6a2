package operator

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"example.com/cache-operator/e2e/framework"
)

// Failures that are not polite, on the real nodes, each with writers that record every
// acknowledged write: an asymmetric partition of the primary, a primary crash while the operator
// is away, and planned removals of the primary (delete, eviction).

// discardedEvents sums the bytes the operator's WritesDiscarded Events of a cache report, and
// counts the Events that could not measure.
func discardedEvents(t *testing.T, c *framework.Cluster, ns, cache string) (bytes int64, unmeasured int, msgs []string) {
	t.Helper()
	list, err := c.Kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=WritesDiscarded"})
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`acknowledged (\d+) bytes`)
	for _, e := range list.Items {
		if e.InvolvedObject.Name != cache {
			continue
		}
		msgs = append(msgs, e.Message)
		if m := re.FindStringSubmatch(e.Message); m != nil {
			n, _ := strconv.ParseInt(m[1], 10, 64)
			bytes += n * int64(max(e.Count, 1))
		} else {
			unmeasured++
		}
	}
	return bytes, unmeasured, msgs
}

// eventCount counts a cache's Events with reason.
func eventCount(t *testing.T, c *framework.Cluster, ns, cache, reason string) int {
	t.Helper()
	list, err := c.Kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=" + reason})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range list.Items {
		if e.InvolvedObject.Name == cache {
			n += int(max(e.Count, 1))
		}
	}
	return n
}

// clientHosts returns the addresses of the normal clients of the server at ip (a member of cache)
// other than the 127.0.0.1 probes: the operator's connection, and test clients.
func clientHosts(t *testing.T, c *framework.Cluster, ns, cache, ip string) []string {
	t.Helper()
	cl := adminClient(t, c, ns, cache, ip)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	list, err := cl.Do(ctx, "CLIENT", "LIST", "TYPE", "normal").Text()
	if err != nil {
		t.Fatalf("CLIENT LIST on %s: %v", ip, err)
	}
	seen := map[string]bool{}
	var hosts []string
	for _, line := range strings.Split(list, "\n") {
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "addr="); ok {
				if h, _, err := net.SplitHostPort(v); err == nil && h != "127.0.0.1" && !seen[h] {
					seen[h] = true
					hosts = append(hosts, h)
				}
			}
		}
	}
	return hosts
}

// lastAckOf returns when the latest of the given acknowledged writes was acknowledged.
func (w *writer) lastAckOf(keys []int) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	var last time.Time
	for _, k := range keys {
		if at := w.acked[k]; at.After(last) {
			last = at
		}
	}
	return last
}

// TestAsymmetricPartition: the primary of a size-3 cache is cut off from the operator and both
// replicas for 20 s, but not from a client that keeps its connection. The operator fails over; the
// old primary stops acknowledging writes within the fence's bound (min-replicas-max-lag 5 s); when
// the partition heals it rejoins as a replica, its clients are disconnected, and the writes it
// acknowledged alone are lost and reported (Event WritesDiscarded and the metric). A client that
// reconnects writes again within 10 s.
func TestAsymmetricPartition(t *testing.T) {
	metricsAddr := freeAddr(t)
	rc := newRealCache(t, "partition", "p", "--metrics-bind-address="+metricsAddr)
	c, ns, pw, rw, old := rc.c, rc.ns, rc.password, rc.addr, rc.primary
	kept := startWriterWith(t, rw, pw, "kept:", false, 2_000_000, 10*time.Minute)
	again := startWriterWith(t, rw, pw, "again:", true, 2_000_000, 10*time.Minute)
	kept.waitOK(t, time.Now(), time.Minute)
	again.waitOK(t, time.Now(), time.Minute)
	keep := kept.serverSideAddr(t)
	cut := clientHosts(t, c, ns, "p", old.Status.PodIP) // the operator (and the writers: all from this machine)
	for _, p := range memberPods(t, c, ns, "p") {
		if p.Name != old.Name {
			cut = append(cut, p.Status.PodIP)
		}
	}
	t0 := time.Now()
	heal := c.Partition(t, old, cut, []string{keep})
	t.Logf("partitioned primary %s from %v, keeping the writer's connection %s", old.Name, cut, keep)
	framework.Eventually(t, 30*time.Second, "another member promoted", func() (bool, string, error) {
		p := statusPrimary(t, c, ns, "p")
		return p != "" && p != old.Name, "status.primary " + p, nil
	})
	promoted := time.Since(t0)
	// The fault lasts 20 s: longer than the failover delay and the fence's bound together.
	time.Sleep(time.Until(t0.Add(20 * time.Second))) // the fault's duration, not synchronisation
	heal()
	healed := time.Since(t0)
	waitWhole(t, c, ns, "p", 3, 3*time.Minute)
	assertOnePrimary(t, c, ns, "p", pw, "the healed partition")
	// Its connection was closed by the operator: it writes again through the read-write Service.
	kept.waitOK(t, time.Now(), time.Minute)
	kept.halt()
	again.halt()

	lost := kept.lost(t, rw, pw)
	lostAgain := again.lost(t, rw, pw)
	lastLost := kept.lastAckOf(lost)
	bytes, unmeasured, msgs := discardedEvents(t, c, ns, "p")
	metric, err := framework.Metric(metricsAddr, "cache_operator_writes_discarded_bytes_total")
	if err != nil {
		t.Fatal(err)
	}
	worst := again.longestStall(t0)
	t.Logf("asymmetric partition of %s for %v: promoted another after %v; the kept connection: %d of %d acknowledged writes lost, the last acknowledged %v after the cut; the reconnecting writer: %d of %d lost, longest without writes %v; reported discarded: %d bytes in Events (%d unmeasured), metric %v; %v",
		old.Name, healed.Round(100*time.Millisecond), promoted.Round(100*time.Millisecond), len(lost), len(kept.acked),
		lastLost.Sub(t0).Round(100*time.Millisecond), len(lostAgain), len(again.acked), worst.Round(100*time.Millisecond), bytes, unmeasured, metric, msgs)
	if len(lost) > 0 && lastLost.Sub(t0) > 10*time.Second {
		t.Errorf("the cut-off primary acknowledged a write %v after the cut; the fence bounds it to 10 s", lastLost.Sub(t0))
	}
	if len(lost)+len(lostAgain) > 0 && (bytes == 0 || metric == 0) {
		t.Errorf("%d acknowledged writes lost, but the operator reported %d bytes discarded (metric %v)", len(lost)+len(lostAgain), bytes, metric)
	}
	if worst > 10*time.Second {
		t.Errorf("the writer that reconnects went %v without writes; target <= 10 s", worst)
	}
}

// TestPrimaryCrashWithoutOperator: the operator is stopped, then the primary's server is
// SIGKILLed: its container restarts as the primary with its data (its pod's role label, through
// the downward API), writes succeed again without any operator, and nothing is lost.
func TestPrimaryCrashWithoutOperator(t *testing.T) {
	rc := newRealCache(t, "absent", "a")
	c, ns, pw, rw, primary := rc.c, rc.ns, rc.password, rc.addr, rc.primary
	w := startWriter(t, rw, pw, 2_000_000, 10*time.Minute)
	w.waitOK(t, time.Now(), time.Minute)
	rc.op.stop(syscall.SIGTERM)
	t0 := time.Now()
	c.CrashContainer(t, primary, "redis")
	d := w.waitFailedThenOK(t, t0, time.Minute)
	assertOnePrimary(t, c, ns, "a", pw, "the crash without operator")
	p, err := c.Kube.CoreV1().Pods(ns).Get(context.Background(), primary.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	role, _ := roleOf(p.Status.PodIP, pw)
	lost := w.lost(t, rw, pw)
	t.Logf("primary %s crashed with no operator: writes succeed again after %v (target <= 10 s); it says %s; %d of %d acknowledged writes lost",
		primary.Name, d.Round(10*time.Millisecond), role, len(lost), len(w.acked))
	if d > 10*time.Second || role != "master" || len(lost) != 0 {
		t.Errorf("without the operator: writes back after %v, the old primary says %q, %d lost; want <= 10 s, master, 0", d, role, len(lost))
	}
	startOperator(t, c)
	waitWhole(t, c, ns, "a", 3, 3*time.Minute)
	w.halt()
	if lost := w.lost(t, rw, pw); len(lost) != 0 {
		t.Errorf("%d acknowledged writes lost once the operator came back", len(lost))
	}
}

// TestPrimaryReplacedWithoutOperator: the operator is stopped, then the primary's pod is deleted
// at once (no grace, so no handover): the StatefulSet makes it anew without the role label, its
// server starts as a replica, and no member takes writes. The operator, back, fails over from the
// member status names (its predecessor never saw the new pod): FailoverStarted, status.lastFailover
// from it, the failover counted. Writes succeed again, and every acknowledged write is kept or
// reported discarded.
func TestPrimaryReplacedWithoutOperator(t *testing.T) {
	parallel(t)
	ctx := context.Background()
	rc := newRealCache(t, "replaced", "r")
	c, ns, pw, rw, old := rc.c, rc.ns, rc.password, rc.addr, rc.primary
	w := startWriter(t, rw, pw, 2_000_000, 10*time.Minute)
	w.waitOK(t, time.Now(), time.Minute)
	started := eventCount(t, c, ns, "r", "FailoverStarted")
	rc.op.stop(syscall.SIGTERM)
	t0 := time.Now()
	if _, err := c.Kubectl(ctx, "delete", "pod", old.Name, "-n", ns, "--grace-period=0", "--force", "--wait=false"); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 2*time.Minute, old.Name+" made anew, its server answering as a replica", func() (bool, string, error) {
		p, err := c.Kube.CoreV1().Pods(ns).Get(ctx, old.Name, metav1.GetOptions{})
		if err != nil || p.UID == old.UID || p.Status.PodIP == "" {
			return false, fmt.Sprintf("pod: %v", err), nil
		}
		role, err := roleOf(p.Status.PodIP, pw)
		return role == "slave", fmt.Sprintf("uid %s, role %q (%v), labels %v", p.UID, role, err, p.Labels), nil
	})
	remade := time.Since(t0)
	metricsAddr := freeAddr(t)
	back := time.Now()
	startOperatorIn(t, c, ns, "--metrics-bind-address="+metricsAddr)
	d := w.waitFailedThenOK(t, t0, 2*time.Minute)
	waitWhole(t, c, ns, "r", 3, 3*time.Minute)
	assertOnePrimary(t, c, ns, "r", pw, "the primary replaced without operator")
	w.halt()
	primary := statusPrimary(t, c, ns, "r")
	mc, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Get(ctx, "r", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	last, _, _ := unstructured.NestedStringMap(mc.Object, "status", "lastFailover")
	failovers := eventCount(t, c, ns, "r", "FailoverStarted") - started
	counted, err := framework.Metric(metricsAddr, `cache_operator_failovers_total{kind="failover"}`)
	if err != nil {
		t.Fatal(err)
	}
	lost := w.lost(t, rw, pw)
	bytes, unmeasured, msgs := discardedEvents(t, c, ns, "r")
	t.Logf("primary %s's pod replaced with no operator (made anew in %v, a replica); the operator back %v after the delete; writes succeed again %v after the delete; primary now %s; status.lastFailover %v; FailoverStarted Events %d, failovers counted %v; %d of %d acknowledged writes lost, reported discarded %d bytes (%d unmeasured) %v",
		old.Name, remade.Round(100*time.Millisecond), back.Sub(t0).Round(100*time.Millisecond), d.Round(100*time.Millisecond), primary, last,
		failovers, counted, len(lost), len(w.acked), bytes, unmeasured, msgs)
	if last["kind"] != "failover" || last["from"] != old.Name || last["to"] != primary || primary == "" {
		t.Errorf("status.lastFailover %v; want a failover from %s to %s", last, old.Name, primary)
	}
	if failovers < 1 || counted < 1 {
		t.Errorf("%d FailoverStarted Events, cache_operator_failovers_total %v; want the failover reported and counted", failovers, counted)
	}
	if len(lost) > 0 && bytes == 0 && unmeasured == 0 {
		t.Errorf("%d acknowledged writes lost and none reported discarded", len(lost))
	}
}

// TestPlannedRemovalsHandOver: deleting the primary's pod and evicting it (as a drain does) hand
// the role over to the most caught-up replica before the old primary stops (its preStop waits
// for it): no acknowledged write is lost, and writes fail for at most a moment.
func TestPlannedRemovalsHandOver(t *testing.T) {
	ctx := context.Background()
	rc := newRealCache(t, "planned", "h")
	c, ns, pw, rw := rc.c, rc.ns, rc.password, rc.addr
	w := startWriter(t, rw, pw, 2_000_000, 10*time.Minute)
	w.waitOK(t, time.Now(), time.Minute)
	removals := []struct {
		name   string
		remove func(p *corev1.Pod) error
	}{
		{"delete", func(p *corev1.Pod) error {
			return c.Kube.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{})
		}},
		{"evict", func(p *corev1.Pod) error {
			return c.Kube.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: ns}})
		}},
	}
	for _, r := range removals {
		primary := waitWhole(t, c, ns, "h", 3, 3*time.Minute)
		switchovers := eventCount(t, c, ns, "h", "SwitchoverCompleted")
		before := len(w.lost(t, rw, pw))
		t0 := time.Now()
		if err := r.remove(primary); err != nil {
			t.Fatalf("%s %s: %v", r.name, primary.Name, err)
		}
		framework.Eventually(t, time.Minute, "another member primary", func() (bool, string, error) {
			p := statusPrimary(t, c, ns, "h")
			return p != "" && p != primary.Name, "status.primary " + p, nil
		})
		moved := time.Since(t0)
		waitWhole(t, c, ns, "h", 3, 3*time.Minute)
		assertOnePrimary(t, c, ns, "h", pw, r.name)
		stall := w.longestStall(t0)
		lost := len(w.lost(t, rw, pw)) - before
		handed := eventCount(t, c, ns, "h", "SwitchoverCompleted") - switchovers
		t.Logf("%s of primary %s: %s primary after %v by %d switchover(s); longest without an acknowledged write %v (failed: %v); %d acknowledged writes lost",
			r.name, primary.Name, statusPrimary(t, c, ns, "h"), moved.Round(10*time.Millisecond), handed, stall.Round(10*time.Millisecond), w.failedWindows(), lost)
		if handed < 1 || lost != 0 || stall > 2*time.Second {
			t.Errorf("%s of the primary: %d switchovers, %d lost, %v without an acknowledged write; want a handover, 0 lost, <= 2 s", r.name, handed, lost, stall)
		}
	}
	w.halt()
}

// monitor runs MONITOR on the member at ip of cache (redis-cli as the test's admin user, the
// password in REDISCLI_AUTH) until stop is called, which returns every command line seen.
func monitor(t *testing.T, c *framework.Cluster, ns, cache, ip string) (stop func() []string) {
	t.Helper()
	pw := adminOn(t, c, ns, cache, ip)
	cmd := exec.Command("redis-cli", "-h", ip, "-p", "6379", "--user", testAdminUser, "--no-auth-warning", "monitor")
	cmd.Env = append(os.Environ(), "REDISCLI_AUTH="+pw)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("redis-cli monitor: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	return func() []string {
		select {
		case <-exited:
			t.Errorf("MONITOR on %s ended before the observation did (its connection was closed): %s", ip, lastLine(out.String()))
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
		return strings.Split(out.String(), "\n")
	}
}

// connectionsNamed returns the addresses of the member's connections whose client name is name.
func connectionsNamed(t *testing.T, c *framework.Cluster, ns, cache, ip, name string) []string {
	t.Helper()
	cl := adminClient(t, c, ns, cache, ip)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	list, err := cl.ClientList(ctx).Result()
	if err != nil {
		t.Fatalf("CLIENT LIST on %s: %v", ip, err)
	}
	var addrs []string
	for _, line := range strings.Split(list, "\n") {
		if !strings.Contains(" "+line+" ", " name="+name+" ") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "addr="); ok {
				addrs = append(addrs, v)
			}
		}
	}
	return addrs
}

// TestStaleLeaderSendsNoRedisCommand: the leader is paused (SIGSTOP) past its lease and the
// other replica takes over; then the new leader is paused too, a replica is made a stray master
// (work any operator would do: REPLICAOF it back), and the old leader is resumed with MONITOR on
// every member. Until it exits (it lost the lease), no command that changes a member comes from
// its connections: its Redis commands pass the lease fence. Then the new leader resumes, repairs
// the cache, and nothing is lost.
func TestStaleLeaderSendsNoRedisCommand(t *testing.T) {
	election := []string{"--leader-elect", "--leader-elect-lease-duration=8s", "--leader-elect-renew-deadline=5s", "--leader-elect-retry-period=1s"}
	rc := newRealCache(t, "stale", "s", append(election, "--identity=stale-a")...)
	c, ns, pw, rw := rc.c, rc.ns, rc.password, rc.addr
	other := startOperator(t, c, append(election, "--identity=stale-b")...)
	ops := map[string]*operator{"stale-a": rc.op, "stale-b": other}
	w := startWriter(t, rw, pw, 2_000_000, 10*time.Minute)
	w.waitOK(t, time.Now(), time.Minute)
	var leader string
	framework.Eventually(t, 30*time.Second, "a leader", func() (bool, string, error) {
		h, _, err := leaseHolder(c)
		leader = h
		return ops[h] != nil, "holder " + h, err
	})
	follower := map[string]string{"stale-a": "stale-b", "stale-b": "stale-a"}[leader]
	old, next := ops[leader], ops[follower]
	if err := old.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, time.Minute, follower+" to take the lease", func() (bool, string, error) {
		h, _, err := leaseHolder(c)
		return h == follower, "holder " + h, err
	})
	if err := next.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = next.cmd.Process.Signal(syscall.SIGCONT) }()
	primary := statusPrimary(t, c, ns, "s")
	var stray corev1.Pod
	var watching []func() []string
	var staleAddrs []string
	for _, p := range memberPods(t, c, ns, "s") {
		staleAddrs = append(staleAddrs, connectionsNamed(t, c, ns, "s", p.Status.PodIP, "cache-operator/"+leader)...)
		watching = append(watching, monitor(t, c, ns, "s", p.Status.PodIP))
		if p.Name != primary && stray.Name == "" {
			stray = p
		}
	}
	if len(staleAddrs) == 0 {
		t.Fatalf("no connection named cache-operator/%s on the members", leader)
	}
	scl := internalClient(t, c, ns, "s", stray.Status.PodIP)
	defer scl.Close()
	if err := scl.Do(context.Background(), "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	mark := old.logSize()
	t.Logf("the resumed old leader %s exited: %v", leader, old.resume(30*time.Second))
	var sent []string
	seen := 0
	for _, stop := range watching {
		for _, line := range stop() {
			for _, a := range staleAddrs {
				if !strings.Contains(line, " "+a+"]") {
					continue
				}
				seen++
				fields := strings.Fields(line[strings.Index(line, "]")+1:])
				if len(fields) > 0 && !readOnlyMonitored(fields) {
					sent = append(sent, line)
				}
			}
		}
	}
	b, _ := os.ReadFile(old.log)
	refused := strings.Count(string(b[mark:]), " refused: not the leader")
	role, _ := roleOf(stray.Status.PodIP, pw)
	t.Logf("stale leader %s resumed past its lease with a stray master %s to repair: %d commands from its %d connections seen by MONITOR, %d of them changing a member %v; %d Redis commands refused in its log; %s still says %s",
		leader, stray.Name, seen, len(staleAddrs), len(sent), sent, refused, stray.Name, role)
	if len(sent) > 0 {
		t.Errorf("the stale leader changed members after losing its lease: %v", sent)
	}
	// Nothing else runs (the new leader is paused): the stray master must still be one.
	if role != "master" {
		t.Errorf("%s says %q after the stale leader ran: something repaired it while only the stale leader ran", stray.Name, role)
	}
	if err := next.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitWhole(t, c, ns, "s", 3, 3*time.Minute)
	assertOnePrimary(t, c, ns, "s", pw, "the stale leader")
	w.halt()
	if lost := w.lost(t, rw, pw); len(lost) != 0 {
		t.Errorf("%d acknowledged writes lost", len(lost))
	}
}

// readOnlyMonitored reports whether a MONITOR line's command ("info" "replication" ...) changes
// nothing.
func readOnlyMonitored(fields []string) bool {
	name := strings.ToLower(strings.Trim(fields[0], `"`))
	if len(fields) > 1 && (name == "config" || name == "client" || name == "acl") {
		name += " " + strings.ToLower(strings.Trim(fields[1], `"`))
	}
	switch name {
	case "info", "ping", "role", "config get", "acl getuser", "acl whoami", "client setname", "client setinfo", "client list", "client info", "hello", "auth", "select":
		return true
	}
	return false
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
