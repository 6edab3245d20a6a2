package operator

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"example.com/cache-operator/e2e/framework"
	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/member/membertest"
)

// flagMasterAndHeal puts a replica of the cache's shard tag (a member serving no slot) in the
// state a former primary was left in after a node's stop that swapped two members' addresses
// (TestShardedCacheNodeStop met it, and the sharded campaign): its cluster flags say master, with
// no slots, while its replication follows its primary and it holds keys, which no command leaves
// (CLUSTER REPLICATE refuses a master with keys, FLUSHALL a replica). It is made the way the
// engine makes it, with a PONG in the member's own name that says master (the one it sends itself
// when it reaches its own address through a peer's stale entry). The operator restarts the member
// (RestartingMember: its pod deleted, its volume kept); started again it is emptied and attached
// to its shard's primary, and the cache is whole again. It returns what to log.
func (f shardedFaultCache) flagMasterAndHeal(t *testing.T, tag string) string {
	t.Helper()
	c, ns, ctx := f.c, f.ns, context.Background()
	p := currentPrimary(t, c, ctx, f.cc, ns, faultCache, tag)
	r := shardPeerOf(t, c, ns, faultCache, p)
	rc := newClient(net.JoinHostPort(r.Status.PodIP, strconv.Itoa(api.Port)), f.pw)
	defer rc.Close()
	// myself is the member's own line of CLUSTER NODES, as it says it.
	myself := func(cl *redis.Client) (string, error) {
		nodes, err := cl.ClusterNodes(ctx).Result()
		if err != nil {
			return "", err
		}
		for _, line := range strings.Split(nodes, "\n") {
			if strings.Contains(line, "myself") {
				return line, nil
			}
		}
		return "", fmt.Errorf("no myself line in %q", nodes)
	}
	framework.Eventually(t, time.Minute, r.Name+" a replica holding keys", func() (bool, string, error) {
		line, err := myself(rc)
		if err != nil {
			return false, "", err
		}
		keys, err := rc.DBSize(ctx).Result()
		return err == nil && strings.Contains(line, "myself,slave") && keys > 0, fmt.Sprintf("%q, %d keys (%v)", line, keys, err), nil
	})
	line, _ := myself(rc)
	id := strings.Fields(line)[0]

	t0 := time.Now()
	membertest.ClaimMasterAsItself(t, net.JoinHostPort(r.Status.PodIP, strconv.Itoa(api.ClusterBusPort)), id)
	framework.Eventually(t, 10*time.Second, r.Name+" flagged master by its own PONG", func() (bool, string, error) {
		line, err := myself(rc)
		return err == nil && strings.Contains(line, "myself,master"), fmt.Sprintf("%q (%v)", line, err), nil
	})
	line, _ = myself(rc)
	keys, _ := rc.DBSize(ctx).Result()
	var restarting []string
	framework.Eventually(t, time.Minute, "a RestartingMember Event naming "+r.Name, func() (bool, string, error) {
		restarting = eventsNaming(t, c, ns, api.EventRestartingMember, r.Name)
		return len(restarting) > 0, fmt.Sprintf("%q", restarting), nil
	})
	reported := time.Since(t0)
	framework.Eventually(t, time.Minute, r.Name+" a new pod", func() (bool, string, error) {
		now, err := c.Kube.CoreV1().Pods(ns).Get(ctx, r.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		return now.UID != r.UID, "uid " + string(now.UID), nil
	})
	waitShardsWhole(t, c, ns, faultCache, 3*time.Minute)
	whole := time.Since(t0)
	now, err := c.Kube.CoreV1().Pods(ns).Get(ctx, r.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nc := newClient(net.JoinHostPort(now.Status.PodIP, strconv.Itoa(api.Port)), f.pw)
	defer nc.Close()
	nodes, err := nc.ClusterNodes(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	pID, mine := "", ""
	for _, l := range strings.Split(nodes, "\n") {
		if fs := strings.Fields(l); len(fs) > 3 && strings.HasPrefix(fs[1], p.Status.PodIP+":") {
			pID = fs[0]
		}
		if strings.Contains(l, "myself") {
			mine = l
		}
	}
	if fs := strings.Fields(mine); len(fs) < 4 || !strings.Contains(fs[2], "slave") || fs[3] != pID {
		t.Errorf("%s after the restart: %q; want a replica of %s (%s)", r.Name, mine, p.Name, pID)
	}
	emptied := eventsNaming(t, c, ns, api.EventFormerPrimaryEmptied, r.Name)
	return fmt.Sprintf("%s flagged master holding %d keys (%q): restarted %.1f s after the PONG (%q), the cache whole %.1f s after it; FormerPrimaryEmptied %q",
		r.Name, keys, line, reported.Seconds(), restarting, whole.Seconds(), emptied)
}
