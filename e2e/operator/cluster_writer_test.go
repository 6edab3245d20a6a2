package operator

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"example.com/cache-operator/e2e/framework"
)

// clusterWriter writes SET {<tag of shard s>}:<n> <n> for n = 0, 1, ..., s = n mod shards, through
// a cluster client, bounded in count and time, and records each outcome by shard.
type clusterWriter struct {
	mu     sync.Mutex
	cc     *redis.ClusterClient
	tags   []string
	acked  map[int]bool
	events map[int][]writeEvent // by shard
	stop   chan struct{}
	done   chan struct{}
}

func startClusterWriter(cc *redis.ClusterClient, tags []string, maxWrites int, maxTime time.Duration) *clusterWriter {
	w := &clusterWriter{cc: cc, tags: tags, acked: map[int]bool{}, events: map[int][]writeEvent{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		deadline := time.Now().Add(maxTime)
		for n := 0; n < maxWrites && time.Now().Before(deadline); n++ {
			select {
			case <-w.stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			start := time.Now()
			err := cc.Set(ctx, w.key(n), n, 0).Err()
			cancel()
			ev := writeEvent{at: time.Now(), ok: err == nil, took: time.Since(start)}
			w.mu.Lock()
			if err != nil {
				ev.err = err.Error()
			} else {
				w.acked[n] = true
			}
			shard := 0
			if len(w.tags) > 0 {
				shard = n % len(w.tags)
			}
			w.events[shard] = append(w.events[shard], ev)
			w.mu.Unlock()
			time.Sleep(2 * time.Millisecond) // a steady writer, not a flood
		}
	}()
	return w
}

// key is the key of write n: with tags, in shard n mod shards; without, anywhere (w:<n>, every
// slot in turn, all counted as shard 0's).
func (w *clusterWriter) key(n int) string {
	if len(w.tags) == 0 {
		return "w:" + strconv.Itoa(n)
	}
	return "{" + w.tags[n%len(w.tags)] + "}:" + strconv.Itoa(n)
}

// p99 is the 99th percentile of the time the acknowledged writes between from and to took.
func (w *clusterWriter) p99(from, to time.Time) (time.Duration, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var took []time.Duration
	for _, evs := range w.events {
		for _, ev := range evs {
			if ev.ok && ev.at.After(from) && ev.at.Before(to) {
				took = append(took, ev.took)
			}
		}
	}
	if len(took) == 0 {
		return 0, 0
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	return took[len(took)*99/100], len(took)
}

func (w *clusterWriter) halt() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

func (w *clusterWriter) ackedCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

// failedFor is how long shard's writes failed after t0: from the first failure to the last.
func (w *clusterWriter) failedFor(shard int, t0 time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var first, last time.Time
	for _, ev := range w.events[shard] {
		if ev.at.After(t0) && !ev.ok {
			if first.IsZero() {
				first = ev.at
			}
			last = ev.at
		}
	}
	return last.Sub(first)
}

// waitShardWrites waits until shard takes writes again after t0: a write acknowledged after the
// shard's last failure since t0, with at least one failure seen (or none within timeout: the
// member came back before a write failed). It returns the time from t0 to that write.
func (w *clusterWriter) waitShardWrites(t *testing.T, shard int, t0 time.Time, timeout time.Duration) time.Duration {
	t.Helper()
	var back time.Duration
	framework.Eventually(t, timeout, fmt.Sprintf("shard %d takes writes again", shard), func() (bool, string, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		var lastFail, okAfter time.Time
		fails := 0
		for _, ev := range w.events[shard] {
			if !ev.at.After(t0) {
				continue
			}
			if !ev.ok {
				lastFail, okAfter = ev.at, time.Time{}
				fails++
			} else if okAfter.IsZero() {
				okAfter = ev.at
			}
		}
		if !okAfter.IsZero() && (fails > 0 || time.Since(t0) > 15*time.Second) {
			back = okAfter.Sub(t0)
			return true, "", nil
		}
		return false, fmt.Sprintf("%d failed writes since, the last at +%v", fails, lastFail.Sub(t0).Round(time.Millisecond)), nil
	})
	return back
}

// ackedSince counts shard's writes acknowledged after t0.
func (w *clusterWriter) ackedSince(shard int, t0 time.Time) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, ev := range w.events[shard] {
		if ev.ok && ev.at.After(t0) {
			n++
		}
	}
	return n
}

// failures counts the failed writes by error, the first words of each.
func (w *clusterWriter) failures() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]int{}
	for _, evs := range w.events {
		for _, ev := range evs {
			if !ev.ok {
				f := strings.Fields(ev.err)
				out[strings.Join(f[:min(len(f), 3)], " ")]++
			}
		}
	}
	return out
}

// failedAt lists the failed writes' times, each after the latest of marks it follows ("+1.2s
// after 3 → 4").
func (w *clusterWriter) failedAt(marks map[string]time.Time) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, evs := range w.events {
		for _, ev := range evs {
			if ev.ok {
				continue
			}
			name, at := "the start", time.Time{}
			for n, m := range marks {
				if !ev.at.Before(m) && m.After(at) {
					name, at = n, m
				}
			}
			if at.IsZero() {
				out = append(out, ev.at.Format("15:04:05.000"))
				continue
			}
			out = append(out, fmt.Sprintf("+%.1fs after %s", ev.at.Sub(at).Seconds(), name))
		}
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// lost reads every acknowledged write back (GETs in pipelines, which the cluster client splits by
// shard) and returns those missing or wrong, and how many were acknowledged.
func (w *clusterWriter) lost(t *testing.T, cc *redis.ClusterClient) ([]int, int) {
	t.Helper()
	w.mu.Lock()
	acked := make([]int, 0, len(w.acked))
	for n := range w.acked {
		acked = append(acked, n)
	}
	w.mu.Unlock()
	sort.Ints(acked)
	var lost []int
	for i := 0; i < len(acked); i += 500 {
		batch := acked[i:min(i+500, len(acked))]
		var cmds []redis.Cmder
		var err error
		for try := 0; try < 10; try++ {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			cmds, err = cc.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, n := range batch {
					p.Get(ctx, w.key(n))
				}
				return nil
			})
			cancel()
			if err == nil || err == redis.Nil {
				break
			}
		}
		for j, cmd := range cmds {
			if v, err := cmd.(*redis.StringCmd).Result(); err != nil || v != strconv.Itoa(batch[j]) {
				lost = append(lost, batch[j])
			}
		}
		if len(cmds) == 0 {
			t.Fatalf("reading back writes %d-%d: %v", batch[0], batch[len(batch)-1], err)
		}
	}
	return lost, len(acked)
}
