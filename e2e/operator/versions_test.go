package operator

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"example.com/cache-operator/e2e/framework"
	"example.com/cache-operator/engine/dataset"
)

// Rolls across real versions: the local nodes run each image's own server (localcluster/node's image
// table: redis 7.0.15 from bookworm, redis 8.0.2 and valkey 8.1.1 from trixie), so a version or
// engine change replaces the server program and its data format under the members' data.

// serverOf is each member's "engine version" from INFO server, by pod name.
func serverOf(t *testing.T, c *framework.Cluster, ns, cache string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range memberPods(t, c, ns, cache) {
		cl := internalClient(t, c, ns, cache, p.Status.PodIP)
		info, err := cl.Info(context.Background(), "server").Result()
		if err != nil {
			t.Fatalf("INFO server on %s: %v", p.Name, err)
		}
		field := func(name string) string {
			m := regexp.MustCompile(`(?m)^` + name + `:(\S+)`).FindStringSubmatch(info)
			if m == nil {
				return ""
			}
			return m[1]
		}
		engine, version := "redis", field("redis_version")
		if field("server_name") == "valkey" {
			engine, version = "valkey", field("valkey_version")
		}
		out[p.Name] = engine + " " + version
	}
	return out
}

// wantServers fails unless every member runs engine at a version starting with prefix.
func wantServers(t *testing.T, got map[string]string, engine, prefix, when string) {
	t.Helper()
	for pod, s := range got {
		if !strings.HasPrefix(s, engine+" "+prefix) {
			t.Errorf("%s: %s runs %s, want %s %s*", when, pod, s, engine, prefix)
		}
	}
	t.Logf("%s: INFO server %v", when, got)
}

// rollResult is what rollTo saw.
type rollResult struct {
	order         []string
	before, after *corev1.Pod
	took          time.Duration
}

// rollTo patches the cache's spec.engine and waits until every member has restarted on the new
// revision and the cache is whole again, checking one primary at each step; the old primary must
// go last and hand over.
func rollTo(t *testing.T, c *framework.Cluster, ns, cache, pw string, before *corev1.Pod, engine string) rollResult {
	t.Helper()
	uids := map[string]types.UID{}
	for _, p := range memberPods(t, c, ns, cache) {
		uids[p.Name] = p.UID
	}
	start := time.Now()
	patch := []byte(fmt.Sprintf(`{"spec":{"engine":%s}}`, engine))
	if _, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Patch(context.Background(), cache, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	var order []string
	framework.Eventually(t, 8*time.Minute, "every member restarted on "+engine, func() (bool, string, error) {
		for _, p := range memberPods(t, c, ns, cache) {
			if p.UID != uids[p.Name] {
				seen := false
				for _, o := range order {
					seen = seen || o == p.Name
				}
				if !seen {
					order = append(order, p.Name)
				}
			}
		}
		assertOnePrimary(t, c, ns, cache, pw, "a step of the roll")
		return len(order) == len(uids), fmt.Sprintf("restarted so far, in order: %v", order), nil
	})
	after := waitWhole(t, c, ns, cache, int64(len(uids)), 3*time.Minute)
	r := rollResult{order: order, before: before, after: after, took: time.Since(start)}
	if order[len(order)-1] != before.Name {
		t.Errorf("restart order %v: the primary %s was not last", order, before.Name)
	}
	if after.Name == before.Name {
		t.Errorf("the primary is still %s: no handover happened", after.Name)
	}
	return r
}

// dataKeys are the keys written before a roll, of every type, whose fingerprint must survive it.
const dataKeys = 20_000

// fillAndFingerprint writes dataKeys keys through the primary and returns the fingerprint of the
// whole dataset (before any writer starts).
func fillAndFingerprint(t *testing.T, c *framework.Cluster, ns, cache, primary string) dataset.Fingerprint {
	t.Helper()
	cl := memberClient(t, c, ns, cache, primary)
	fillKeys(t, cl, "d", dataKeys)
	f := fingerprint(t, cl)
	if f.Keys != dataKeys {
		t.Fatalf("after filling: %v, want %d keys", f, dataKeys)
	}
	return f
}

// checkDataSurvived removes the writer's keys (prefix w:) through the primary once the writer has
// been counted, then compares every member's fingerprint with the one taken before the roll.
func checkDataSurvived(t *testing.T, c *framework.Cluster, ns, cache string, before dataset.Fingerprint) {
	t.Helper()
	ctx := context.Background()
	primary := waitWhole(t, c, ns, cache, int64(len(memberPods(t, c, ns, cache))), 3*time.Minute)
	cl := memberClient(t, c, ns, cache, primary.Name)
	var cursor uint64
	removed := 0
	for {
		keys, next, err := cl.Scan(ctx, cursor, "w:*", 5000).Result()
		if err != nil {
			t.Fatalf("SCAN: %v", err)
		}
		if len(keys) > 0 {
			if err := cl.Unlink(ctx, keys...).Err(); err != nil {
				t.Fatalf("UNLINK: %v", err)
			}
			removed += len(keys)
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	names := []string{}
	for _, p := range memberPods(t, c, ns, cache) {
		names = append(names, p.Name)
	}
	sort.Strings(names)
	for _, name := range names {
		var got dataset.Fingerprint
		framework.Eventually(t, time.Minute, name+" holds the data written before the roll", func() (bool, string, error) {
			got = fingerprint(t, memberClient(t, c, ns, cache, name))
			return got == before, fmt.Sprintf("%v, before the roll %v", got, before), nil
		})
		t.Logf("%s after the roll (the writer's %d keys removed): %v; before: %v", name, removed, got, before)
	}
}

// TestRollRedis70ToValkey81: the migration of a size-3 redis 7.0 cache to valkey 8.1 under a
// steady writer: replicas first (valkey replicas of the redis primary), the handover to a valkey
// member last; no acknowledged write lost, writes stopped at most 2 s, every key and value kept.
func TestRollRedis70ToValkey81(t *testing.T) {
	rc := newRealCacheAt(t, "migrate", "m", "7.0")
	c, ns, pw, rw := rc.c, rc.ns, rc.password, rc.addr
	wantServers(t, serverOf(t, c, ns, "m"), "redis", "7.0.", "before the migration")
	before := fillAndFingerprint(t, c, ns, "m", rc.primary.Name)
	w := startWriter(t, rw, pw, 2_000_000, 10*time.Minute)
	w.waitOK(t, time.Now(), time.Minute)
	r := rollTo(t, c, ns, "m", pw, rc.primary, `{"name":"valkey","version":"8.1"}`)
	w.halt()
	failed, kinds := w.failedTime()
	lost := w.lost(t, rw, pw)
	wantServers(t, serverOf(t, c, ns, "m"), "valkey", "8.1.", "after the migration")
	t.Logf("redis 7.0 -> valkey 8.1 of a size-3 cache under a steady writer: rolled in %v, order %v, primary %s -> %s; "+
		"writes failed for %v (target <= 2s), by kind %v; acknowledged writes lost: %d of %d",
		r.took.Round(100*time.Millisecond), r.order, r.before.Name, r.after.Name, failed.Round(10*time.Millisecond), kinds, len(lost), len(w.acked))
	if failed > 2*time.Second {
		t.Errorf("writes failed for %v during the migration; target <= 2s", failed)
	}
	if len(lost) != 0 {
		t.Errorf("%d acknowledged writes lost in the migration (first %v)", len(lost), lost[:min(5, len(lost))])
	}
	checkDataSurvived(t, c, ns, "m", before)

	// Back to redis: refused, whatever the version, and the cache is left as it is.
	_, err := c.Kubectl(context.Background(), "patch", "managedcaches.v2.cache.example.com", "m", "-n", ns, "--type=merge", "-p", `{"spec":{"engine":{"name":"redis","version":"8.0"}}}`)
	wantRejected(t, "valkey 8.1 -> redis 8.0", err, "spec.engine: changing from valkey 8.1 to redis 8.0 would lose the data: redis cannot load data written by valkey")
	t.Logf("valkey 8.1 -> redis 8.0 refused: %v", err)
}

// TestDowngradeWithDataLossAllowed: redis 8.0 -> 7.0 is refused (the data is in a format 7.0
// cannot read) until the cache carries cache.example.com/allow-data-loss=true; then every member
// restarts at once on 7.0 and starts empty, the loss is reported (Event DataDiscarded with the key
// count, cache_operator_data_reset_keys_total), and the cache is Ready and writable on 7.0.
func TestDowngradeWithDataLossAllowed(t *testing.T) {
	parallel(t)
	c := framework.Setup(t)
	ctx := context.Background()
	metricsAddr := freeAddr(t)
	ns := c.RealNamespace(t, "downgrade")
	startOperatorIn(t, c, ns, "--metrics-bind-address="+metricsAddr)
	deleteCachesOnCleanup(t, c, ns)
	dumpMembersOnFailure(t, c, ns, "d")
	createCacheV2(t, c, ns, "d", map[string]interface{}{"replicas": int64(3),
		"engine": map[string]interface{}{"name": "redis", "version": "8.0"}, "storage": map[string]interface{}{"size": "1Gi"}})
	primary := waitWhole(t, c, ns, "d", 3, 3*time.Minute)
	wantServers(t, serverOf(t, c, ns, "d"), "redis", "8.0.", "before")
	before := fillAndFingerprint(t, c, ns, "d", primary.Name)

	patch := `{"spec":{"engine":{"version":"7.0"}}}`
	_, err := c.Kubectl(ctx, "patch", "managedcaches.v2.cache.example.com", "d", "-n", ns, "--type=merge", "-p", patch)
	wantRejected(t, "redis 8.0 -> 7.0 without the annotation", err, `to accept losing every key, annotate the ManagedCache with cache.example.com/allow-data-loss="true" first`)
	if _, err := c.Kubectl(ctx, "annotate", "managedcache", "d", "-n", ns, "cache.example.com/allow-data-loss=true"); err != nil {
		t.Fatal(err)
	}
	uids := map[string]types.UID{}
	for _, p := range memberPods(t, c, ns, "d") {
		uids[p.Name] = p.UID
	}
	start := time.Now()
	if _, err := c.Kubectl(ctx, "patch", "managedcaches.v2.cache.example.com", "d", "-n", ns, "--type=merge", "-p", patch); err != nil {
		t.Fatalf("redis 8.0 -> 7.0 with the annotation: %v", err)
	}
	framework.Eventually(t, 3*time.Minute, "every member made anew", func() (bool, string, error) {
		var left []string
		for _, p := range memberPods(t, c, ns, "d") {
			if p.UID == uids[p.Name] {
				left = append(left, p.Name)
			}
		}
		return len(left) == 0, fmt.Sprintf("members not made anew yet: %v", left), nil
	})
	after := waitWhole(t, c, ns, "d", 3, 3*time.Minute)
	took := time.Since(start)
	wantServers(t, serverOf(t, c, ns, "d"), "redis", "7.0.", "after")
	for _, p := range memberPods(t, c, ns, "d") {
		if f := fingerprint(t, memberClient(t, c, ns, "d", p.Name)); f.Keys != 0 {
			t.Errorf("%s holds %v after the reset; want it empty", p.Name, f)
		}
	}
	msg := waitEvent(t, c, ns, "d", "Warning", "DataDiscarded", 30*time.Second)
	if !strings.Contains(msg, fmt.Sprintf("%d keys at the last poll are discarded", before.Keys)) || !strings.Contains(msg, "redis 8.0 to redis 7.0") {
		t.Errorf("DataDiscarded: %q; want the change and the %d keys", msg, before.Keys)
	}
	if n := value(scrape(t, metricsAddr), "cache_operator_data_reset_keys_total", nil); n != float64(before.Keys) {
		t.Errorf("cache_operator_data_reset_keys_total = %v, want %d", n, before.Keys)
	}
	cl := memberClient(t, c, ns, "d", after.Name)
	if err := cl.Set(ctx, "after-the-reset", "1", 0).Err(); err != nil {
		t.Errorf("a write to the new primary %s: %v", after.Name, err)
	}
	t.Logf("redis 8.0 -> 7.0 with allow-data-loss: every member made anew and the cache whole on 7.0 in %v, primary %s; %d keys discarded, reported: %s",
		took.Round(100*time.Millisecond), after.Name, before.Keys, msg)
}

// TestBackupAndRestoreOnEachEngine: a backup of a redis 8.0 cache (snapshot format 12, with a
// hash whose fields expire: a type Redis 7.4 added) and of a valkey 8.1 cache, each restored into
// a new cache of the same engine and version, every key and value equal.
func TestBackupAndRestoreOnEachEngine(t *testing.T) {
	parallel(t)
	c := framework.Setup(t)
	ctx := context.Background()
	ns := c.RealNamespace(t, "engines")
	startOperatorIn(t, c, ns)
	deleteCachesOnCleanup(t, c, ns)
	store := c.ObjectStore(t)
	c.StoreSecret(t, ns, "store", store, nil)
	for _, tc := range []struct{ name, engine, version, server string }{
		{"r8", "redis", "8.0", "8.0."},
		{"v81", "valkey", "8.1", "8.1."},
	} {
		engine := map[string]interface{}{"name": tc.engine, "version": tc.version}
		createCacheV2(t, c, ns, tc.name, map[string]interface{}{"replicas": int64(3), "engine": engine, "storage": map[string]interface{}{"size": "1Gi"},
			"backup": map[string]interface{}{"store": map[string]interface{}{"secretName": "store"}}})
		dumpMembersOnFailure(t, c, ns, tc.name)
		primary := waitWhole(t, c, ns, tc.name, 3, 3*time.Minute)
		pc := memberClient(t, c, ns, tc.name, primary.Name)
		fillKeys(t, pc, "data", 20000)
		if tc.engine == "redis" {
			if err := pc.HSet(ctx, "fields-that-expire", "kept", "1", "expiring", "2").Err(); err != nil {
				t.Fatal(err)
			}
			if err := pc.Do(ctx, "HEXPIRE", "fields-that-expire", 3600, "FIELDS", 1, "expiring").Err(); err != nil {
				t.Fatalf("HEXPIRE on redis %s: %v", tc.version, err)
			}
		}
		want := fingerprint(t, pc)
		backup := tc.name + "-b"
		createBackup(t, c, ns, backup, tc.name)
		st := waitBackup(t, c, ns, backup, 3*time.Minute)
		if st.Phase != "Completed" || st.Engine != tc.engine || !strings.HasPrefix(st.Version, tc.server) || st.Keys != want.Keys {
			t.Fatalf("backup of %s %s: %s (%s) %s; engine %q version %q, %d keys (want %d)", tc.engine, tc.version, st.Phase, st.Reason, st.Message, st.Engine, st.Version, st.Keys, want.Keys)
		}
		t.Logf("backup of %s %s: %d bytes, %d keys, from %s %s", tc.engine, tc.version, st.Bytes, st.Keys, st.Engine, st.Version)
		restoreIntoSpec(t, c, ns, tc.name+"-copy", map[string]interface{}{"replicas": int64(3), "engine": engine,
			"storage": map[string]interface{}{"size": "1Gi"}, "restore": map[string]interface{}{"backup": backup}}, want)
		wantServers(t, serverOf(t, c, ns, tc.name+"-copy"), tc.engine, tc.server, "the restored "+tc.engine+" "+tc.version)
	}
}
