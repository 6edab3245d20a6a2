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
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"example.com/cache-operator/e2e/framework"
)

// createV2Cache creates a cache from a v2 spec.
func createV2Cache(t *testing.T, c *framework.Cluster, ns, name string, spec map[string]interface{}) {
	t.Helper()
	mc := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "cache.example.com/v2", "kind": "ManagedCache",
		"metadata": map[string]interface{}{"name": name, "namespace": ns},
		"spec":     spec,
	}}
	if _, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Create(context.Background(), mc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating ManagedCache %s/%s: %v", ns, name, err)
	}
}

// infoInt reads one integer field of INFO section.
func infoInt(ctx context.Context, cl *redis.Client, section, field string) (int64, error) {
	info, err := cl.Info(ctx, section).Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("INFO %s has no %s", section, field)
}

type memoryReading struct {
	used  int64 // used_memory less mem_not_counted_for_evict, what eviction compares with maxmemory
	after time.Duration
}

// memorySettles polls INFO memory until the memory eviction counts is at most maxmemory, and
// returns the first such reading, or an error naming the last one seen at the deadline.
func memorySettles(ctx context.Context, cl *redis.Client, maxmemory int64, timeout time.Duration) (memoryReading, error) {
	start := time.Now()
	var last memoryReading
	var lastErr error
	for time.Since(start) < timeout {
		used, err := infoInt(ctx, cl, "memory", "used_memory")
		notCounted, err2 := infoInt(ctx, cl, "memory", "mem_not_counted_for_evict")
		if err == nil {
			err = err2
		}
		last, lastErr = memoryReading{used: used - notCounted, after: time.Since(start)}, err
		if err == nil && last.used <= maxmemory {
			return last, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return last, fmt.Errorf("still %d counted for eviction after %v (last error %v)", last.used, timeout, lastErr)
}

func configGet(ctx context.Context, cl *redis.Client, name string) (string, error) {
	m, err := cl.ConfigGet(ctx, name).Result()
	return m[name], err
}

// fill writes n values of size bytes under prefix through cl, 32 to a round trip, with a TTL when
// ttl > 0. It returns how many were acknowledged and the first error (a refused write ends it).
func fill(ctx context.Context, cl *redis.Client, prefix string, n, size int, ttl time.Duration) (int, error) {
	value := strings.Repeat("v", size)
	acked := 0
	for i := 0; i < n; i += 32 {
		cmds, err := cl.Pipelined(ctx, func(p redis.Pipeliner) error {
			for j := i; j < min(i+32, n); j++ {
				p.Set(ctx, fmt.Sprintf("%s:%d", prefix, j), value, ttl)
			}
			return nil
		})
		for _, cmd := range cmds {
			if cmd.Err() == nil {
				acked++
			}
		}
		if err != nil {
			return acked, err
		}
	}
	return acked, nil
}

func restartsByPod(pods []corev1.Pod) map[string]string {
	out := map[string]string{}
	for _, p := range pods {
		n := int32(0)
		for _, cs := range p.Status.ContainerStatuses {
			n += cs.RestartCount
		}
		out[p.Name] = fmt.Sprintf("%s/%d", p.UID, n)
	}
	return out
}

// TestEvictionOnRealNodes: maxmemory always follows from the spec (eviction.maxMemory, or three
// quarters of the memory limit, or half the volume), and each policy does on a real server what
// Redis documents, with twice maxmemory written: allkeys-lru evicts, accepts every write, and stays
// under maxmemory and its container's limit; noeviction refuses writes once full and evicts
// nothing; volatile-lru evicts only keys with a TTL, then refuses writes, and keeps every key
// without one. No server restarts.
func TestEvictionOnRealNodes(t *testing.T) {
	parallel(t)
	c := framework.Setup(t)
	ctx := context.Background()
	ns := c.RealNamespace(t, "evict")
	startOperatorIn(t, c, ns)
	deleteCachesOnCleanup(t, c, ns)
	v2 := func(policy, maxMemory, limit string) map[string]interface{} {
		spec := map[string]interface{}{"replicas": int64(1), "engine": map[string]interface{}{"version": "7.2"},
			"storage": map[string]interface{}{"size": "1Gi"}, "eviction": map[string]interface{}{"policy": policy}}
		if maxMemory != "" {
			spec["eviction"].(map[string]interface{})["maxMemory"] = maxMemory
		}
		if limit != "" {
			spec["resources"] = map[string]interface{}{"limits": map[string]interface{}{"memory": limit}}
		}
		return spec
	}
	cases := []struct {
		name      string
		spec      map[string]interface{}
		maxmemory int64
		limit     int64 // the container's memory limit (0: none)
	}{
		{"lru-spec", v2("allkeys-lru", "24Mi", "128Mi"), 24 << 20, 128 << 20},
		{"lru-limit", v2("allkeys-lru", "", "128Mi"), 96 << 20, 128 << 20},
		{"noevict", v2("noeviction", "16Mi", ""), 16 << 20, 0},
		{"volatile", v2("volatile-lru", "16Mi", ""), 16 << 20, 0},
		// v1 has no memory field: half the 1Gi volume.
		{"v1-storage", nil, 512 << 20, 0},
	}
	for _, tc := range cases {
		if tc.spec == nil {
			createCache(t, c, ns, tc.name, map[string]interface{}{"size": int64(1), "version": "7.2", "storageGi": int64(1), "evictionPolicy": "allkeys-lru"})
			continue
		}
		createV2Cache(t, c, ns, tc.name, tc.spec)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			waitWhole(t, c, ns, tc.name, 1, 3*time.Minute)
			pw := password(t, c, ns, tc.name)
			cl := bulkClient(net.JoinHostPort(clusterIP(t, c, ns, tc.name+"-rw"), "6379"), pw)
			defer cl.Close()
			// CONFIG is the internal user's (the clients' user gets NOPERM).
			ic := internalClient(t, c, ns, tc.name, clusterIP(t, c, ns, tc.name+"-rw"))
			defer ic.Close()
			got, err := configGet(ctx, ic, "maxmemory")
			if err != nil || got != strconv.FormatInt(tc.maxmemory, 10) {
				t.Fatalf("maxmemory %q (%v); want %d", got, err, tc.maxmemory)
			}
			if tc.name == "v1-storage" {
				return
			}
			before := restartsByPod(memberPods(t, c, ns, tc.name))
			const size = 64 << 10
			n := int(2 * tc.maxmemory / size) // twice maxmemory
			switch tc.spec["eviction"].(map[string]interface{})["policy"] {
			case "allkeys-lru":
				acked, err := fill(ctx, cl, "k", n, size, 0)
				if err != nil || acked != n {
					t.Fatalf("allkeys-lru: %d of %d writes acknowledged (%v); want every one", acked, n, err)
				}
				evicted, _ := infoInt(ctx, cl, "stats", "evicted_keys")
				used, _ := infoInt(ctx, cl, "memory", "used_memory")
				rss, _ := infoInt(ctx, cl, "memory", "used_memory_rss")
				keys, _ := cl.DBSize(ctx).Result()
				t.Logf("allkeys-lru, maxmemory %d MiB: wrote %d MiB; %d keys kept, %d evicted; used_memory %.1f MiB, RSS %.1f MiB (limit %d MiB)",
					tc.maxmemory>>20, n*size>>20, keys, evicted, float64(used)/(1<<20), float64(rss)/(1<<20), tc.limit>>20)
				if evicted == 0 || keys >= int64(n) {
					t.Errorf("nothing evicted: %d keys kept of %d written, evicted_keys %d", keys, n, evicted)
				}
				// Redis bounds the time one command spends evicting (maxmemory-eviction-tenacity)
				// and finishes in a timer when over it, so a loaded machine may see the memory
				// above maxmemory just after the last write: it must come down without writes.
				if used > tc.maxmemory {
					if settled, err := memorySettles(ctx, cl, tc.maxmemory, 10*time.Second); err != nil {
						t.Errorf("used_memory %d above maxmemory %d just after the writes; %v", used, tc.maxmemory, err)
					} else {
						t.Logf("used_memory %d above maxmemory just after the writes, %d (counted for eviction) %v later", used, settled.used, settled.after.Round(time.Millisecond))
					}
				}
				if rss >= tc.limit {
					t.Errorf("RSS %d at or above the container's limit %d", rss, tc.limit)
				}
			case "noeviction":
				acked, err := fill(ctx, cl, "k", n, size, 0)
				evicted, _ := infoInt(ctx, cl, "stats", "evicted_keys")
				keys, _ := cl.DBSize(ctx).Result()
				t.Logf("noeviction, maxmemory %d MiB: %d of %d writes acknowledged, then %v; %d keys, %d evicted", tc.maxmemory>>20, acked, n, err, keys, evicted)
				if err == nil || !strings.Contains(err.Error(), "OOM") {
					t.Errorf("writing twice maxmemory: error %v; want OOM refusals", err)
				}
				if evicted != 0 || keys != int64(acked) {
					t.Errorf("%d keys for %d acknowledged writes, %d evicted; want none lost", keys, acked, evicted)
				}
			case "volatile-lru":
				// Half of maxmemory with a TTL, then keys without one until refused.
				ttlKeys, err := fill(ctx, cl, "ttl", n/4, size, time.Hour)
				if err != nil {
					t.Fatalf("writing keys with a TTL: %v", err)
				}
				acked, err := fill(ctx, cl, "k", n, size, 0)
				evicted, _ := infoInt(ctx, cl, "stats", "evicted_keys")
				t.Logf("volatile-lru, maxmemory %d MiB: %d keys with a TTL, then %d of %d without acknowledged, then %v; %d evicted", tc.maxmemory>>20, ttlKeys, acked, n, err, evicted)
				if evicted == 0 {
					t.Error("no key with a TTL evicted")
				}
				if err == nil || !strings.Contains(err.Error(), "OOM") {
					t.Errorf("error %v; want OOM refusals once no key with a TTL is left", err)
				}
				for i := 0; i < acked; i++ {
					if e, err := cl.Exists(ctx, fmt.Sprintf("k:%d", i)).Result(); err != nil || e != 1 {
						t.Fatalf("acknowledged key k:%d without a TTL is gone (%v)", i, err)
					}
				}
			}
			if after := restartsByPod(memberPods(t, c, ns, tc.name)); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Errorf("members restarted: before %v, after %v", before, after)
			}
		})
	}
}

// TestLiveSettingsChange: changing the eviction policy and maxmemory of a running cache of three
// applies both to every member with CONFIG SET, with no pod restarted or replaced and the
// StatefulSet's revision unchanged; status says which revision each member has.
func TestLiveSettingsChange(t *testing.T) {
	parallel(t)
	ctx := context.Background()
	rc := newRealCache(t, "live", "l")
	c, ns := rc.c, rc.ns
	before := restartsByPod(memberPods(t, c, ns, "l"))
	sts, err := c.Kube.AppsV1().StatefulSets(ns).Get(ctx, "l", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	revision := sts.Status.UpdateRevision

	start := time.Now()
	patch := `{"spec":{"eviction":{"policy":"volatile-lru","maxMemory":"40Mi"}}}`
	if _, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Patch(ctx, "l", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, time.Minute, "every member at volatile-lru and 40Mi, ConfigApplied True", func() (bool, string, error) {
		var seen []string
		done := true
		for _, p := range memberPods(t, c, ns, "l") {
			cl := internalClient(t, c, ns, "l", p.Status.PodIP)
			policy, err1 := configGet(ctx, cl, "maxmemory-policy")
			maxmemory, err2 := configGet(ctx, cl, "maxmemory")
			cl.Close()
			seen = append(seen, fmt.Sprintf("%s: %s %s", p.Name, policy, maxmemory))
			if err1 != nil || err2 != nil || policy != "volatile-lru" || maxmemory != strconv.Itoa(40<<20) {
				done = false
			}
		}
		mc, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Get(ctx, "l", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		cond := ""
		conds, _, _ := unstructured.NestedSlice(mc.Object, "status", "conditions")
		for _, cd := range conds {
			if m, _ := cd.(map[string]interface{}); m["type"] == "ConfigApplied" {
				cond = fmt.Sprintf("%v/%v: %v", m["status"], m["reason"], m["message"])
			}
		}
		members, _, _ := unstructured.NestedSlice(mc.Object, "status", "members")
		var revs []string
		for _, m := range members {
			mm, _ := m.(map[string]interface{})
			revs = append(revs, fmt.Sprint(mm["configRevision"]))
		}
		same := len(revs) == 3 && revs[0] == revs[1] && revs[1] == revs[2] && strings.Contains(cond, revs[0])
		return done && strings.HasPrefix(cond, "True/") && same, fmt.Sprintf("%v; condition %s; member revisions %v", seen, cond, revs), nil
	})
	t.Logf("eviction policy and maxmemory applied to 3 members in %v", time.Since(start).Round(10*time.Millisecond))
	if after := restartsByPod(memberPods(t, c, ns, "l")); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("members restarted or replaced: before %v, after %v", before, after)
	}
	sts, err = c.Kube.AppsV1().StatefulSets(ns).Get(ctx, "l", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sts.Status.UpdateRevision != revision {
		t.Errorf("the StatefulSet's revision moved from %s to %s: a live change must not touch the pod template", revision, sts.Status.UpdateRevision)
	}
}
