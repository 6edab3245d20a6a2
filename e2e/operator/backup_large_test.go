package operator

import (
	"context"
	"fmt"
	"math/rand"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"example.com/cache-operator/e2e/framework"
)

// latencyProbe writes one key every interval to the primary (database 1, apart from the data
// compared), recording each acknowledged write's latency and time; bounded by maxTime.
type latencyProbe struct {
	mu      sync.Mutex
	samples []latencySample
	errors  int
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

type latencySample struct {
	at  time.Time
	lat time.Duration
}

func startLatencyProbe(cl *redis.Client, interval, maxTime time.Duration) *latencyProbe {
	p := &latencyProbe{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		ctx := context.Background()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		deadline := time.Now().Add(maxTime)
		for n := 0; time.Now().Before(deadline); n++ {
			select {
			case <-p.stop:
				return
			case <-tick.C:
			}
			start := time.Now()
			err := cl.Set(ctx, fmt.Sprintf("probe:%d", n%1000), n, 0).Err()
			p.mu.Lock()
			if err != nil {
				p.errors++
			} else {
				p.samples = append(p.samples, latencySample{start, time.Since(start)})
			}
			p.mu.Unlock()
		}
	}()
	return p
}

func (p *latencyProbe) halt() { p.once.Do(func() { close(p.stop) }); <-p.done }

// p99 is the 99th percentile latency of the writes acknowledged in [from, to), and their count.
func (p *latencyProbe) p99(from, to time.Time) (time.Duration, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ds []time.Duration
	for _, s := range p.samples {
		if !s.at.Before(from) && s.at.Before(to) {
			ds = append(ds, s.lat)
		}
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	if len(ds) == 0 {
		return 0, 0
	}
	return ds[(len(ds)*99)/100], len(ds)
}

// windows is the p99 of each window of width in [from, to), as "max/p99" milliseconds: where
// in a phase the slow writes fall.
func (p *latencyProbe) windows(from, to time.Time, width time.Duration) string {
	var out []string
	for w := from; w.Before(to); w = w.Add(width) {
		p99, n := p.p99(w, w.Add(width))
		if n > 0 {
			out = append(out, fmt.Sprintf("%.1f", float64(p99.Microseconds())/1000))
		}
	}
	return strings.Join(out, " ")
}

// fillBytes writes about total bytes of incompressible values of size bytes each (database 0),
// from four connections at once (each a pipeline of 8 MiB at a time over its quarter of the keys):
// the server works on one connection's batch while the others' are on the wire. It returns the
// number of keys.
func fillBytes(t *testing.T, cl *redis.Client, total, size int) int {
	t.Helper()
	const workers = 4
	n := total / size
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		go func(w int) {
			ctx := context.Background()
			rng := rand.New(rand.NewSource(42 + int64(w)))
			value := make([]byte, size)
			pipe := cl.Pipeline()
			from, to := w*n/workers, (w+1)*n/workers
			for i := from; i < to; i++ {
				rng.Read(value)
				pipe.Set(ctx, fmt.Sprintf("big:%06d", i), string(value), 0)
				if (i-from)%512 == 511 || i == to-1 {
					if _, err := pipe.Exec(ctx); err != nil {
						errs <- err
						return
					}
				}
			}
			errs <- nil
		}(w)
	}
	for w := 0; w < workers; w++ {
		if err := <-errs; err != nil {
			t.Fatalf("filling: %v", err)
		}
	}
	return n
}

// A dataset of 1 GiB on a size-3 cache under a steady writer: the backup's time, the primary's
// p99 write latency before and during it, the operator's RSS before and during; then its restore
// into a new cache: the time until the restored member is the primary and until the cache is
// Ready, and the same keys and values. What it asserts is what does not depend on this machine's
// speed: the primary neither forks nor serves a sync for the backup (the mechanism that keeps it
// unslowed), the operator's RSS grows by less than 10 MiB (the data never passes through it),
// and the restored data is the source's. The times and latencies are logged (targets, local:
// backup <= 60 s, restore to Ready <= 60 s, p99 during <= 2x before); it runs beside the other
// parallel tests in make test (its operator's RSS is its own process's), so BENCHMARKS.md's
// figures come from a run alone (go test -run TestBackupOneGiB).
func TestBackupOneGiB(t *testing.T) {
	parallel(t)
	c := framework.Setup(t)
	ctx := context.Background()
	ns := c.RealNamespace(t, "large")
	op := startOperatorIn(t, c, ns)
	deleteCachesOnCleanup(t, c, ns)
	store := c.ObjectStore(t)
	c.StoreSecret(t, ns, "store", store, nil)
	spec := func(extra map[string]interface{}) map[string]interface{} {
		s := v2Spec(3, extra)
		s["storage"] = map[string]interface{}{"size": "6Gi"} // maxmemory: half the volume
		return s
	}
	createCacheV2(t, c, ns, "big", spec(map[string]interface{}{
		"backup": map[string]interface{}{"store": map[string]interface{}{"secretName": "store"}, "onDelete": "Delete"},
	}))
	dumpMembersOnFailure(t, c, ns, "big")
	primary := waitWhole(t, c, ns, "big", 3, 3*time.Minute)
	pc := memberClient(t, c, ns, "big", primary.Name)
	start := time.Now()
	keys := fillBytes(t, pc, 1<<30, 16<<10)
	t.Logf("filled %d keys of 16 KiB (1 GiB) in %s", keys, time.Since(start).Round(100*time.Millisecond))
	want := fingerprint(t, pc)
	framework.Eventually(t, 3*time.Minute, "replicas caught up", func() (bool, string, error) {
		mc, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Get(ctx, "big", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		s, r, _ := readyReason(mc)
		deg, why, _ := condition(t, c, ns, "big", "Degraded")
		return s == "True" && deg == "False", "Ready " + s + " " + r + ", Degraded " + deg + " " + why, nil
	})
	// The AOF rewrites the fill set off (each member forks for its own) are over: the forks
	// counted during the backup are the backup's.
	framework.Eventually(t, 5*time.Minute, "no member rewriting its AOF", func() (bool, string, error) {
		var busy []string
		for i := 0; i < 3; i++ {
			p, err := c.Kube.CoreV1().Pods(ns).Get(ctx, fmt.Sprintf("big-%d", i), metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			for _, f := range []string{"aof_rewrite_in_progress", "aof_rewrite_scheduled", "rdb_bgsave_in_progress"} {
				if v := infoStat(t, c, ns, "big", p.Status.PodIP, "persistence", f); v != "0" {
					busy = append(busy, p.Name+" "+f)
				}
			}
		}
		return len(busy) == 0, fmt.Sprint(busy), nil
	})

	probeClient := redis.NewClient(&redis.Options{Addr: primary.Status.PodIP + ":6379", Password: password(t, c, ns, "big"), DB: 1})
	defer probeClient.Close()
	probe := startLatencyProbe(probeClient, 5*time.Millisecond, 5*time.Minute)
	defer probe.halt()
	beforeFrom := time.Now()
	framework.Eventually(t, 20*time.Second, "10 s of writes before the backup", func() (bool, string, error) {
		return time.Since(beforeFrom) >= 10*time.Second, "", nil
	})
	rssBefore, err := framework.RSSMiB(op.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	forks := infoStat(t, c, ns, "big", primary.Status.PodIP, "stats", "total_forks")
	syncs := infoStat(t, c, ns, "big", primary.Status.PodIP, "stats", "sync_full")
	tl := startTimeline(c, ns, "big", 500*time.Millisecond, 5*time.Minute)
	backupStart := time.Now()
	createBackup(t, c, ns, "full", "big")
	rssMax := rssBefore
	var st backupStatus
	framework.Eventually(t, 5*time.Minute, "the 1 GiB backup to finish", func() (bool, string, error) {
		if r, err := framework.RSSMiB(op.cmd.Process.Pid); err == nil && r > rssMax {
			rssMax = r
		}
		b, err := c.Dynamic.Resource(mcbGVR).Namespace(ns).Get(ctx, "full", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		prev := st.Phase
		if st = readBackup(b); st.Phase != prev {
			tl.Mark("backup " + st.Phase)
		}
		return st.Phase == "Completed" || st.Phase == "Failed", st.Phase + " " + st.Message, nil
	})
	backupEnd := time.Now()
	tl.Log(t, "the source's members during the backup")
	t.Logf("primary p99 write latency per 5 s window during the backup (ms): %s", probe.windows(backupStart, backupEnd, 5*time.Second))
	took := backupEnd.Sub(backupStart)
	p99Before, nBefore := probe.p99(beforeFrom, backupStart)
	p99During, nDuring := probe.p99(backupStart, backupEnd)
	after := infoStat(t, c, ns, "big", primary.Status.PodIP, "stats", "total_forks")
	syncsAfter := infoStat(t, c, ns, "big", primary.Status.PodIP, "stats", "sync_full")
	t.Logf("1 GiB backup: %s in %s (%d bytes, %d keys, from %s, %s); primary p99 write latency %s before (%d writes), %s during (%d writes, %d errors); primary forks %s -> %s, full syncs served %s -> %s; operator RSS %.1f MiB before, %.1f MiB at most during (+%.1f MiB)",
		st.Phase, took.Round(100*time.Millisecond), st.Bytes, st.Keys, st.Member, st.Reason, p99Before, nBefore, p99During, nDuring, probe.errors, forks, after, syncs, syncsAfter, rssBefore, rssMax, rssMax-rssBefore)
	if syncsAfter != syncs {
		t.Errorf("the primary served a full sync during the backup (sync_full %s -> %s)", syncs, syncsAfter)
	}
	if st.Phase != "Completed" || st.Reason != "FromReplica" {
		t.Fatalf("backup %s (%s): %s", st.Phase, st.Reason, st.Message)
	}
	if st.Keys < want.Keys {
		t.Errorf("the backup records %d keys; the source held %d in database 0 alone", st.Keys, want.Keys)
	}
	if after != forks {
		t.Errorf("the primary forked during the backup (total_forks %s -> %s)", forks, after)
	}
	if rssMax-rssBefore >= 10 {
		t.Errorf("the operator's RSS grew by %.1f MiB during the backup; target < 10 MiB", rssMax-rssBefore)
	}
	probe.halt()

	restoreStart := time.Now()
	rtl := startTimeline(c, ns, "copy", 500*time.Millisecond, 5*time.Minute)
	createCacheV2(t, c, ns, "copy", spec(map[string]interface{}{"restore": map[string]interface{}{"backup": "full"}}))
	dumpMembersOnFailure(t, c, ns, "copy")
	var serving time.Duration
	framework.Eventually(t, 5*time.Minute, "the restored member to be the primary", func() (bool, string, error) {
		mc, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Get(ctx, "copy", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		phase, _, _ := unstructured.NestedString(mc.Object, "status", "restore", "phase")
		msg, _, _ := unstructured.NestedString(mc.Object, "status", "restore", "message")
		serving = time.Since(restoreStart)
		return phase == "Completed", phase + ": " + msg, nil
	})
	rtl.Mark("restore Completed")
	cp := waitWhole(t, c, ns, "copy", 3, 5*time.Minute)
	ready := time.Since(restoreStart)
	rtl.Mark("cache whole")
	rtl.Log(t, "the restored cache's members")
	got := fingerprint(t, memberClient(t, c, ns, "copy", cp.Name))
	full := infoStat(t, c, ns, "copy", cp.Status.PodIP, "stats", "sync_full")
	partial := infoStat(t, c, ns, "copy", cp.Status.PodIP, "stats", "sync_partial_ok")
	t.Logf("restore of 1 GiB into a new size-3 cache: the restored member primary after %s, the cache Ready (both replicas synced) after %s; %s (source %s); the primary served %s full syncs, %s partial ones",
		serving.Round(100*time.Millisecond), ready.Round(100*time.Millisecond), got, want, full, partial)
	if got != want || cp.Name != "copy-0" {
		t.Errorf("restored %s on %s; want %s on copy-0", got, cp.Name, want)
	}
	// Every member restored the snapshot with its replication history: the replicas resumed from
	// the restored primary without a full copy (each at least once: first through the read-write
	// Service, then again when the operator points it at the primary's address).
	if n, _ := strconv.Atoi(partial); full != "0" || n < 2 {
		t.Errorf("the restored primary served %s full syncs and %s partial ones; want none and at least 2", full, partial)
	}
	for i := 1; i < 3; i++ {
		r, err := c.Kube.CoreV1().Pods(ns).Get(ctx, fmt.Sprintf("copy-%d", i), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := fingerprint(t, memberClient(t, c, ns, "copy", r.Name)); got != want {
			t.Errorf("replica %s holds %s; want %s", r.Name, got, want)
		}
	}
}
