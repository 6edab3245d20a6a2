package operator

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"example.com/cache-operator/e2e/framework"
	"example.com/cache-operator/engine/api"
)

// TestShardedCacheHibernates: a sharded cache of 3 shards × 2 holding 3,000 keys, hibernated while
// a cluster writer still writes: every member stops (Hibernated True, no member pod, the six
// volume claims kept). Resumed, every member comes back at a new address with its nodes.conf and
// its data, the operator introduces them to each other again, and the cache is Ready with every
// slot served. Every key filled before and every write acknowledged up to the stop is there.
func TestShardedCacheHibernates(t *testing.T) {
	parallel(t)
	c := framework.Setup(t)
	ctx := context.Background()
	ns := c.RealNamespace(t, "shhib")
	startOperatorIn(t, c, ns)
	deleteCachesOnCleanup(t, c, ns)
	const name = "nap"
	createSharded(t, c, ns, name)
	pw := password(t, c, ns, name)
	cc := clusterClient(net.JoinHostPort(clusterIP(t, c, ns, name+"-rw"), "6379"), pw)
	defer cc.Close()
	const keys, size = 3000, 100
	fillCluster(t, cc, keys, size)
	w := startClusterWriter(cc, shardTags(t, ctx, cc, 3), 200_000, 5*time.Minute)
	defer w.halt()
	framework.Eventually(t, 30*time.Second, "the writer's first 300 acknowledged writes", func() (bool, string, error) {
		n := w.ackedCount()
		return n >= 300, fmt.Sprintf("%d acknowledged", n), nil
	})
	ips := map[string]string{}
	for _, p := range memberPods(t, c, ns, name) {
		ips[p.Name] = p.Status.PodIP
	}

	set := func(on bool) {
		t.Helper()
		patch := fmt.Sprintf(`{"spec":{"hibernate":%v}}`, on)
		if _, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Now()
	set(true)
	framework.Eventually(t, 3*time.Minute, "Hibernated True, no member pod", func() (bool, string, error) {
		s, r, msg := condition(t, c, ns, name, api.ConditionHibernated)
		pods := memberPods(t, c, ns, name)
		return s == "True" && len(pods) == 0, fmt.Sprintf("Hibernated %s/%s %q, %d member pods", s, r, msg, len(pods)), nil
	})
	stopped := time.Since(t0)
	w.halt()
	claims, err := c.Kube.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + name})
	if err != nil {
		t.Fatal(err)
	}
	if len(claims.Items) != 6 {
		t.Errorf("hibernated: %d volume claims; want the 6 members' kept", len(claims.Items))
	}

	t1 := time.Now()
	set(false)
	framework.Eventually(t, 3*time.Minute, "Ready again, the resume over", func() (bool, string, error) {
		mc, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		ready, reason, msg := readyReason(mc)
		_, resuming, _ := unstructured.NestedMap(mc.Object, "status", "hibernation")
		return ready == "True" && !resuming, fmt.Sprintf("Ready %s/%s %q, resuming %v", ready, reason, msg, resuming), nil
	})
	resumed := time.Since(t1)
	waitShardsWhole(t, c, ns, name, 2*time.Minute)
	moved := 0
	for _, p := range memberPods(t, c, ns, name) {
		if ips[p.Name] != p.Status.PodIP {
			moved++
		}
	}
	// Once Ready, a member may still list another at no address for a moment (its new one not
	// yet gossiped; seen once in a full run): a client's map of the slots read then points at
	// ":6379". Measured here, reported in the closing note; the reads below use a fresh map that
	// names every node.
	readable := time.Now()
	framework.Eventually(t, time.Minute, "every node in CLUSTER SLOTS at an address", func() (bool, string, error) {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		slots, err := cc.ClusterSlots(cctx).Result()
		if err != nil {
			return false, err.Error(), nil
		}
		for _, sl := range slots {
			for _, n := range sl.Nodes {
				if host, _, _ := net.SplitHostPort(n.Addr); host == "" {
					return false, fmt.Sprintf("slots %d-%d: node %s at %q", sl.Start, sl.End, n.ID, n.Addr), nil
				}
			}
		}
		return true, "", nil
	})
	cc.ReloadState(ctx)
	bad := checkFill(t, cc, keys, size)
	lost, acked := w.lost(t, cc)
	t.Logf("hibernated (every member stopped) %.1f s after the patch; resumed, Ready %.1f s after the patch, every node at an address in the slots %.1f s after that, %d of 6 members at a new address; %d of %d filled keys missing or changed; %d writes acknowledged up to the stop, %d lost; failures %v",
		stopped.Seconds(), resumed.Seconds(), time.Since(readable).Seconds(), moved, bad, keys, acked, len(lost), w.failures())
	if bad > 0 || len(lost) > 0 {
		t.Errorf("after the hibernation: %d filled keys missing or changed, %d acknowledged writes lost: %v", bad, len(lost), lost[:min(len(lost), 10)])
	}
	if n := eventCount(t, c, ns, name, api.EventResumed); n == 0 {
		t.Errorf("no %s Event", api.EventResumed)
	}
}
