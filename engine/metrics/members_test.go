package metrics

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
)

// sampleCache is a cache of size n as a member pass sees it: member 0 primary, the others
// replicas 100 bytes behind, the last one unreachable when down.
func sampleCache(ns, name string, n int, down bool) CacheSample {
	c := CacheSample{Namespace: ns, Cache: name, LastFailover: time.Unix(1_800_000_000, 0), LastFailoverTo: name + "-0", LastFailoverKind: "failover"}
	for i := range n {
		s := MemberSample{Member: fmt.Sprintf("%s-%d", name, i), Up: true, Role: "replica", Offset: 900, Lag: 100, HasLag: true, LinkUp: true,
			UsedMemory: 1 << 20, MaxMemory: 64 << 20, EvictedKeys: 3, ExpiredKeys: 4, Clients: 5, Keys: 1000}
		if i == 0 {
			s.Role, s.Offset, s.Lag, s.LinkUp = "primary", 1000, 0, false
		}
		if down && i == n-1 {
			s = MemberSample{Member: s.Member, Role: "unknown"}
		}
		c.Members = append(c.Members, s)
	}
	return c
}

func gatherText(t testing.TB, samples ...CacheSample) (string, int) {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(memberCollector{samples: func(yield func(CacheSample) bool) {
		for _, c := range samples {
			if !yield(c) {
				return
			}
		}
	}})
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	series := 0
	for _, f := range families {
		series += len(f.GetMetric())
		if _, err := expfmt.MetricFamilyToText(&buf, f); err != nil {
			t.Fatal(err)
		}
	}
	return buf.String(), series
}

func TestMemberSeries(t *testing.T) {
	text, series := gatherText(t, sampleCache("shop", "sessions", 3, false))
	// Per cache: the last failover; per member: up, two role series, offset, lag, used and max
	// memory, evicted, expired, clients, keys (11); per replica: its link (1).
	if want := 1 + 3*11 + 2; series != want {
		t.Errorf("%d series for a cache of 3; want %d:\n%s", series, want, text)
	}
	for _, line := range []string{
		`cache_operator_member_up{cache="sessions",member="sessions-2",namespace="shop"} 1`,
		`cache_operator_member_role{cache="sessions",member="sessions-0",namespace="shop",role="primary"} 1`,
		`cache_operator_member_role{cache="sessions",member="sessions-0",namespace="shop",role="replica"} 0`,
		`cache_operator_member_replication_lag_bytes{cache="sessions",member="sessions-1",namespace="shop"} 100`,
		`cache_operator_member_link_up{cache="sessions",member="sessions-1",namespace="shop"} 1`,
		`cache_operator_member_memory_max_bytes{cache="sessions",member="sessions-0",namespace="shop"} 6.7108864e+07`,
		`cache_operator_member_evicted_keys_total{cache="sessions",member="sessions-0",namespace="shop"} 3`,
		`cache_operator_member_last_failover_timestamp_seconds{cache="sessions",kind="failover",member="sessions-0",namespace="shop"} 1.8e+09`,
		"# TYPE cache_operator_member_expired_keys_total counter",
	} {
		if !strings.Contains(text, line+"\n") {
			t.Errorf("no line %q in:\n%s", line, text)
		}
	}
	if strings.Contains(text, `cache_operator_member_link_up{cache="sessions",member="sessions-0"`) {
		t.Error("the primary has a link series")
	}

	// A member that cannot be read has only up 0 and its role series, both 0.
	text, series = gatherText(t, sampleCache("shop", "sessions", 3, true))
	if want := 1 + 2*11 + 1 + 3; series != want {
		t.Errorf("%d series with a member down; want %d:\n%s", series, want, text)
	}
	for _, line := range []string{
		`cache_operator_member_up{cache="sessions",member="sessions-2",namespace="shop"} 0`,
		`cache_operator_member_role{cache="sessions",member="sessions-2",namespace="shop",role="primary"} 0`,
		`cache_operator_member_role{cache="sessions",member="sessions-2",namespace="shop",role="replica"} 0`,
	} {
		if !strings.Contains(text, line+"\n") {
			t.Errorf("no line %q in:\n%s", line, text)
		}
	}
	if strings.Contains(text, `cache_operator_member_keys{cache="sessions",member="sessions-2"`) {
		t.Error("a member that cannot be read reports keys")
	}
	// The series pass the exposition format's lint (names, units, help).
	problems, err := testutil.CollectAndLint(memberCollector{samples: func(yield func(CacheSample) bool) {
		yield(sampleCache("shop", "sessions", 3, false))
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// TestMemberSeriesAtScale gives the series count and the scrape size of the per-member series at
// 1,000 caches of 3 members (the README and BENCHMARKS.md quote it).
func TestMemberSeriesAtScale(t *testing.T) {
	samples := make([]CacheSample, 1000)
	for i := range samples {
		samples[i] = sampleCache(fmt.Sprintf("team-%03d", i%50), fmt.Sprintf("cache-%04d", i), 3, false)
	}
	text, series := gatherText(t, samples...)
	if want := 1000 * (1 + 3*11 + 2); series != want {
		t.Errorf("%d series at 1,000 caches; want %d", series, want)
	}
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	_, _ = w.Write([]byte(text))
	_ = w.Close()
	t.Logf("per-member series at 1,000 caches of 3: %d series (%d per cache), %d bytes of text exposition (%.0f per series), %d gzipped (as /metrics sends it to a scraper that accepts gzip)",
		series, series/1000, len(text), float64(len(text))/float64(series), gz.Len())
}

// BenchmarkCollectMembers is one scrape's collection of the per-member series of 1,000 caches.
func BenchmarkCollectMembers(b *testing.B) {
	samples := make([]CacheSample, 1000)
	for i := range samples {
		samples[i] = sampleCache("team", fmt.Sprintf("cache-%04d", i), 3, false)
	}
	b.ReportAllocs()
	for b.Loop() {
		gatherText(b, samples...)
	}
}

func TestNames(t *testing.T) {
	names := Names()
	for _, want := range []string{"cache_operator_reconcile_total", "cache_operator_managedcaches", "cache_operator_member_up",
		"cache_operator_member_last_failover_timestamp_seconds", "workqueue_depth", "go_goroutines", "process_resident_memory_bytes"} {
		if !slices.Contains(names, want) {
			t.Errorf("Names() lacks %s: %v", want, names)
		}
	}
}

// A sharded cache's members carry their shard, its cluster has its two series, and a
// primary/replica cache's series keep their labels.
func TestShardedSeries(t *testing.T) {
	sharded := sampleCache("shop", "orders", 2, false)
	for i := range sharded.Members {
		sharded.Members[i].Shard = "1"
	}
	sharded.Cluster = &ClusterSample{StateOK: true, SlotsServed: 16384}
	text, _ := gatherText(t, sharded, sampleCache("shop", "sessions", 3, false))
	for _, line := range []string{
		`cache_operator_member_up{cache="orders",member="orders-1",namespace="shop",shard="1"} 1`,
		`cache_operator_member_role{cache="orders",member="orders-0",namespace="shop",role="primary",shard="1"} 1`,
		`cache_operator_member_link_up{cache="orders",member="orders-1",namespace="shop",shard="1"} 1`,
		`cache_operator_cluster_state_ok{cache="orders",namespace="shop"} 1`,
		`cache_operator_cluster_slots_served{cache="orders",namespace="shop"} 16384`,
		`cache_operator_member_up{cache="sessions",member="sessions-2",namespace="shop"} 1`,
	} {
		if !strings.Contains(text, line+"\n") {
			t.Errorf("no line %q in:\n%s", line, text)
		}
	}
	if strings.Contains(text, `cache_operator_cluster_state_ok{cache="sessions"`) {
		t.Error("a primary/replica cache has a cluster series")
	}
}
