package operator

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"example.com/cache-operator/e2e/framework"
	"example.com/cache-operator/engine/api"
)

// TestShardedCacheReshards: a cache of 3 shards × 2 members (Redis 7.0) on the real nodes, filled
// with 20,000 keys of 1 KiB over every slot, goes to 4 shards and back to 3 under a cluster writer
// that records every acknowledged write and how long each took. On the way up the status shows
// the reshard's progress, a second change of the shard count is refused with it, and the operator
// is killed (SIGKILL) once the moves have begun: a new process goes on with them. On the way down
// the fourth shard gives every slot and key away, then its StatefulSet, disruption budget and
// claims are removed and the cluster forgets its nodes. Afterwards every acknowledged write and
// every filled key reads back equal, the writer saw no error (a cluster client follows MOVED and
// ASK), and each move's time, rate and the writes' p99 before and during it are reported.
func TestShardedCacheReshards(t *testing.T) {
	parallel(t)
	c := framework.Setup(t)
	ctx := context.Background()
	ns := c.RealNamespace(t, "reshard")
	// The operators run as their ServiceAccount with manifests/rbac.yaml's grants: the removal
	// of a shard is the one path that deletes claims and disruption budgets.
	if _, err := c.Kubectl(ctx, "apply", "--server-side", "--force-conflicts", "-n", "cache-operator-system", "-f", filepath.Join(c.Root, "manifests", "rbac.yaml")); err != nil {
		t.Fatal(err)
	}
	asSA := append(confined(t, c, ns), "--kubeconfig="+saKubeconfig(t, c))
	since := time.Now()
	op := startOperator(t, c, asSA...)
	deleteCachesOnCleanup(t, c, ns)
	const name = "grow"
	createSharded(t, c, ns, name)
	pw := password(t, c, ns, name)
	cc := clusterClient(net.JoinHostPort(clusterIP(t, c, ns, name+"-rw"), "6379"), pw)
	defer cc.Close()

	const filled, size = 20_000, 1024
	fillCluster(t, cc, filled, size)
	w := startClusterWriter(cc, nil, 400_000, 15*time.Minute)
	defer w.halt()
	framework.Eventually(t, 30*time.Second, "the writer's first 1,000 acknowledged writes", func() (bool, string, error) {
		n := w.ackedCount()
		return n >= 1000, fmt.Sprintf("%d acknowledged", n), nil
	})

	// 3 → 4 shards. Once the new shard serves a slot, the operator is killed in the middle of
	// the moves, and a new one goes on.
	t0 := time.Now()
	patchShards(t, c, ns, name, 4)
	framework.Eventually(t, 3*time.Minute, "the fourth shard serving slots", func() (bool, string, error) {
		counts, err := shardSlotCounts(ctx, cc)
		return err == nil && len(counts) == 4, fmt.Sprintf("slots per primary %v (%v)", counts, err), nil
	})
	var seen *api.ReshardStatus
	framework.Eventually(t, time.Minute, "status.reshard with slots moved", func() (bool, string, error) {
		seen = reshardStatus(t, c, ns, name)
		return seen != nil && seen.Shards == 4 && seen.SlotsMoved > 0, fmt.Sprintf("status.reshard %+v", seen), nil
	})
	_, err := c.Kubectl(ctx, "patch", "managedcaches.v2.cache.example.com", name, "-n", ns, "--type=merge", "-p", `{"spec":{"shards":5}}`)
	wantRejected(t, "a change of the shard count during a reshard", err, "spec.shards: a reshard to 4 shards is running (")
	op.stop(syscall.SIGKILL)
	atKill, _ := shardSlotCounts(ctx, cc)
	t.Logf("operator killed %.1f s into the reshard, status.reshard %+v; slots per primary %v", time.Since(t0).Seconds(), *seen, atKill)
	if n := slices.Min(atKill); n >= 4096 {
		t.Fatalf("the moves were over before the kill (%v): nothing to resume", atKill)
	}
	metricsAddr := freeAddr(t)
	startOperator(t, c, append(asSA, "--metrics-bind-address="+metricsAddr)...)
	up := waitResharded(t, c, cc, ns, name, 4, 5*time.Minute)
	upTook := time.Since(t0)
	if ev := waitEvent(t, c, ns, name, "Normal", api.EventReshardCompleted, time.Minute); !strings.Contains(ev, "Every shard of 4") {
		t.Errorf("ReshardCompleted says %q", ev)
	}

	// 4 → 3 shards: the fourth gives everything away and is removed.
	t1 := time.Now()
	patchShards(t, c, ns, name, 3)
	down := waitResharded(t, c, cc, ns, name, 3, 5*time.Minute)
	downTook := time.Since(t1)
	framework.Eventually(t, 3*time.Minute, "the fourth shard's StatefulSet, PDB, pods and claims gone, its nodes forgotten", func() (bool, string, error) {
		var left []string
		if _, err := c.Kube.AppsV1().StatefulSets(ns).Get(ctx, name+"-s3", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			left = append(left, fmt.Sprintf("StatefulSet (%v)", err))
		}
		if _, err := c.Kube.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, name+"-s3", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			left = append(left, fmt.Sprintf("PDB (%v)", err))
		}
		for _, p := range memberPods(t, c, ns, name) {
			if strings.HasPrefix(p.Name, name+"-s3-") {
				left = append(left, "pod "+p.Name)
			}
		}
		claims, err := c.Kube.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{LabelSelector: api.LabelShard + "=3"})
		if err != nil {
			return false, "", err
		}
		for _, cl := range claims.Items {
			left = append(left, "claim "+cl.Name)
		}
		nodes, err := cc.ClusterNodes(ctx).Result()
		if n := strings.Count(strings.TrimSpace(nodes), "\n") + 1; err != nil || n != 6 {
			left = append(left, fmt.Sprintf("%d nodes in CLUSTER NODES (%v)", n, err))
		}
		return len(left) == 0, strings.Join(left, ", "), nil
	})
	waitEvent(t, c, ns, name, "Normal", api.EventShardRemoved, time.Minute)
	saRequests(t, c, ns, since, "apps/statefulsets delete", "policy/poddisruptionbudgets delete", "/persistentvolumeclaims delete")
	if s, r, _ := condition(t, c, ns, name, api.ConditionResharding); s != "" {
		t.Errorf("Resharding %s/%s after the shard's removal; want no condition", s, r)
	}

	// kubectl managedcache status: the shards, each primary's slots, each member's figures from the
	// per-member series (which carry the shard).
	dir := pluginPath(t)
	var out string
	framework.Eventually(t, 30*time.Second, "kubectl managedcache status with every member's shard, slots and figures", func() (bool, string, error) {
		out, err = kubectlPlugin(t, c, dir, "managedcache", "status", name, "-n", ns, "--metrics-url=http://"+metricsAddr+"/metrics")
		primaries := regexp.MustCompile(`(?m)^[0-2]\s+[0-9][0-9,-]*\s+`+name+`-s[0-2]-[01]\s+primary\s+true\s`).FindAllString(out, -1)
		return err == nil && strings.Contains(out, "3 shards of 2 members") && len(primaries) == 3 && strings.Count(out, " MiB / ") == 6,
			fmt.Sprintf("%d primaries with slots (%v)\n%s", len(primaries), err, out), nil
	})
	t.Logf("kubectl managedcache status:\n%s", out)
	fams := scrape(t, metricsAddr)
	for _, m := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"cache_operator_cluster_state_ok", map[string]string{"namespace": ns, "cache": name}, 1},
		{"cache_operator_cluster_slots_served", map[string]string{"namespace": ns, "cache": name}, 16384},
		{"cache_operator_member_up", map[string]string{"namespace": ns, "cache": name, "member": name + "-s2-1", "shard": "2"}, 1},
		{"cache_operator_member_link_up", map[string]string{"namespace": ns, "cache": name, "shard": "1"}, 1},
	} {
		if got := value(fams, m.name, m.labels); got != m.want {
			t.Errorf("%s%v = %v; want %v", m.name, m.labels, got, m.want)
		}
	}

	w.halt()
	lost, acked := w.lost(t, cc)
	failures := w.failures()
	t.Logf("%d writes acknowledged through 3 → 4 → 3 shards, %d lost; failed writes by kind %v", acked, len(lost), failures)
	if len(lost) > 0 {
		t.Errorf("acknowledged writes lost: %v", lost[:min(len(lost), 10)])
	}
	if len(failures) > 0 {
		t.Errorf("writes failed during the reshards (a cluster client should see only the redirections it follows): %v; when: %s",
			failures, w.failedAt(map[string]time.Time{"3 → 4": t0, "4 → 3": t1}))
	}
	if bad := checkFill(t, cc, filled, size); bad > 0 {
		t.Errorf("%d of the %d filled keys missing or changed after the reshards", bad, filled)
	}
	before, nb := w.p99(t0.Add(-20*time.Second), t0)
	during, nd := w.p99(t0, t0.Add(upTook))
	duringDown, ndd := w.p99(t1, t1.Add(downTook))
	mib := float64(filled*size) / (1 << 20)
	t.Logf("3 → 4 shards: %.1f s with the operator's kill and restart (%d slots moved; ~%.1f MiB of the filled keys moved, a quarter); 4 → 3: %.1f s (%d slots); "+
		"writes' p99 before %v (%d writes), during 3 → 4 %v (%d), during 4 → 3 %v (%d)",
		upTook.Seconds(), up, mib/4, downTook.Seconds(), down, before, nb, during, nd, duringDown, ndd)
}

// saRequests checks, in the audit log, the operator ServiceAccount's requests in ns since then:
// none forbidden, and each of want made with success (TestRBACGrantsExactlyWhatTheOperatorUses
// counts these grants as used here).
func saRequests(t *testing.T, c *framework.Cluster, ns string, since time.Time, want ...string) {
	t.Helper()
	framework.Eventually(t, 15*time.Second, "the audit log to show the ServiceAccount's "+strings.Join(want, ", "), func() (bool, string, error) {
		events, err := c.AuditEventsAnyStage()
		if err != nil {
			return false, "", err
		}
		used := map[string]bool{}
		var forbidden []string
		for _, ev := range events {
			if ev.User.Username != operatorSA || ev.ObjectRef == nil || ev.ObjectRef.Namespace != ns || ev.RequestReceivedTimestamp.Before(since) {
				continue
			}
			req := ev.ObjectRef.APIGroup + "/" + ev.ObjectRef.Resource + " " + ev.Verb
			switch {
			case ev.ResponseStatus != nil && ev.ResponseStatus.Code == 403:
				forbidden = append(forbidden, req)
			case ev.ResponseStatus != nil && ev.ResponseStatus.Code < 300:
				used[req] = true
			}
		}
		if len(forbidden) > 0 {
			return false, "", fmt.Errorf("requests the granted RBAC forbade: %v", forbidden)
		}
		var missing []string
		for _, w := range want {
			if !used[w] {
				missing = append(missing, w)
			}
		}
		return len(missing) == 0, fmt.Sprintf("not seen: %v", missing), nil
	})
}

// patchShards sets spec.shards of a v2 cache.
func patchShards(t *testing.T, c *framework.Cluster, ns, name string, n int) {
	t.Helper()
	if out, err := c.Kubectl(context.Background(), "patch", "managedcaches.v2.cache.example.com", name, "-n", ns, "--type=merge",
		"-p", fmt.Sprintf(`{"spec":{"shards":%d}}`, n)); err != nil {
		t.Fatalf("patching spec.shards to %d: %v\n%s", n, err, out)
	}
}

// reshardStatus reads status.reshard of the cache (nil: none).
func reshardStatus(t *testing.T, c *framework.Cluster, ns, name string) *api.ReshardStatus {
	t.Helper()
	mc, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return api.ReshardOf(mc)
}

// waitResharded waits until the cache has no reshard left (no status.reshard, no Resharding
// condition), is Ready, and the cluster client sees n primaries, each with a replica, serving
// their even counts of every slot. It returns the slots the reshard's status last said it moved.
func waitResharded(t *testing.T, c *framework.Cluster, cc *redis.ClusterClient, ns, name string, n int, timeout time.Duration) int64 {
	t.Helper()
	var moved int64
	framework.Eventually(t, timeout, fmt.Sprintf("%s/%s resharded to %d shards", ns, name, n), func() (bool, string, error) {
		mc, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		r := api.ReshardOf(mc)
		if r != nil {
			moved = r.SlotsMoved + r.SlotsToMove
		}
		ready, reason, msg := readyReason(mc)
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		counts, err := shardSlotCounts(cctx, cc)
		sort.Ints(counts)
		balanced := err == nil && len(counts) == n && counts[0] >= 16384/n && counts[n-1] <= 16384/n+1
		pairs, _ := replicated(cctx, cc)
		return r == nil && ready == "True" && balanced && pairs == n, fmt.Sprintf("status.reshard %+v, Ready %s/%s %q, slots per primary %v (%v), shards with a replica %d",
			r, ready, reason, msg, counts, err, pairs), nil
	})
	return moved
}

// shardSlotCounts returns the slots each primary serves, as the cluster client reads CLUSTER
// SLOTS, by primary in the order of their first slot.
func shardSlotCounts(ctx context.Context, cc *redis.ClusterClient) ([]int, error) {
	slots, err := cc.ClusterSlots(ctx).Result()
	if err != nil {
		return nil, err
	}
	sort.Slice(slots, func(i, j int) bool { return slots[i].Start < slots[j].Start })
	byNode, order := map[string]int{}, []string{}
	for _, s := range slots {
		id := s.Nodes[0].ID
		if _, ok := byNode[id]; !ok {
			order = append(order, id)
		}
		byNode[id] += s.End - s.Start + 1
	}
	out := make([]int, len(order))
	for i, id := range order {
		out[i] = byNode[id]
	}
	return out, nil
}

// replicated counts the primaries every one of whose slot ranges has a replica.
func replicated(ctx context.Context, cc *redis.ClusterClient) (int, error) {
	slots, err := cc.ClusterSlots(ctx).Result()
	if err != nil {
		return 0, err
	}
	ok := map[string]bool{}
	for _, s := range slots {
		id := s.Nodes[0].ID
		if _, seen := ok[id]; !seen {
			ok[id] = true
		}
		ok[id] = ok[id] && len(s.Nodes) >= 2
	}
	n := 0
	for _, v := range ok {
		if v {
			n++
		}
	}
	return n, nil
}

// fillValue is key fill:<i>'s value: size bytes that depend on i.
func fillValue(i, size int) string {
	return strings.Repeat(fmt.Sprintf("%08d", i), size/8)
}

// fillCluster writes fill:0 … fill:<n-1> through the cluster client, in pipelines of 500.
func fillCluster(t *testing.T, cc *redis.ClusterClient, n, size int) {
	t.Helper()
	for i := 0; i < n; i += 500 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := cc.Pipelined(ctx, func(p redis.Pipeliner) error {
			for j := i; j < min(i+500, n); j++ {
				p.Set(ctx, "fill:"+strconv.Itoa(j), fillValue(j, size), 0)
			}
			return nil
		})
		cancel()
		if err != nil {
			t.Fatalf("filling keys %d-%d: %v", i, min(i+500, n)-1, err)
		}
	}
}

// checkFill reads every filled key back and counts those missing or changed.
func checkFill(t *testing.T, cc *redis.ClusterClient, n, size int) int {
	t.Helper()
	bad := 0
	for i := 0; i < n; i += 500 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmds, err := cc.Pipelined(ctx, func(p redis.Pipeliner) error {
			for j := i; j < min(i+500, n); j++ {
				p.Get(ctx, "fill:"+strconv.Itoa(j))
			}
			return nil
		})
		cancel()
		if err != nil && err != redis.Nil {
			t.Fatalf("reading the filled keys %d-%d: %v", i, min(i+500, n)-1, err)
		}
		for k, cmd := range cmds {
			if v, err := cmd.(*redis.StringCmd).Result(); err != nil || v != fillValue(i+k, size) {
				bad++
			}
		}
	}
	return bad
}
