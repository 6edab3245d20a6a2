package operator

import (
	"context"
	"fmt"
	"math/rand"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"example.com/cache-operator/e2e/framework"
)

// The sharded fault campaign (make chaos; make test runs each of these faults once in its own
// test instead: TestShardedCache's crashes, TestShardedCacheNodeStop, TestShardedCachePartition,
// TestShardedCacheComesBackWhole, TestShardedCacheReshards' kill): randomized faults against a
// cache of 3 shards × 2 on the real nodes, run by two operator replicas under leader election,
// with a cluster writer over every shard recording every acknowledged write. After each fault
// it waits until the cache is whole (after a reshard, until every shard serves its count), and
// checks which acknowledged writes survive: a fault in which a primary dies without warning may
// lose only the asynchronous tail (acknowledged at most asyncTail before the shard's first failed
// write); any other loss, or a write that fails for anything but a redirection, is counted and
// fails. CACHE_E2E_CHAOS_SHARDED_FAULTS sets the count (unset: skipped), CACHE_E2E_CHAOS_SEED the
// order, CACHE_E2E_CHAOS_SHARDED_TABLE where its table goes.

const shardedChaosCache = "sx"

// chaosFill is how many keys of 1 KiB the sharded campaign's cache holds besides the writer's (a
// reshard's moves last several seconds), read back at the end.
const chaosFill = 50_000

// shardedCampaign is a campaign on a sharded cache: its cluster client, one hash tag per shard
// of the first layout (each keeps its slot through reshards), the writer and the shard count now.
type shardedCampaign struct {
	*campaign
	cc     *redis.ClusterClient
	tags   []string
	w      *clusterWriter
	shards int
}

type shardedFault struct {
	name string
	// dies: a primary dies without warning (the asynchronous tail may be lost). reshards: the
	// fault changes the shard count (the campaign waits for the reshard to finish).
	dies, reshards bool
	inject         func(sc *shardedCampaign) time.Time
}

var shardedFaults = []shardedFault{
	{name: "crash of a primary", dies: true, inject: func(sc *shardedCampaign) time.Time {
		p := sc.primary()
		t0 := time.Now()
		sc.c.CrashContainer(sc.t, &p, "redis")
		return t0
	}},
	{name: "node stop and start", dies: true, inject: func(sc *shardedCampaign) time.Time {
		// The node under a primary whose node runs fewer than half the primaries: a node with
		// half or more (two of four shards' on three nodes) leaves no majority to fail them
		// over, and those shards wait for it (the operations page says so).
		node, slot, addr := sc.minorityPrimary()
		t0 := time.Now()
		sc.c.StopNode(sc.t, node)
		framework.Eventually(sc.t, time.Minute, fmt.Sprintf("slot %d served by another member than %s", slot, addr), func() (bool, string, error) {
			now, err := servedBy(sc.cc, slot)
			return err == nil && now != addr, fmt.Sprintf("served by %s (%v)", now, err), nil
		})
		sc.c.StartNode(sc.t, node)
		return t0
	}},
	{name: "asymmetric partition of a primary", dies: true, inject: func(sc *shardedCampaign) time.Time {
		// Cut off from the operators and the writer (this machine) and from every other member;
		// the majority fails it over, and it stops acknowledging (nothing of ours reaches it).
		tag := sc.tags[sc.rng.Intn(len(sc.tags))]
		p := currentPrimary(sc.t, sc.c, context.Background(), sc.cc, sc.ns, shardedChaosCache, tag)
		cut := clientHosts(sc.t, sc.c, sc.ns, shardedChaosCache, p.Status.PodIP)
		for _, m := range memberPods(sc.t, sc.c, sc.ns, shardedChaosCache) {
			if m.Name != p.Name && m.Status.PodIP != "" {
				cut = append(cut, m.Status.PodIP)
			}
		}
		t0 := time.Now()
		heal := sc.c.Partition(sc.t, &p, cut, nil)
		sc.waitServedNotBy(tag, p.Name, time.Minute)
		time.Sleep(time.Until(t0.Add(15 * time.Second))) // the fault's duration, not synchronisation
		heal()
		return t0
	}},
	{name: "whole cluster restart", inject: func(sc *shardedCampaign) time.Time {
		t0 := time.Now()
		for id := range sc.ops {
			sc.kill(id, syscall.SIGKILL)
		}
		sc.c.RestartCluster(sc.t)
		return t0
	}},
	{name: "operator SIGKILL mid-move", reshards: true, inject: func(sc *shardedCampaign) time.Time {
		to := 4
		if sc.shards == 4 {
			to = 3
		}
		leader := sc.leader()
		t0 := time.Now()
		patchShards(sc.t, sc.c, sc.ns, shardedChaosCache, to)
		// The campaign's data set (chaosFill) makes the moves last several seconds; a reshard
		// seen over already (no status.reshard, every slot placed) is logged, and the kill then
		// strikes after it.
		var during bool
		framework.Eventually(sc.t, 2*time.Minute, "status.reshard with slots moved", func() (bool, string, error) {
			r := reshardStatus(sc.t, sc.c, sc.ns, shardedChaosCache)
			during = r != nil && r.Shards == int64(to) && r.SlotsMoved > 0
			counts, err := shardSlotCounts(context.Background(), sc.cc)
			over := r == nil && err == nil && len(counts) == to
			return during || over, fmt.Sprintf("status.reshard %+v, slots per primary %v", r, counts), nil
		})
		if !during {
			sc.t.Logf("operator SIGKILL mid-move: the reshard to %d shards was over before the kill", to)
		}
		sc.kill(leader, syscall.SIGKILL)
		sc.shards = to
		return t0
	}},
	{name: "member back with an empty volume", inject: func(sc *shardedCampaign) time.Time {
		ctx := context.Background()
		var replicas []corev1.Pod
		for _, p := range memberPods(sc.t, sc.c, sc.ns, shardedChaosCache) {
			if p.Labels[roleLabel] == "replica" {
				replicas = append(replicas, p)
			}
		}
		if len(replicas) == 0 {
			sc.t.Fatal("no replica")
		}
		r := replicas[sc.rng.Intn(len(replicas))]
		t0 := time.Now()
		claim := "data-" + r.Name
		if err := sc.c.Kube.CoreV1().PersistentVolumeClaims(sc.ns).Delete(ctx, claim, metav1.DeleteOptions{}); err != nil {
			sc.t.Fatal(err)
		}
		if err := sc.c.Kube.CoreV1().Pods(sc.ns).Delete(ctx, r.Name, metav1.DeleteOptions{}); err != nil {
			sc.t.Fatal(err)
		}
		framework.Eventually(sc.t, 2*time.Minute, "a new claim "+claim, func() (bool, string, error) {
			pvc, err := sc.c.Kube.CoreV1().PersistentVolumeClaims(sc.ns).Get(ctx, claim, metav1.GetOptions{})
			if err != nil {
				return false, err.Error(), nil
			}
			return pvc.CreationTimestamp.Time.After(t0.Add(-time.Second)), "the old claim still there", nil
		})
		return t0
	}},
}

func TestShardedFaultCampaign(t *testing.T) {
	count, _ := strconv.Atoi(os.Getenv("CACHE_E2E_CHAOS_SHARDED_FAULTS"))
	if count <= 0 {
		t.Skip("CACHE_E2E_CHAOS_SHARDED_FAULTS is not set: make chaos runs the sharded campaign; make test runs each of its faults in its own test")
	}
	seed := time.Now().UnixNano()
	if v := os.Getenv("CACHE_E2E_CHAOS_SEED"); v != "" {
		s, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("CACHE_E2E_CHAOS_SEED=%q: %v", v, err)
		}
		seed = s
	}
	t.Logf("sharded fault campaign: %d faults, seed %d (CACHE_E2E_CHAOS_SEED=%d replays the order)", count, seed, seed)
	c := framework.Setup(t)
	ctx := context.Background()
	cp := &campaign{t: t, c: c, rng: rand.New(rand.NewSource(seed)), ops: map[string]*chaosOperator{},
		args: []string{"--leader-elect", "--leader-elect-lease-duration=8s", "--leader-elect-renew-deadline=5s", "--leader-elect-retry-period=1s", "-v=3"}}
	for _, id := range []string{"chaos-a", "chaos-b"} {
		cp.start(id)
	}
	cp.ns = c.RealNamespace(t, "shchaos")
	deleteCachesOnCleanup(t, c, cp.ns)
	createSharded(t, c, cp.ns, shardedChaosCache)
	cc := clusterClient(net.JoinHostPort(clusterIP(t, c, cp.ns, shardedChaosCache+"-rw"), "6379"), password(t, c, cp.ns, shardedChaosCache))
	defer cc.Close()
	tags := shardTags(t, ctx, cc, 3)
	fillCluster(t, cc, chaosFill, 1024)
	budget := time.Duration(count)*3*time.Minute + 5*time.Minute
	sc := &shardedCampaign{campaign: cp, cc: cc, tags: tags, shards: 3,
		w: startClusterWriter(cc, tags, 50_000_000, budget)}
	defer sc.w.halt()
	framework.Eventually(t, 30*time.Second, "the cluster writer's first 300 acknowledged writes", func() (bool, string, error) {
		n := sc.w.ackedCount()
		return n >= 300, fmt.Sprintf("%d acknowledged", n), nil
	})

	order := cp.rng.Perm(len(shardedFaults))
	for len(order) < count {
		order = append(order, cp.rng.Intn(len(shardedFaults)))
	}
	order = order[:count]
	type outcome struct {
		gaps []time.Duration
		lost int
	}
	results := map[string]*outcome{}
	lostSoFar := map[int]bool{}
	for _, n := range mustLost(t, sc) {
		lostSoFar[n] = true
	}
	for i, k := range order {
		f := shardedFaults[k]
		c.EnsureControlPlane(t)
		waitShardsWhole(t, c, cp.ns, shardedChaosCache, 5*time.Minute)
		failedBefore := total(sc.w.failures())
		t0 := f.inject(sc)
		for id, op := range cp.ops {
			if !op.alive() {
				cp.start(id) // killed or stopped: a new process, as a Deployment makes
			}
		}
		if f.reshards {
			waitResharded(t, c, cc, cp.ns, shardedChaosCache, sc.shards, 10*time.Minute)
		}
		waitShardsWhole(t, c, cp.ns, shardedChaosCache, 5*time.Minute)
		var gap time.Duration
		for shard := range tags {
			gap = max(gap, sc.w.waitShardWrites(t, shard, t0, time.Minute))
		}
		var mine []int
		for _, n := range mustLost(t, sc) {
			if !lostSoFar[n] {
				mine = append(mine, n)
				lostSoFar[n] = true
			}
		}
		o := results[f.name]
		if o == nil {
			o = &outcome{}
			results[f.name] = o
		}
		o.gaps, o.lost = append(o.gaps, gap), o.lost+len(mine)
		failed := total(sc.w.failures()) - failedBefore
		t.Logf("fault %d/%d: %s (%d shards now): every shard took writes again %v after the fault began, %d failed writes; %d acknowledged writes lost",
			i+1, count, f.name, sc.shards, gap.Round(10*time.Millisecond), failed, len(mine))
		switch {
		case len(mine) > 0 && f.dies:
			if tail := sc.asyncTail(mine, t0); tail != "" {
				t.Errorf("%s: %s", f.name, tail)
			}
		case len(mine) > 0:
			t.Errorf("%s: %d acknowledged writes lost (first %v)", f.name, len(mine), mine[:min(5, len(mine))])
		}
		if f.reshards && failed > 0 {
			t.Errorf("%s: %d writes failed during the reshard (a cluster client sees only redirections): %v", f.name, failed, sc.w.failures())
		}
	}
	sc.w.halt()
	if bad := checkFill(t, cc, chaosFill, 1024); bad > 0 {
		t.Errorf("%d of the %d filled keys missing or changed after the campaign", bad, chaosFill)
	}

	var table strings.Builder
	fmt.Fprintf(&table, "| sharded fault | count | s until every shard took writes again p50 | max | acknowledged writes lost |\n|---|---|---|---|---|\n")
	names := make([]string, 0, len(results))
	for n := range results {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		o := results[n]
		fmt.Fprintf(&table, "| %s | %d | %.2f | %.2f | %d |\n", n, len(o.gaps), percentile(o.gaps, 0.5).Seconds(), percentile(o.gaps, 1).Seconds(), o.lost)
	}
	fmt.Fprintf(&table, "\n%d faults, seed %d; the cluster writer: %d acknowledged writes, failed writes by kind %v\n", count, seed, sc.w.ackedCount(), sc.w.failures())
	t.Logf("sharded fault campaign table:\n%s", table.String())
	if out := os.Getenv("CACHE_E2E_CHAOS_SHARDED_TABLE"); out != "" {
		if err := os.WriteFile(out, []byte(table.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// primary is the pod serving a random shard tag's slot.
func (sc *shardedCampaign) primary() corev1.Pod {
	return currentPrimary(sc.t, sc.c, context.Background(), sc.cc, sc.ns, shardedChaosCache, sc.tags[sc.rng.Intn(len(sc.tags))])
}

// minorityPrimary picks a primary at random among those whose node runs fewer than half the
// primaries, and returns its node, its first slot and its address.
func (sc *shardedCampaign) minorityPrimary() (node string, slot int, addr string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	slots, err := sc.cc.ClusterSlots(ctx).Result()
	if err != nil {
		sc.t.Fatal(err)
	}
	nodeOf := map[string]string{} // pod IP → node
	for _, p := range memberPods(sc.t, sc.c, sc.ns, shardedChaosCache) {
		nodeOf[p.Status.PodIP] = p.Spec.NodeName
	}
	first := map[string]int{} // primary address → its first slot
	for _, s := range slots {
		if f, ok := first[s.Nodes[0].Addr]; !ok || s.Start < f {
			first[s.Nodes[0].Addr] = s.Start
		}
	}
	perNode := map[string]int{}
	for a := range first {
		host, _, _ := net.SplitHostPort(a)
		perNode[nodeOf[host]]++
	}
	var picks []string
	for a := range first {
		host, _, _ := net.SplitHostPort(a)
		if 2*perNode[nodeOf[host]] < len(first) {
			picks = append(picks, a)
		}
	}
	if len(picks) == 0 {
		sc.t.Fatalf("no primary on a node running fewer than half the primaries: %v", perNode)
	}
	sort.Strings(picks)
	addr = picks[sc.rng.Intn(len(picks))]
	host, _, _ := net.SplitHostPort(addr)
	return nodeOf[host], first[addr], addr
}

// servedBy is the address of the primary serving slot, as CLUSTER SLOTS says.
func servedBy(cc *redis.ClusterClient, slot int) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	slots, err := cc.ClusterSlots(ctx).Result()
	if err != nil {
		return "", err
	}
	for _, s := range slots {
		if s.Start <= slot && slot <= s.End {
			return s.Nodes[0].Addr, nil
		}
	}
	return "", fmt.Errorf("slot %d served by no node", slot)
}

// waitServedNotBy waits until tag's slot is served by a member other than pod.
func (sc *shardedCampaign) waitServedNotBy(tag, pod string, timeout time.Duration) {
	framework.Eventually(sc.t, timeout, "another member serving {"+tag+"}'s slot than "+pod, func() (bool, string, error) {
		now := currentPrimary(sc.t, sc.c, context.Background(), sc.cc, sc.ns, shardedChaosCache, tag)
		return now.Name != pod, "served by " + now.Name, nil
	})
}

// asyncTail says what is wrong with writes lost in a fault in which a primary died: "" when each
// was acknowledged at most asyncTail before its shard's first failed write after t0.
func (sc *shardedCampaign) asyncTail(lost []int, t0 time.Time) string {
	sc.w.mu.Lock()
	defer sc.w.mu.Unlock()
	for _, n := range lost {
		shard := n % len(sc.tags)
		var ackedAt, firstFail time.Time
		seq := n / len(sc.tags) // the shard's events are in order: its n-th write is event n/len(tags)
		if evs := sc.w.events[shard]; seq < len(evs) {
			ackedAt = evs[seq].at
		}
		for _, ev := range sc.w.events[shard] {
			if !ev.ok && !ev.at.Before(t0) {
				firstFail = ev.at
				break
			}
		}
		if firstFail.IsZero() || ackedAt.After(firstFail) || firstFail.Sub(ackedAt) > asyncTail {
			return fmt.Sprintf("write %d (shard %d) acknowledged at %v after the fault began, the shard's first failure at %v: more than the asynchronous tail (%v)",
				n, shard, ackedAt.Sub(t0), firstFail.Sub(t0), asyncTail)
		}
	}
	return ""
}

// mustLost is the writer's acknowledged writes that do not read back now.
func mustLost(t *testing.T, sc *shardedCampaign) []int {
	lost, _ := sc.w.lost(t, sc.cc)
	return lost
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
