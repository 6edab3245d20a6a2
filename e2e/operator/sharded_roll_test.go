package operator

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"example.com/cache-operator/e2e/framework"
	"example.com/cache-operator/engine/api"
)

// TestShardedCacheVersionRoll: a sharded cache of 3 shards × 2 members goes from Redis 7.0 to
// 8.0 under a cluster writer over every shard that records every acknowledged write. Each shard's
// StatefulSet rolls its members one at a time; a primary whose pod leaves hands its slots to its
// caught-up replica first (CLUSTER FAILOVER), and a member back at a new address is met again.
// Afterwards every member runs 8.0 (its server label and INFO), the cache is whole, and every
// acknowledged write reads back.
func TestShardedCacheVersionRoll(t *testing.T) {
	parallel(t)
	c := framework.Setup(t)
	ctx := context.Background()
	ns := c.RealNamespace(t, "shardroll")
	startOperatorIn(t, c, ns)
	deleteCachesOnCleanup(t, c, ns)
	const name = "roll"
	createSharded(t, c, ns, name)
	pw := password(t, c, ns, name)
	cc := clusterClient(net.JoinHostPort(clusterIP(t, c, ns, name+"-rw"), "6379"), pw)
	defer cc.Close()
	w := startClusterWriter(cc, shardTags(t, ctx, cc, 3), 300_000, 10*time.Minute)
	defer w.halt()
	framework.Eventually(t, 30*time.Second, "the writer's first 300 acknowledged writes", func() (bool, string, error) {
		n := w.ackedCount()
		return n >= 300, fmt.Sprintf("%d acknowledged", n), nil
	})

	t0 := time.Now()
	if out, err := c.Kubectl(ctx, "patch", "managedcaches.v2.cache.example.com", name, "-n", ns, "--type=merge",
		"-p", `{"spec":{"engine":{"version":"8.0"}}}`); err != nil {
		t.Fatalf("patching the version: %v\n%s", err, out)
	}
	want := api.ServerLabelValue("redis", "8.0")
	framework.Eventually(t, 6*time.Minute, "every member on redis 8.0", func() (bool, string, error) {
		var old []string
		for _, p := range memberPods(t, c, ns, name) {
			if p.Labels[api.LabelServer] != want || p.DeletionTimestamp != nil || !framework.PodReady(&p) {
				old = append(old, p.Name)
			}
		}
		return len(old) == 0, fmt.Sprintf("not yet: %v", old), nil
	})
	waitShardsWhole(t, c, ns, name, 3*time.Minute)
	took := time.Since(t0)
	// Each member's server says 8.0.
	err := cc.ForEachShard(ctx, func(ctx context.Context, m *redis.Client) error {
		info, err := m.Info(ctx, "server").Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "redis_version:8.0.") {
			return fmt.Errorf("%s: %s", m.Options().Addr, strings.SplitN(info[strings.Index(info, "redis_version:"):], "\n", 2)[0])
		}
		return nil
	})
	if err != nil {
		t.Errorf("a member's server is not 8.0: %v", err)
	}
	w.halt()
	lost, acked := w.lost(t, cc)
	t.Logf("redis 7.0 → 8.0 on 3 shards × 2: rolled and whole %.1f s after the patch; %d writes acknowledged, %d lost; failed writes by kind %v",
		took.Seconds(), acked, len(lost), w.failures())
	if len(lost) > 0 {
		t.Errorf("acknowledged writes lost: %v", lost[:min(len(lost), 10)])
	}
}
