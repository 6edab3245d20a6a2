package operator

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"example.com/cache-operator/e2e/framework"
)

// TestShardedCacheSwitchover: kubectl managedcache switchover of a sharded cache (Valkey 8.1 in
// cluster mode, 4 shards × 2 on the three real nodes, so that one node runs two primaries) names
// the replica to hand its shard to. To a replica on a node with one primary, from a node with two: the operator hands the
// shard over (CLUSTER FAILOVER) under a cluster writer, which loses nothing, and the spread phase
// leaves it there. To a replica that would leave a node with none while another runs three (or
// two more than one): refused, with the reason, and nothing moves. Without --to: refused.
func TestShardedCacheSwitchover(t *testing.T) {
	parallel(t)
	c := framework.Setup(t)
	ctx := context.Background()
	ns := c.RealNamespace(t, "shswitch")
	startOperatorIn(t, c, ns)
	deleteCachesOnCleanup(t, c, ns)
	const name = "sw"
	createShardedWith(t, c, ns, name, map[string]interface{}{"shards": int64(4),
		"engine": map[string]interface{}{"name": "valkey", "version": "8.1"}})
	pw := password(t, c, ns, name)
	cc := clusterClient(net.JoinHostPort(clusterIP(t, c, ns, name+"-rw"), "6379"), pw)
	defer cc.Close()
	tags := shardTags(t, ctx, cc, 4)

	// The primaries as the cluster serves them, by node, once spread (two, one, one).
	type layout struct {
		primary map[int]corev1.Pod // by shard
		perNode map[string]int
	}
	read := func() layout {
		l := layout{primary: map[int]corev1.Pod{}, perNode: map[string]int{}}
		for i, tag := range tags {
			p := currentPrimary(t, c, ctx, cc, ns, name, tag)
			l.primary[i] = p
			l.perNode[p.Spec.NodeName]++
		}
		return l
	}
	var l layout
	framework.Eventually(t, time.Minute, "the 4 primaries spread over the 3 nodes (2, 1, 1)", func() (bool, string, error) {
		l = read()
		most, least := 0, 4
		for _, n := range []string{"real-a", "real-b", "real-c"} {
			most, least = max(most, l.perNode[n]), min(least, l.perNode[n])
		}
		return most-least <= 1, fmt.Sprintf("primaries per node %v", l.perNode), nil
	})
	var good string
	var goodShard int
	for shard := range len(tags) {
		p := l.primary[shard]
		if r := shardPeerOf(t, c, ns, name, p); l.perNode[p.Spec.NodeName] == 2 && l.perNode[r.Spec.NodeName] == 1 {
			good, goodShard = r.Name, shard
			break
		}
	}
	if good == "" {
		t.Fatalf("no replica to switch to in the layout %v (primaries %v)", l.perNode, l.primary)
	}
	// unspread is a replica whose switchover, in layout m, would leave a node with two primaries
	// more than another ("": none).
	unspread := func(m layout) string {
		for shard := range len(tags) {
			p := m.primary[shard]
			r := shardPeerOf(t, c, ns, name, p)
			counts := map[string]int{"real-a": m.perNode["real-a"], "real-b": m.perNode["real-b"], "real-c": m.perNode["real-c"]}
			counts[p.Spec.NodeName]--
			counts[r.Spec.NodeName]++
			most, least := 0, len(tags)
			for _, n := range counts {
				most, least = max(most, n), min(least, n)
			}
			if most-least >= 2 {
				return r.Name
			}
		}
		return ""
	}

	dir := pluginPath(t)
	mc := func(args ...string) (string, error) {
		return kubectlPlugin(t, c, dir, append(append([]string{"managedcache"}, args...), "-n", ns)...)
	}
	if out, err := mc("switchover", name); err == nil || !strings.Contains(out, "--to") {
		t.Errorf("switchover of a sharded cache without --to: %v\n%s; want it refused, asking for --to", err, out)
	}

	w := startClusterWriter(cc, tags, 200_000, 5*time.Minute)
	defer w.halt()
	framework.Eventually(t, 30*time.Second, "the writer's first 300 acknowledged writes", func() (bool, string, error) {
		n := w.ackedCount()
		return n >= 300, fmt.Sprintf("%d acknowledged", n), nil
	})
	t0 := time.Now()
	out, err := mc("switchover", name, "--to", good)
	took := time.Since(t0)
	if err != nil || !strings.Contains(out, good+" serves its shard's slots") {
		t.Fatalf("switchover to %s: %v\n%s", good, err, out)
	}
	if p := currentPrimary(t, c, ctx, cc, ns, name, tags[goodShard]); p.Name != good {
		t.Errorf("after the switchover shard %d is served by %s; want %s", goodShard, p.Name, good)
	}
	// The layout the switchover left: a replica whose switchover would unspread it.
	l = read()
	bad := unspread(l)
	if bad == "" {
		t.Fatalf("no replica whose switchover would unspread the layout %v (primaries %v)", l.perNode, l.primary)
	}
	out2, err := mc("switchover", name, "--to", bad)
	if err == nil || !strings.Contains(out2, "would make it run") {
		t.Errorf("switchover to %s: %v\n%s; want it refused, the primaries kept spread", bad, err, out2)
	}
	// Left where the user put it: the spread phase does not hand it back (an observation window).
	time.Sleep(5 * time.Second) // observing that nothing moves, not synchronisation
	after := read()
	w.halt()
	lost, acked := w.lost(t, cc)
	t.Logf("switchover to %s: %q in %.1f s; to %s: %q; primaries per node after %v; %d writes acknowledged, %d lost, failures %v",
		good, strings.TrimSpace(out), took.Seconds(), bad, strings.TrimSpace(out2), after.perNode, acked, len(lost), w.failures())
	if after.primary[goodShard].Name != good {
		t.Errorf("5 s after the switchover shard %d is served by %s; want %s still", goodShard, after.primary[goodShard].Name, good)
	}
	for shard, p := range l.primary {
		if shard != goodShard && after.primary[shard].Name != p.Name {
			t.Errorf("shard %d moved from %s to %s; only shard %d was asked to", shard, p.Name, after.primary[shard].Name, goodShard)
		}
	}
	if len(lost) > 0 {
		t.Errorf("acknowledged writes lost: %v", lost[:min(len(lost), 10)])
	}
}

// shardPeerOf is the other member of pod's shard of cache name.
func shardPeerOf(t *testing.T, c *framework.Cluster, ns, name string, pod corev1.Pod) corev1.Pod {
	t.Helper()
	prefix := pod.Name[:strings.LastIndex(pod.Name, "-")+1]
	for _, p := range memberPods(t, c, ns, name) {
		if strings.HasPrefix(p.Name, prefix) && p.Name != pod.Name {
			return p
		}
	}
	t.Fatalf("no other member of %s's shard", pod.Name)
	return corev1.Pod{}
}
