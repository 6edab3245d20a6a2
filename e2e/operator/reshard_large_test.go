package operator

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"example.com/cache-operator/e2e/framework"
)

// TestReshardLarge (make bench-reshard; skipped unless CACHE_E2E_RESHARD_MIB names the data set's
// size): a cache of 3 shards × 2 members (Redis 7.0) on the real nodes, filled with that many MiB
// of 1 KiB values over every slot, goes to 6 shards and back to 3 under a cluster writer that
// records every acknowledged write and how long each took. It prints each move's time and MiB/s,
// the writes' p99 just before each (the members quiet) and during it, the acknowledged writes lost, the writes that failed,
// and the fingerprint (SHA-256 over every filled key and value, read back in order) before and
// after; it fails on a lost write, a failed write or a fingerprint that changed. The p99 target
// (within 3× of before) is printed beside the figures for BENCHMARKS.md, not asserted: on a
// shared 2-core machine it is a measurement.
func TestReshardLarge(t *testing.T) {
	mib, _ := strconv.Atoi(os.Getenv("CACHE_E2E_RESHARD_MIB"))
	if mib <= 0 {
		t.Skip("CACHE_E2E_RESHARD_MIB is not set: make bench-reshard runs this benchmark")
	}
	c := framework.Setup(t)
	ns := c.RealNamespace(t, "reshard-large")
	startOperatorIn(t, c, ns)
	deleteCachesOnCleanup(t, c, ns)
	const name, size = "big", 1024
	keys := mib * 1024
	createShardedWith(t, c, ns, name, map[string]interface{}{
		"engine":  map[string]interface{}{"name": "redis", "version": "7.0"},
		"storage": map[string]interface{}{"size": "8Gi"}})
	pw := password(t, c, ns, name)
	cc := clusterClient(net.JoinHostPort(clusterIP(t, c, ns, name+"-rw"), "6379"), pw)
	defer cc.Close()

	t0 := time.Now()
	fillClusterParallel(t, cc, keys, size, 4)
	t.Logf("filled %d keys of %d bytes (%d MiB) in %.1f s", keys, size, mib, time.Since(t0).Seconds())
	before := fillFingerprint(t, cc, keys)

	w := startClusterWriter(cc, nil, 5_000_000, 90*time.Minute)
	defer w.halt()
	type move struct {
		from, to  int
		took      time.Duration
		slots     int64
		idle, p99 time.Duration
		nIdle, n  int
	}
	var moves []move
	for _, step := range [][2]int{{3, 6}, {6, 3}} {
		// Each move's idle figure is taken just before it, once the aftermath of what came before
		// (the fill, the other move) is over: no member rewriting its AOF or saving a snapshot (a
		// fork stalls its server), every replica linked and synced; then 10,000 writes.
		quiet(t, cc, 5*time.Minute)
		idleFrom, first := time.Now(), w.ackedCount()
		framework.Eventually(t, time.Minute, "10,000 acknowledged writes (the idle p99's window)", func() (bool, string, error) {
			n := w.ackedCount() - first
			return n >= 10_000, fmt.Sprintf("%d acknowledged", n), nil
		})
		idle, nIdle := w.p99(idleFrom, time.Now())
		start := time.Now()
		patchShards(t, c, ns, name, step[1])
		slots := waitResharded(t, c, cc, ns, name, step[1], 60*time.Minute)
		took := time.Since(start)
		p99, n := w.p99(start, start.Add(took))
		moves = append(moves, move{step[0], step[1], took, slots, idle, p99, nIdle, n})
	}
	w.halt()
	lost, acked := w.lost(t, cc)
	failures := w.failures()
	after := fillFingerprint(t, cc, keys)

	for _, m := range moves {
		moved := float64(m.slots) / 16384 * float64(mib)
		t.Logf("%d → %d shards: %.1f s, %d slots (~%.0f MiB of the data set) at %.1f MiB/s; writes' p99 just before %v (%d writes), during %v (%d writes): %.1f×",
			m.from, m.to, m.took.Seconds(), m.slots, moved, moved/m.took.Seconds(), m.idle, m.nIdle, m.p99, m.n, float64(m.p99)/float64(m.idle))
	}
	t.Logf("%d writes acknowledged, %d lost; failed writes by kind %v; fingerprint of the %d filled keys before %x, after %x",
		acked, len(lost), failures, keys, before[:8], after[:8])
	if len(lost) > 0 {
		t.Errorf("acknowledged writes lost: %v", lost[:min(len(lost), 10)])
	}
	if len(failures) > 0 {
		t.Errorf("writes failed during the reshards (a cluster client sees only the redirections it follows): %v", failures)
	}
	if before != after {
		t.Errorf("the filled keys' fingerprint changed: %x before, %x after", before, after)
	}
}

// fillClusterParallel writes fill:0 … fill:<n-1> through the cluster client with workers side by
// side, in pipelines of 1,000.
func fillClusterParallel(t *testing.T, cc *redis.ClusterClient, n, size, workers int) {
	t.Helper()
	errs := make(chan error, workers)
	var next sync.Mutex
	from := 0
	for range workers {
		go func() {
			for {
				next.Lock()
				i := from
				from += 1000
				next.Unlock()
				if i >= n {
					errs <- nil
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				_, err := cc.Pipelined(ctx, func(p redis.Pipeliner) error {
					for j := i; j < min(i+1000, n); j++ {
						p.Set(ctx, "fill:"+strconv.Itoa(j), fillValue(j, size), 0)
					}
					return nil
				})
				cancel()
				if err != nil {
					errs <- fmt.Errorf("filling keys %d-%d: %w", i, min(i+1000, n)-1, err)
					return
				}
			}
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// fillFingerprint is the SHA-256 over fill:0 … fill:<n-1> and their values, read in order (a key
// missing reads as its name and no value).
func fillFingerprint(t *testing.T, cc *redis.ClusterClient, n int) [32]byte {
	t.Helper()
	h := sha256.New()
	for i := 0; i < n; i += 1000 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmds, err := cc.Pipelined(ctx, func(p redis.Pipeliner) error {
			for j := i; j < min(i+1000, n); j++ {
				p.Get(ctx, "fill:"+strconv.Itoa(j))
			}
			return nil
		})
		cancel()
		if err != nil && err != redis.Nil {
			t.Fatalf("reading the filled keys %d-%d: %v", i, min(i+1000, n)-1, err)
		}
		for k, cmd := range cmds {
			v, _ := cmd.(*redis.StringCmd).Result()
			fmt.Fprintf(h, "fill:%d\x00%s\x00", i+k, v)
		}
	}
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}

// quiet waits until no member of the cluster forks (an AOF rewrite or a snapshot in progress) and
// every replica is linked to its primary with no sync in progress.
func quiet(t *testing.T, cc *redis.ClusterClient, timeout time.Duration) {
	t.Helper()
	framework.Eventually(t, timeout, "every member quiet: no AOF rewrite or snapshot, every replica synced", func() (bool, string, error) {
		var mu sync.Mutex
		var busy []string
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := cc.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error {
			info, err := n.Info(ctx, "persistence", "replication").Result()
			if err != nil {
				return err
			}
			for _, bad := range []string{"aof_rewrite_in_progress:1", "aof_rewrite_scheduled:1", "rdb_bgsave_in_progress:1",
				"master_sync_in_progress:1", "master_link_status:down"} {
				if strings.Contains(info, bad) {
					mu.Lock()
					busy = append(busy, n.Options().Addr+" "+bad)
					mu.Unlock()
				}
			}
			return nil
		})
		if err != nil {
			return false, err.Error(), nil
		}
		return len(busy) == 0, fmt.Sprintf("busy: %v", busy), nil
	})
}
