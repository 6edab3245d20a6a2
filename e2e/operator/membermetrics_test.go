package operator

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"example.com/cache-operator/e2e/framework"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// cacheSeries returns, from a scrape, the series that carry the cache's labels, as
// "name{member,role}" -> value.
func cacheSeries(fams map[string]*dto.MetricFamily, ns, cache string) map[string]float64 {
	out := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["namespace"] != ns || l["cache"] != cache {
				continue
			}
			key := name + "{" + l["member"]
			for _, extra := range []string{"role", "kind"} {
				if r, ok := l[extra]; ok {
					key += "," + r
				}
			}
			key += "}"
			switch {
			case m.Gauge != nil:
				out[key] = m.GetGauge().GetValue()
			case m.Counter != nil:
				out[key] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// TestMemberMetricsOnRealNodes: the operator's /metrics carries each member's figures from its
// member passes (no sidecar, no command of its own): up, role, offsets and lag, the replicas'
// links, memory against maxmemory, evictions and expiries a real server counted, clients and keys;
// the last failover's time after a switchover; and nothing once the cache is gone. It gives the
// series count per cache.
func TestMemberMetricsOnRealNodes(t *testing.T) {
	parallel(t)
	c := framework.Setup(t)
	ctx := context.Background()
	metricsAddr := freeAddr(t)
	ns := c.RealNamespace(t, "membermetrics")
	startOperatorIn(t, c, ns, "--metrics-bind-address="+metricsAddr)
	deleteCachesOnCleanup(t, c, ns)
	const name = "mm"
	createV2Cache(t, c, ns, name, map[string]interface{}{"replicas": int64(3), "engine": map[string]interface{}{"version": "7.2"},
		"storage": map[string]interface{}{"size": "1Gi"}, "eviction": map[string]interface{}{"policy": "allkeys-lru", "maxMemory": "16Mi"}})
	primary := waitWhole(t, c, ns, name, 3, 3*time.Minute)
	pw := password(t, c, ns, name)
	cl := bulkClient(net.JoinHostPort(clusterIP(t, c, ns, name+"-rw"), "6379"), pw)
	defer cl.Close()
	// Twice maxmemory: the primary evicts (its replicas take its DELs); and keys that expire.
	const size = 64 << 10
	if acked, err := fill(ctx, cl, "k", 2*(16<<20)/size, size, 0); err != nil {
		t.Fatalf("filling: %d acknowledged, then %v", acked, err)
	}
	if acked, err := fill(ctx, cl, "short", 10, 16, 50*time.Millisecond); err != nil || acked != 10 {
		t.Fatalf("writing keys that expire: %d acknowledged, %v", acked, err)
	}
	members := []string{name + "-0", name + "-1", name + "-2"}
	var s map[string]float64
	framework.Eventually(t, time.Minute, "every member's series, the evictions and expiries counted, the replicas caught up", func() (bool, string, error) {
		// Reading the expired keys makes the primary count them, whenever its own cycle has not.
		for i := range 10 {
			_ = cl.Get(ctx, fmt.Sprintf("short:%d", i)).Err()
		}
		s = cacheSeries(scrape(t, metricsAddr), ns, name)
		ok := s["cache_operator_member_evicted_keys_total{"+primary.Name+"}"] > 0 && s["cache_operator_member_expired_keys_total{"+primary.Name+"}"] >= 10
		for _, m := range members {
			ok = ok && s["cache_operator_member_up{"+m+"}"] == 1
			// At rest: the writes have stopped, so every replica catches up (on a loaded
			// machine a replica was once still 5 MiB behind when the other figures were in).
			lag, has := s["cache_operator_member_replication_lag_bytes{"+m+"}"]
			ok = ok && has && lag <= 4<<20
		}
		return ok, fmt.Sprint(s), nil
	})
	dbsize, _ := cl.DBSize(ctx).Result()
	for _, m := range members {
		isPrimary := m == primary.Name
		want := map[string]float64{
			"cache_operator_member_memory_max_bytes":        16 << 20,
			"cache_operator_member_role{" + m + ",primary}": bool01(isPrimary),
			"cache_operator_member_role{" + m + ",replica}": bool01(!isPrimary),
		}
		if !isPrimary {
			want["cache_operator_member_link_up"] = 1
		} else {
			want["cache_operator_member_replication_lag_bytes"] = 0
			want["cache_operator_member_keys"] = float64(dbsize)
		}
		for k, v := range want {
			if !strings.Contains(k, "{") {
				k += "{" + m + "}"
			}
			if got, ok := s[k]; !ok || got != v {
				t.Errorf("%s = %v (present %v); want %v", k, got, ok, v)
			}
		}
		for _, k := range []string{"replication_offset_bytes", "memory_used_bytes", "connected_clients", "replication_lag_bytes"} {
			if _, ok := s["cache_operator_member_"+k+"{"+m+"}"]; !ok {
				t.Errorf("no cache_operator_member_%s for %s", k, m)
			}
		}
		if used := s["cache_operator_member_memory_used_bytes{"+m+"}"]; used <= 0 || used > 17<<20 {
			t.Errorf("%s uses %v bytes; want some, under maxmemory and a little", m, used)
		}
		if lag := s["cache_operator_member_replication_lag_bytes{"+m+"}"]; lag < 0 || lag > 4<<20 {
			t.Errorf("%s lags %v bytes at rest; want little", m, lag)
		}
	}
	if _, ok := s["cache_operator_member_link_up{"+primary.Name+"}"]; ok {
		t.Error("the primary has a link series")
	}
	before := len(s)
	t.Logf("a cache of 3 before any failover: %d series (%v evicted, %v expired on the primary, %d keys)", before,
		s["cache_operator_member_evicted_keys_total{"+primary.Name+"}"], s["cache_operator_member_expired_keys_total{"+primary.Name+"}"], dbsize)

	// A switchover: the roles' series swap and the last failover's time appears on the new primary.
	target := name + "-1"
	if primary.Name == target {
		target = name + "-2"
	}
	start := time.Now().Add(-time.Second)
	patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{"cache.example.com/switchover-to":%q}}}`, target))
	if _, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 60*time.Second, "the switchover in the metrics", func() (bool, string, error) {
		s = cacheSeries(scrape(t, metricsAddr), ns, name)
		at := s["cache_operator_member_last_failover_timestamp_seconds{"+target+",switchover}"]
		return at >= float64(start.Unix()) && s["cache_operator_member_role{"+target+",primary}"] == 1 &&
			s["cache_operator_member_role{"+primary.Name+",replica}"] == 1, fmt.Sprint(s), nil
	})
	// The status is written by the next reconcile, which can follow the metrics by a moment on a
	// busy machine: polled, with a deadline.
	var last map[string]string
	framework.Eventually(t, 30*time.Second, "status.lastFailover: a switchover from "+primary.Name+" to "+target, func() (bool, string, error) {
		mc, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		last, _, _ = unstructured.NestedStringMap(mc.Object, "status", "lastFailover")
		return last["kind"] == "switchover" && last["from"] == primary.Name && last["to"] == target && last["time"] != "", fmt.Sprint(last), nil
	})
	t.Logf("a cache of 3 after a switchover: %d series (%d per member and one for the last failover); status.lastFailover %v", len(s), (len(s)-1)/3, last)
	if len(s) != before+1 {
		t.Errorf("%d series after the switchover, %d before; want one more (the last failover)", len(s), before)
	}

	// Gone with the cache.
	if err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 60*time.Second, "the cache's series to go with it", func() (bool, string, error) {
		s = cacheSeries(scrape(t, metricsAddr), ns, name)
		return len(s) == 0, fmt.Sprint(s), nil
	})
}

func bool01(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
