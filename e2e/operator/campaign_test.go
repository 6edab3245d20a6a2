package operator

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"example.com/cache-operator/e2e/framework"
)

// The fault campaign: randomized faults against one size-3 cache on the real nodes, run by two
// operator replicas under leader election, with two writers through the read-write Service (one
// keeps its connection, one reconnects after every failure) recording every acknowledged write.
// After each fault it checks that at most one server says master and one pod is labelled
// primary, that the cache is whole again, and which acknowledged writes survive; then it prints
// a table per fault. CACHE_E2E_CHAOS_FAULTS sets the count (make test: one of each kind; make
// chaos: 60), CACHE_E2E_CHAOS_SEED the order (printed, to replay a run), CACHE_E2E_CHAOS_KINDS the
// kinds (comma-separated parts of their names, e.g. "switchover,eviction"; default: all).

// campaign holds what the faults act on.
type campaign struct {
	t       *testing.T
	c       *framework.Cluster
	ns      string
	pw, rw  string
	rng     *rand.Rand
	ops     map[string]*chaosOperator
	args    []string
	kept    *writer
	again   *writer
	version string
}

const chaosCache = "x"

// chaosKeys is the size of each campaign writer's key space.
const chaosKeys = 100_000

// chaosOperator is an operator replica of the campaign, and a channel closed when it exits
// (whether killed by a fault or on its own, as after losing the lease).
type chaosOperator struct {
	*operator
	exited  chan struct{}
	started time.Time
}

func (o *chaosOperator) alive() bool {
	select {
	case <-o.exited:
		return false
	default:
		return true
	}
}

// fault is one kind of failure: inject does it (and heals it where the failure ends by itself in
// real life, as a node that comes back), and returns when the fault began.
type fault struct {
	name string
	// planned faults lose nothing; the partition may lose what the fence lets through (bounded,
	// reported); every other fault loses nothing that the campaign observes.
	inject func(cp *campaign, primary *corev1.Pod) time.Time
}

var faults = []fault{
	{"crash of the primary", func(cp *campaign, p *corev1.Pod) time.Time {
		t0 := time.Now()
		cp.c.CrashContainer(cp.t, p, "redis")
		return t0
	}},
	{"crash of a replica", func(cp *campaign, p *corev1.Pod) time.Time {
		r := cp.replica(p)
		t0 := time.Now()
		cp.c.CrashContainer(cp.t, r, "redis")
		return t0
	}},
	{"delete of the primary", func(cp *campaign, p *corev1.Pod) time.Time {
		t0 := time.Now()
		if err := cp.c.Kube.CoreV1().Pods(cp.ns).Delete(context.Background(), p.Name, metav1.DeleteOptions{}); err != nil {
			cp.t.Fatal(err)
		}
		// The pod stays (its preStop waits) until the handover, and the cache can look whole
		// meanwhile: the fault ends when another member is the primary.
		cp.waitPrimaryNot(p.Name, time.Minute)
		return t0
	}},
	{"eviction of the primary", func(cp *campaign, p *corev1.Pod) time.Time {
		t0 := time.Now()
		ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: cp.ns}}
		if err := cp.c.Kube.PolicyV1().Evictions(cp.ns).Evict(context.Background(), ev); err != nil {
			cp.t.Fatal(err)
		}
		cp.waitPrimaryNot(p.Name, time.Minute) // as for a delete
		return t0
	}},
	{"switchover", func(cp *campaign, p *corev1.Pod) time.Time {
		target := cp.replica(p).Name
		t0 := time.Now()
		cp.annotateSwitchover(target)
		cp.waitPrimary(target, time.Minute)
		return t0
	}},
	{"node stop and start", func(cp *campaign, p *corev1.Pod) time.Time {
		t0 := time.Now()
		cp.c.StopNode(cp.t, p.Spec.NodeName)
		cp.waitPrimaryNot(p.Name, time.Minute)
		cp.c.StartNode(cp.t, p.Spec.NodeName)
		return t0
	}},
	{"asymmetric partition", func(cp *campaign, p *corev1.Pod) time.Time {
		keep := cp.kept.serverSideAddr(cp.t)
		cut := clientHosts(cp.t, cp.c, cp.ns, chaosCache, p.Status.PodIP)
		for _, m := range memberPods(cp.t, cp.c, cp.ns, chaosCache) {
			if m.Name != p.Name && m.Status.PodIP != "" {
				cut = append(cut, m.Status.PodIP)
			}
		}
		t0 := time.Now()
		heal := cp.c.Partition(cp.t, p, cut, []string{keep})
		cp.waitPrimaryNot(p.Name, time.Minute)
		time.Sleep(time.Until(t0.Add(15 * time.Second))) // the fault's duration, not synchronisation
		heal()
		return t0
	}},
	{"operator SIGKILL mid-failover", func(cp *campaign, p *corev1.Pod) time.Time {
		// The primary's node stops (a crashed container may restart in place before the
		// operator notices: then there is no failover to interrupt), the leader starts the
		// failover, and is killed there; the other replica finishes it once the lease expires.
		leader := cp.leader()
		mark := cp.ops[leader].logSize()
		t0 := time.Now()
		cp.c.StopNode(cp.t, p.Spec.NodeName)
		if !cp.ops[leader].waitLog(mark, `"Failover"`, 30*time.Second) {
			cp.t.Errorf("the leader did not start a failover within 30 s of the primary's node stopping")
		}
		cp.kill(leader, syscall.SIGKILL)
		cp.waitPrimaryNot(p.Name, 2*time.Minute)
		cp.c.StartNode(cp.t, p.Spec.NodeName)
		return t0
	}},
	{"operator SIGKILL mid-switchover", func(cp *campaign, p *corev1.Pod) time.Time {
		leader := cp.leader()
		mark := cp.ops[leader].logSize()
		t0 := time.Now()
		target := cp.replica(p).Name
		cp.annotateSwitchover(target)
		if !cp.ops[leader].waitLog(mark, `"Switchover started"`, 30*time.Second) {
			cp.t.Errorf("the leader did not start the switchover within 30 s")
		}
		cp.kill(leader, syscall.SIGKILL)
		cp.waitPrimary(target, 2*time.Minute) // the next leader finishes it
		return t0
	}},
	{"leader SIGSTOP past its lease", func(cp *campaign, p *corev1.Pod) time.Time {
		leader := cp.leader()
		op := cp.ops[leader]
		t0 := time.Now()
		if err := op.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			cp.t.Fatal(err)
		}
		framework.Eventually(cp.t, time.Minute, "another replica to take the lease", func() (bool, string, error) {
			h, _, err := leaseHolder(cp.c)
			return h != "" && h != leader, "holder " + h, err
		})
		if err := op.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			cp.t.Fatal(err)
		}
		cp.waitExit(leader, time.Minute) // it lost the lease: it exits
		return t0
	}},
	{"API server restart", func(cp *campaign, p *corev1.Pod) time.Time {
		t0 := time.Now()
		cp.c.RestartComponent(cp.t, "kube-apiserver")
		return t0
	}},
	{"etcd restart", func(cp *campaign, p *corev1.Pod) time.Time {
		t0 := time.Now()
		cp.c.RestartComponent(cp.t, "etcd")
		return t0
	}},
	{"version roll", func(cp *campaign, p *corev1.Pod) time.Time {
		uids := map[string]types.UID{}
		for _, m := range memberPods(cp.t, cp.c, cp.ns, chaosCache) {
			uids[m.Name] = m.UID
		}
		cp.version = nextVersion(cp.version)
		t0 := time.Now()
		patch := []byte(fmt.Sprintf(`{"spec":{"engine":{"version":%q}}}`, cp.version))
		if _, err := cp.c.Dynamic.Resource(mcV2GVR).Namespace(cp.ns).Patch(context.Background(), chaosCache, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			cp.t.Fatal(err)
		}
		framework.Eventually(cp.t, 5*time.Minute, "every member restarted on "+cp.version, func() (bool, string, error) {
			var left []string
			for _, m := range memberPods(cp.t, cp.c, cp.ns, chaosCache) {
				if m.UID == uids[m.Name] {
					left = append(left, m.Name)
				}
			}
			return len(left) == 0, fmt.Sprintf("not restarted yet: %v", left), nil
		})
		return t0
	}},
	{"whole cluster restart", func(cp *campaign, p *corev1.Pod) time.Time {
		// Everything stops at once: the operator replicas (their pods would die with the nodes),
		// the real nodes with every member, then the control plane; all start again, the
		// operator last. The labelled primary must come back as the primary with its data.
		t0 := time.Now()
		for id := range cp.ops {
			cp.kill(id, syscall.SIGKILL)
		}
		cp.c.RestartCluster(cp.t)
		return t0
	}},
	{"crash of the primary, operator stopped", func(cp *campaign, p *corev1.Pod) time.Time {
		for id := range cp.ops {
			cp.kill(id, syscall.SIGTERM)
		}
		t0 := time.Now()
		cp.c.CrashContainer(cp.t, p, "redis")
		cp.again.waitFailedThenOK(cp.t, t0, time.Minute)
		return t0
	}},
}

// Planned faults, for the targets: nothing lost, writes stop for a moment at most.
var plannedFaults = map[string]bool{"delete of the primary": true, "eviction of the primary": true, "switchover": true, "version roll": true}

// Faults in which the primary dies without warning. Replication is asynchronous, so a write it
// acknowledged in its last moment, not yet sent to a replica (or still in the kernel's buffers of
// a node that stops), can be lost: the campaign allows only such a tail, acknowledged at most
// asyncTail before the writers' first failure (a write that times out fails 1 s after it was
// sent, so the tail is 1 s plus the moment itself), and counts it. Any other loss fails.
var primaryDies = map[string]bool{"crash of the primary": true, "node stop and start": true,
	"operator SIGKILL mid-failover": true, "crash of the primary, operator stopped": true}

const asyncTail = 2 * time.Second

// firstFailure is when a write of either writer first failed after t0 (zero: none did).
func firstFailure(t0 time.Time, ws ...*writer) time.Time {
	var first time.Time
	for _, w := range ws {
		w.mu.Lock()
		for _, e := range w.events {
			if !e.ok && !e.at.Before(t0) {
				if first.IsZero() || e.at.Before(first) {
					first = e.at
				}
				break
			}
		}
		w.mu.Unlock()
	}
	return first
}

// firstAckOf returns when the earliest of the given acknowledged writes was acknowledged.
func (w *writer) firstAckOf(keys []int) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	var first time.Time
	for _, k := range keys {
		if at := w.acked[k]; first.IsZero() || at.Before(first) {
			first = at
		}
	}
	return first
}

func TestFaultCampaign(t *testing.T) {
	kinds := faults
	if v := os.Getenv("CACHE_E2E_CHAOS_KINDS"); v != "" {
		kinds = nil
		for _, f := range faults {
			for _, want := range strings.Split(v, ",") {
				if want != "" && strings.Contains(f.name, want) {
					kinds = append(kinds, f)
					break
				}
			}
		}
		if len(kinds) == 0 {
			t.Fatalf("CACHE_E2E_CHAOS_KINDS=%q names no fault", v)
		}
	}
	count := len(kinds)
	if v := os.Getenv("CACHE_E2E_CHAOS_FAULTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("CACHE_E2E_CHAOS_FAULTS=%q: want a positive count", v)
		}
		count = n
	}
	seed := time.Now().UnixNano()
	if v := os.Getenv("CACHE_E2E_CHAOS_SEED"); v != "" {
		s, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("CACHE_E2E_CHAOS_SEED=%q: %v", v, err)
		}
		seed = s
	}
	t.Logf("fault campaign: %d faults, seed %d (CACHE_E2E_CHAOS_SEED=%d replays the order)", count, seed, seed)
	c := framework.Setup(t)
	cp := &campaign{t: t, c: c, rng: rand.New(rand.NewSource(seed)), ops: map[string]*chaosOperator{}, version: "8.0",
		// -v=3: the member passes' decisions are in the operators' logs (.cluster-test/operator-*.log).
		args: []string{"--leader-elect", "--leader-elect-lease-duration=8s", "--leader-elect-renew-deadline=5s", "--leader-elect-retry-period=1s", "-v=3"}}
	for _, id := range []string{"chaos-a", "chaos-b"} {
		cp.start(id)
	}
	cp.ns = c.RealNamespace(t, "chaos")
	deleteCachesOnCleanup(t, c, cp.ns)
	dumpMembersOnFailure(t, c, cp.ns, chaosCache)
	createCacheV2(t, c, cp.ns, chaosCache, map[string]interface{}{"replicas": int64(3),
		"engine": map[string]interface{}{"name": "valkey", "version": cp.version}, "storage": map[string]interface{}{"size": "1Gi"}})
	waitWhole(t, c, cp.ns, chaosCache, 3, 3*time.Minute)
	cp.pw = password(t, c, cp.ns, chaosCache)
	cp.rw = clusterIP(t, c, cp.ns, chaosCache+"-rw") + ":6379"
	budget := time.Duration(count)*3*time.Minute + 5*time.Minute
	// Each writer cycles through chaosKeys keys, so that a long campaign's data set stays small
	// (a run on ever-new keys reached 1.5 million keys and slowed every full resync).
	cp.kept = startWriterKeys(t, cp.rw, cp.pw, "kept:", false, chaosKeys, 20_000_000, budget)
	cp.again = startWriterKeys(t, cp.rw, cp.pw, "again:", true, chaosKeys, 20_000_000, budget)
	cp.kept.waitOK(t, time.Now(), time.Minute)
	cp.again.waitOK(t, time.Now(), time.Minute)

	// One of each kind first, in random order, then kinds at random.
	order := cp.rng.Perm(len(kinds))
	for len(order) < count {
		order = append(order, cp.rng.Intn(len(kinds)))
	}
	order = order[:count]
	type outcome struct {
		gaps             []time.Duration
		lost, discarded  int
		discardedBytes   int64
		lateAck          time.Duration
		unmeasuredEvents int
	}
	results := map[string]*outcome{}
	for i, k := range order {
		f := kinds[k]
		c.EnsureControlPlane(t)
		primary := waitWhole(t, c, cp.ns, chaosCache, 3, 3*time.Minute)
		cp.kept.waitOK(t, time.Now(), time.Minute)
		cp.again.waitOK(t, time.Now(), time.Minute)
		lostBefore := map[string]bool{}
		for _, w := range []*writer{cp.kept, cp.again} {
			for _, n := range w.lost(t, cp.rw, cp.pw) {
				lostBefore[w.prefix+strconv.Itoa(n)] = true
			}
		}
		bytesBefore, unmeasuredBefore, _ := discardedEvents(t, c, cp.ns, chaosCache)

		begun := map[*writer]int{cp.kept: cp.kept.written(), cp.again: cp.again.written()}
		t0 := f.inject(cp, primary)
		for id, op := range cp.ops {
			if !op.alive() {
				cp.start(id) // killed, stopped or exited: a new process, as a Deployment makes
			}
		}
		waitWhole(t, c, cp.ns, chaosCache, 3, 5*time.Minute)
		assertOnePrimary(t, c, cp.ns, chaosCache, cp.pw, fmt.Sprintf("fault %d (%s)", i+1, f.name))
		cp.kept.waitOK(t, time.Now(), time.Minute)
		cp.again.waitOK(t, time.Now(), time.Minute)
		gap := cp.again.longestStall(t0)

		var newLost []int
		var lateAck time.Duration
		var firstLost, lastLost time.Time
		for _, w := range []*writer{cp.kept, cp.again} {
			// A write lost in this fault is seen as lost only until the writer comes back to its
			// key: the check must come before the writer has gone round the key space.
			if d := w.written() - begun[w]; d > chaosKeys-chaosKeys/10 {
				t.Errorf("writer %s made %d writes between the fault and the check, near its key space of %d: a lost write could be hidden; raise chaosKeys", w.prefix, d, chaosKeys)
			}
			var mine []int
			for _, n := range w.lost(t, cp.rw, cp.pw) {
				if !lostBefore[w.prefix+strconv.Itoa(n)] {
					mine = append(mine, n)
				}
			}
			if len(mine) > 0 {
				lateAck = max(lateAck, w.lastAckOf(mine).Sub(t0))
				if f := w.firstAckOf(mine); firstLost.IsZero() || f.Before(firstLost) {
					firstLost = f
				}
				if l := w.lastAckOf(mine); l.After(lastLost) {
					lastLost = l
				}
			}
			newLost = append(newLost, mine...)
		}
		died := firstFailure(t0, cp.kept, cp.again)
		bytesAfter, unmeasuredAfter, _ := discardedEvents(t, c, cp.ns, chaosCache)
		o := results[f.name]
		if o == nil {
			o = &outcome{}
			results[f.name] = o
		}
		o.gaps = append(o.gaps, gap)
		o.lost += len(newLost)
		o.discardedBytes += bytesAfter - bytesBefore
		o.unmeasuredEvents += unmeasuredAfter - unmeasuredBefore
		o.lateAck = max(o.lateAck, lateAck)
		t.Logf("fault %d/%d: %s (primary was %s, now %s): %v without writes for the reconnecting writer; %d acknowledged writes lost (the last acknowledged %v after the fault began); %d bytes reported discarded",
			i+1, count, f.name, primary.Name, statusPrimary(t, c, cp.ns, chaosCache), gap.Round(10*time.Millisecond), len(newLost), lateAck.Round(100*time.Millisecond), bytesAfter-bytesBefore)
		switch {
		case f.name == "asymmetric partition":
			if len(newLost) > 0 && (lateAck > 10*time.Second || bytesAfter == bytesBefore) {
				t.Errorf("partition: %d writes lost, the last acknowledged %v after the cut, %d bytes reported; want none acknowledged after 10 s and every loss reported",
					len(newLost), lateAck, bytesAfter-bytesBefore)
			}
		case len(newLost) > 0 && primaryDies[f.name]:
			// The asynchronous tail: acknowledged just before the primary died, never after.
			if died.IsZero() || lastLost.After(died) || died.Sub(firstLost) > asyncTail {
				t.Errorf("%s: %d acknowledged writes lost, acknowledged from %v to %v after the fault began, the writers' first failure at %v: more than the asynchronous tail (%v before the primary died)",
					f.name, len(newLost), firstLost.Sub(t0), lastLost.Sub(t0), died.Sub(t0), asyncTail)
			} else {
				t.Logf("%s: %d acknowledged writes lost in the asynchronous tail: acknowledged %v before the writers' first failure",
					f.name, len(newLost), died.Sub(firstLost).Round(time.Millisecond))
			}
		case len(newLost) > 0:
			t.Errorf("%s: %d acknowledged writes lost (first %v)", f.name, len(newLost), newLost[:min(5, len(newLost))])
		}
	}
	cp.kept.halt()
	cp.again.halt()

	var table strings.Builder
	fmt.Fprintf(&table, "| fault | count | s without writes p50 | max | acknowledged writes lost | latest lost ack after the fault (s) | bytes reported discarded |\n|---|---|---|---|---|---|---|\n")
	names := make([]string, 0, len(results))
	for n := range results {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		o := results[n]
		fmt.Fprintf(&table, "| %s | %d | %.2f | %.2f | %d | %.1f | %d |\n", n, len(o.gaps), percentile(o.gaps, 0.5).Seconds(),
			percentile(o.gaps, 1).Seconds(), o.lost, o.lateAck.Seconds(), o.discardedBytes)
		if plannedFaults[n] && percentile(o.gaps, 1) > 2*time.Second {
			t.Logf("note: %s went %v without writes at most; the target is 2 s", n, percentile(o.gaps, 1))
		}
	}
	fmt.Fprintf(&table, "\n%d faults, seed %d; writers: %d and %d acknowledged writes\n", count, seed, len(cp.kept.acked), len(cp.again.acked))
	t.Logf("fault campaign table:\n%s", table.String())
	if out := os.Getenv("CACHE_E2E_CHAOS_TABLE"); out != "" {
		if err := os.WriteFile(out, []byte(table.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// start runs an operator replica with the campaign's leader election under identity id.
func (cp *campaign) start(id string) {
	started := time.Now()
	op := &chaosOperator{operator: startOperator(cp.t, cp.c, append(append([]string{}, cp.args...), "--identity="+id)...), exited: make(chan struct{}), started: started}
	cmd := op.cmd
	go func() { _ = cmd.Wait(); close(op.exited) }()
	cp.ops[id] = op
	cp.t.Cleanup(func() { cp.stopProcess(op, syscall.SIGTERM) })
}

// kill signals the operator replica id and waits for it to exit.
func (cp *campaign) kill(id string, sig syscall.Signal) { cp.stopProcess(cp.ops[id], sig) }

func (cp *campaign) stopProcess(op *chaosOperator, sig syscall.Signal) {
	op.mu.Lock()
	defer op.mu.Unlock()
	if op.cmd == nil {
		return
	}
	_ = op.cmd.Process.Signal(sig)
	select {
	case <-op.exited:
	case <-time.After(30 * time.Second):
		_ = op.cmd.Process.Kill()
		<-op.exited
	}
	op.cmd = nil // its own Cleanup (operator.stop) has nothing left to do
}

// waitExit waits until the replica id exited by itself.
func (cp *campaign) waitExit(id string, timeout time.Duration) {
	select {
	case <-cp.ops[id].exited:
	case <-time.After(timeout):
		cp.t.Fatalf("operator %s still runs %v after it lost the lease", id, timeout)
	}
}

// leader is the identity holding the lease (waiting for one).
func (cp *campaign) leader() string {
	var h string
	// The Lease can name a process that is gone (a restarted one has the same identity) or whose
	// lease ran out: the leader is the living process that renewed it, within its duration.
	framework.Eventually(cp.t, time.Minute, "a leader that renewed its lease", func() (bool, string, error) {
		l, err := cp.c.Kube.CoordinationV1().Leases("cache-operator-system").Get(context.Background(), "cache-operator", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil || l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
			return false, fmt.Sprintf("lease %v", err), nil
		}
		h = *l.Spec.HolderIdentity
		renewed, valid := l.Spec.RenewTime.Time, time.Duration(*l.Spec.LeaseDurationSeconds)*time.Second
		op := cp.ops[h]
		ok := op != nil && op.alive() && renewed.After(op.started) && time.Since(renewed) < valid
		return ok, fmt.Sprintf("holder %s, renewed %v ago", h, time.Since(renewed).Round(time.Millisecond)), nil
	})
	return h
}

// replica is a random member other than the primary p.
func (cp *campaign) replica(p *corev1.Pod) *corev1.Pod {
	var rs []corev1.Pod
	for _, m := range memberPods(cp.t, cp.c, cp.ns, chaosCache) {
		if m.Name != p.Name {
			rs = append(rs, m)
		}
	}
	if len(rs) == 0 {
		cp.t.Fatal("no replica")
	}
	return &rs[cp.rng.Intn(len(rs))]
}

func (cp *campaign) annotateSwitchover(target string) {
	patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{"cache.example.com/switchover-to":%q}}}`, target))
	if _, err := cp.c.Dynamic.Resource(mcV2GVR).Namespace(cp.ns).Patch(context.Background(), chaosCache, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		cp.t.Fatal(err)
	}
}

func (cp *campaign) waitPrimary(name string, timeout time.Duration) {
	framework.Eventually(cp.t, timeout, name+" primary", func() (bool, string, error) {
		p := statusPrimary(cp.t, cp.c, cp.ns, chaosCache)
		return p == name, "status.primary " + p, nil
	})
}

func (cp *campaign) waitPrimaryNot(name string, timeout time.Duration) {
	framework.Eventually(cp.t, timeout, "a primary other than "+name, func() (bool, string, error) {
		p := statusPrimary(cp.t, cp.c, cp.ns, chaosCache)
		return p != "" && p != name, "status.primary " + p, nil
	})
}

// logSize is the length of the operator's log so far (for waitLog).
func (o *operator) logSize() int {
	b, _ := os.ReadFile(o.log)
	return len(b)
}

// waitLog waits until the operator's log, past offset from, holds text; false if it did not
// within timeout.
func (o *operator) waitLog(from int, text string, timeout time.Duration) bool {
	o.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		b, _ := os.ReadFile(o.log)
		if len(b) > from && bytes.Contains(b[from:], []byte(text)) {
			return true
		}
		if time.Now().After(deadline) {
			o.t.Logf("the operator did not log %s within %v", text, timeout)
			return false
		}
		time.Sleep(5 * time.Millisecond) // polling the log for the moment to strike, with a deadline
	}
}

// nextVersion is the version a roll goes to: the campaign's cache is valkey, whose 8.0 and 8.1
// write one snapshot format, so that rolls can go back and forth as often as the campaign draws
// them (the local nodes run valkey 8.1.1 for both tags; the roll is what is tested).
func nextVersion(v string) string {
	if v == "8.0" {
		return "8.1"
	}
	return "8.0"
}
