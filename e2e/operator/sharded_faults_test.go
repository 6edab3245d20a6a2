package operator

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"example.com/cache-operator/e2e/framework"
)

// Faults that are not polite against a sharded cache (3 shards × 2 on the real nodes), each under
// a cluster writer that records every acknowledged write: an asymmetric partition of one primary
// and the stop of a node under a primary.

// shardedFaultCache is a sharded cache made for a fault test, with its cluster client, the hash
// tag of each shard and a cluster writer over every shard.
type shardedFaultCache struct {
	c      *framework.Cluster
	ns, pw string
	cc     *redis.ClusterClient
	tags   []string
	w      *clusterWriter
}

const faultCache = "f"

func newShardedFaultCache(t *testing.T, c *framework.Cluster, ns string) shardedFaultCache {
	t.Helper()
	ctx := context.Background()
	createSharded(t, c, ns, faultCache)
	pw := password(t, c, ns, faultCache)
	cc := clusterClient(net.JoinHostPort(clusterIP(t, c, ns, faultCache+"-rw"), "6379"), pw)
	t.Cleanup(func() { cc.Close() })
	tags := shardTags(t, ctx, cc, 3)
	w := startClusterWriter(cc, tags, 200_000, 6*time.Minute)
	t.Cleanup(w.halt)
	framework.Eventually(t, 30*time.Second, "the cluster writer's first 300 acknowledged writes", func() (bool, string, error) {
		n := w.ackedCount()
		return n >= 300, fmt.Sprintf("%d acknowledged", n), nil
	})
	return shardedFaultCache{c: c, ns: ns, pw: pw, cc: cc, tags: tags, w: w}
}

// waitShardPrimaryNot waits until the cluster serves tag's slot from a member other than pod,
// and returns that member.
func (f shardedFaultCache) waitShardPrimaryNot(t *testing.T, tag string, pod corev1.Pod, timeout time.Duration) corev1.Pod {
	t.Helper()
	var now corev1.Pod
	framework.Eventually(t, timeout, "another member serving {"+tag+"}'s slot than "+pod.Name, func() (bool, string, error) {
		now = currentPrimary(t, f.c, context.Background(), f.cc, f.ns, faultCache, tag)
		return now.Name != pod.Name, "served by " + now.Name, nil
	})
	return now
}

// waitPrimariesSpread waits until no two shards' primaries run on one node (the operator's spread
// phase hands a primary over to its replica on a node without one), and returns how long it took.
func (f shardedFaultCache) waitPrimariesSpread(t *testing.T, timeout time.Duration) time.Duration {
	t.Helper()
	t0 := time.Now()
	framework.Eventually(t, timeout, "the three shards' primaries on three nodes", func() (bool, string, error) {
		byNode := map[string][]string{}
		for _, tag := range f.tags {
			p := currentPrimary(t, f.c, context.Background(), f.cc, f.ns, faultCache, tag)
			byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p.Name)
		}
		return len(byNode) == len(f.tags), fmt.Sprintf("primaries by node %v", byNode), nil
	})
	return time.Since(t0)
}

// waitFailoverRecorded waits until status.lastFailover records the cluster's failover of shard 0
// from old to successor.
func waitFailoverRecorded(t *testing.T, c *framework.Cluster, ns string, old, successor corev1.Pod) map[string]string {
	t.Helper()
	var last map[string]string
	framework.Eventually(t, 30*time.Second, "status.lastFailover: a failover from "+old.Name+" to "+successor.Name, func() (bool, string, error) {
		mc, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Get(context.Background(), faultCache, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		last, _, _ = unstructured.NestedStringMap(mc.Object, "status", "lastFailover")
		return last["kind"] == "failover" && last["from"] == old.Name && last["to"] == successor.Name, fmt.Sprintf("%v", last), nil
	})
	return last
}

// eventsNaming returns the messages of the cache's Events of reason that name pod.
func eventsNaming(t *testing.T, c *framework.Cluster, ns, reason, pod string) []string {
	t.Helper()
	list, err := c.Kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=" + reason})
	if err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for _, e := range list.Items {
		if e.InvolvedObject.Name == faultCache && strings.Contains(e.Message, pod) {
			msgs = append(msgs, e.Message)
		}
	}
	return msgs
}

// TestShardedCachePartition: shard 0's primary is cut off from the operator and every other
// member (data and cluster bus) for 20 s, but keeps one client's connection, which writes keys of
// its shard. The other primaries, a majority, fail it over to its replica; cut off from the
// majority, it stops acknowledging writes within the bound the operations page states
// (cluster-node-timeout, 2 s, and the next ping: 5 s allowed here). When the partition heals it
// rejoins as its successor's replica (and may get its slots back from the spread phase, once in
// sync); the writes it acknowledged alone are lost, and the operator
// reports the failover (ShardFailedOver naming it, status.lastFailover, the metric) with what it
// could not count. Then a replica of shard 1 is flagged master over its replication
// (flagMasterAndHeal), which the operator restarts. The cluster writer loses nothing, and its
// writes to the shard resume.
func TestShardedCachePartition(t *testing.T) {
	parallel(t)
	c := framework.Setup(t)
	ns := c.RealNamespace(t, "shpart")
	metricsAddr := freeAddr(t)
	startOperatorIn(t, c, ns, "--metrics-bind-address="+metricsAddr)
	deleteCachesOnCleanup(t, c, ns)
	f := newShardedFaultCache(t, c, ns)
	ctx := context.Background()

	old := currentPrimary(t, c, ctx, f.cc, ns, faultCache, f.tags[0])
	oldAddr := net.JoinHostPort(old.Status.PodIP, "6379")
	kept := startWriterWith(t, oldAddr, f.pw, "{"+f.tags[0]+"}:kept:", false, 2_000_000, 5*time.Minute)
	kept.waitOK(t, time.Now(), time.Minute)
	keep := kept.serverSideAddr(t)
	cut := clientHosts(t, c, ns, faultCache, old.Status.PodIP) // the operator and the cluster writer: this machine
	for _, p := range memberPods(t, c, ns, faultCache) {
		if p.Name != old.Name {
			cut = append(cut, p.Status.PodIP)
		}
	}
	t0 := time.Now()
	heal := c.Partition(t, &old, cut, []string{keep})
	t.Logf("partitioned shard 0's primary %s from %v, keeping the writer's connection %s", old.Name, cut, keep)
	successor := f.waitShardPrimaryNot(t, f.tags[0], old, time.Minute)
	elected := time.Since(t0)
	back := f.w.waitShardWrites(t, 0, t0, time.Minute)
	last := waitFailoverRecorded(t, c, ns, old, successor)
	time.Sleep(time.Until(t0.Add(20 * time.Second))) // the fault's duration, not synchronisation
	heal()
	healed := time.Now()
	waitShardsWhole(t, c, ns, faultCache, 3*time.Minute)
	// Then another fault on the whole cache, under the same cluster writer: a replica of shard 1
	// flagged master over its replication (the state a node's stop can leave), which the operator
	// restarts (in this test to share its cache).
	stray := f.flagMasterAndHeal(t, f.tags[1])
	kept.halt()
	f.w.halt()

	// Read back from shard 0's primary of the moment (the spread phase may have handed the
	// shard back to the old member, once it had synced from its successor).
	now := currentPrimary(t, c, ctx, f.cc, ns, faultCache, f.tags[0])
	sc := newClient(net.JoinHostPort(now.Status.PodIP, "6379"), f.pw)
	defer sc.Close()
	lost := kept.lostWith(t, sc)
	lastLost := kept.lastAckOf(lost)
	clusterLost, acked := f.w.lost(t, f.cc)
	failedOver := eventsNaming(t, c, ns, "ShardFailedOver", old.Name)
	bytes, unmeasured, discarded := discardedEvents(t, c, ns, faultCache)
	counted, err := framework.Metric(metricsAddr, `cache_operator_failovers_total{kind="failover"}`)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("then %s", stray)
	t.Logf("the cluster writer's failures: %v, at %s", f.w.failures(), f.w.failedAt(map[string]time.Time{"the cut": t0, "the heal": healed}))
	t.Logf("asymmetric partition of %s for 20 s: %s elected %.1f s after the cut, the cluster writer's shard 0 writes again %.1f s after; the kept connection: %d of %d acknowledged writes lost, the last acknowledged %.1f s after the cut; the cluster writer: %d of %d lost; ShardFailedOver %q; WritesDiscarded %d bytes (%d unmeasured) %q; failovers counted %v; status.lastFailover %v",
		old.Name, successor.Name, elected.Seconds(), back.Seconds(), len(lost), len(kept.acked), lastLost.Sub(t0).Seconds(),
		len(clusterLost), acked, failedOver, bytes, unmeasured, discarded, counted, last)
	if len(lost) > 0 && lastLost.Sub(t0) > 5*time.Second {
		t.Errorf("the cut-off primary acknowledged a write %v after the cut; cluster-node-timeout bounds it to 2 s and a ping (5 s allowed)", lastLost.Sub(t0))
	}
	if len(clusterLost) > 0 {
		t.Errorf("the cluster writer lost %d acknowledged writes: %v", len(clusterLost), clusterLost[:min(len(clusterLost), 10)])
	}
	if len(failedOver) == 0 || counted < 1 {
		t.Errorf("the failover of %s to %s not reported: ShardFailedOver %q, failovers counted %v", old.Name, successor.Name, failedOver, counted)
	}
}

// TestShardedCacheNodeStop: the node under shard 0's primary is stopped (its agent and every
// process of its pods killed, as a machine lost; it also holds another shard's member). The
// cluster fails the primary over to its replica on another node; the shard takes writes again,
// the operator reports the failover, and when the node is back its members rejoin and the cache
// is whole. Before the stop and after the node is back, the operator has the
// primaries on three nodes (with two on one node, its loss would leave one primary of three, no
// majority to fail anything over). Every write the cluster writer saw acknowledged is read back.
func TestShardedCacheNodeStop(t *testing.T) {
	c := framework.Setup(t)
	ns := c.RealNamespace(t, "shnode")
	startOperatorIn(t, c, ns)
	deleteCachesOnCleanup(t, c, ns)
	f := newShardedFaultCache(t, c, ns)
	ctx := context.Background()

	spread := f.waitPrimariesSpread(t, time.Minute)
	old := currentPrimary(t, c, ctx, f.cc, ns, faultCache, f.tags[0])
	var alsoThere []string
	for _, p := range memberPods(t, c, ns, faultCache) {
		if p.Spec.NodeName == old.Spec.NodeName && p.Name != old.Name {
			alsoThere = append(alsoThere, p.Name)
		}
	}
	t0 := time.Now()
	c.StopNode(t, old.Spec.NodeName)
	successor := f.waitShardPrimaryNot(t, f.tags[0], old, time.Minute)
	elected := time.Since(t0)
	back := f.w.waitShardWrites(t, 0, t0, time.Minute)
	last := waitFailoverRecorded(t, c, ns, old, successor)
	t.Logf("primaries on three nodes %.1f s after Ready; node %s stopped under shard 0's primary %s (and %v): %s elected %.1f s after, the shard took writes again %.1f s after",
		spread.Seconds(), old.Spec.NodeName, old.Name, alsoThere, successor.Name, elected.Seconds(), back.Seconds())
	if peer := shardPeerOf(t, c, ns, faultCache, old); peer.Name != successor.Name {
		t.Errorf("shard 0's slots went to %s, not to %s, the primary's replica", successor.Name, peer.Name)
	}
	// Stopped for 20 s in all, then back: its members rejoin.
	time.Sleep(time.Until(t0.Add(20 * time.Second))) // the fault's duration, not synchronisation
	t1 := time.Now()
	c.StartNode(t, old.Spec.NodeName)
	waitShardsWhole(t, c, ns, faultCache, 3*time.Minute)
	whole := time.Since(t1)
	respread := f.waitPrimariesSpread(t, time.Minute)
	f.w.halt()
	lost, acked := f.w.lost(t, f.cc)
	failedOver := eventsNaming(t, c, ns, "ShardFailedOver", old.Name)
	t.Logf("node back: the cache whole %.1f s after its start, the primaries on three nodes again %.1f s after that; %d writes acknowledged, %d lost; failures by kind %v; ShardFailedOver %q; status.lastFailover %v",
		whole.Seconds(), respread.Seconds(), acked, len(lost), f.w.failures(), failedOver, last)
	if len(lost) > 0 {
		t.Errorf("acknowledged writes lost: %v", lost[:min(len(lost), 10)])
	}
	if len(failedOver) == 0 {
		t.Errorf("the failover of %s not reported: no ShardFailedOver Event naming it", old.Name)
	}
}
