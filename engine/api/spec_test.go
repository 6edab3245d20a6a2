package api

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"example.com/cache-operator/crd"
)

// maxmemory always has a value: spec.eviction.maxMemory, else three quarters of the memory
// limit, else half the volume.
func TestMaxMemory(t *testing.T) {
	for _, tc := range []struct {
		name   string
		spec   map[string]interface{}
		want   int64
		source string
	}{
		{"given", map[string]interface{}{"eviction": map[string]interface{}{"maxMemory": "768Mi"},
			"resources": map[string]interface{}{"limits": map[string]interface{}{"memory": "4Gi"}}}, 768 << 20, MaxMemoryFromSpec},
		{"from the limit", map[string]interface{}{"resources": map[string]interface{}{"limits": map[string]interface{}{"memory": "1Gi"}}}, 768 << 20, MaxMemoryFromLimit},
		{"a request is no bound", map[string]interface{}{"resources": map[string]interface{}{"requests": map[string]interface{}{"memory": "1Gi"}}}, 4 << 30, MaxMemoryFromStorage},
		{"from the default volume (8Gi)", map[string]interface{}{}, 4 << 30, MaxMemoryFromStorage},
		{"from the volume", map[string]interface{}{"storage": map[string]interface{}{"size": "3Gi"}}, 1536 << 20, MaxMemoryFromStorage},
		{"a limit in decimal units", map[string]interface{}{"resources": map[string]interface{}{"limits": map[string]interface{}{"memory": "400M"}}}, 300_000_000, MaxMemoryFromLimit},
	} {
		spec := map[string]interface{}{"engine": map[string]interface{}{"version": "7.2"}}
		for k, v := range tc.spec {
			spec[k] = v
		}
		s, err := SpecFrom(&unstructured.Unstructured{Object: map[string]interface{}{"spec": spec}})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if s.Eviction.MaxMemoryBytes != tc.want || s.Eviction.MaxMemorySource != tc.source {
			t.Errorf("%s: maxmemory %d from %s; want %d from %s", tc.name, s.Eviction.MaxMemoryBytes, s.Eviction.MaxMemorySource, tc.want, tc.source)
		}
	}
}

// The fence's defaults depend on the size; a value beyond the replicas is clamped; bad values are
// errors that name the field.
func TestFence(t *testing.T) {
	for _, tc := range []struct {
		name     string
		replicas int64
		failover map[string]interface{}
		want     Fence
		err      string
	}{
		{"size 1: nothing to fence against", 1, nil, Fence{0, 5}, ""},
		{"size 2: availability unless asked", 2, nil, Fence{0, 5}, ""},
		{"size 2, safety asked for", 2, map[string]interface{}{"minReplicasToWrite": int64(1)}, Fence{1, 5}, ""},
		{"size 3: one replica", 3, nil, Fence{1, 5}, ""},
		{"size 5, two replicas and 10 s", 5, map[string]interface{}{"minReplicasToWrite": int64(2), "maxLagSeconds": int64(10)}, Fence{2, 10}, ""},
		{"size 3, turned off", 3, map[string]interface{}{"minReplicasToWrite": int64(0)}, Fence{0, 5}, ""},
		{"clamped after a scale-down", 2, map[string]interface{}{"minReplicasToWrite": int64(4)}, Fence{1, 5}, ""},
		{"a lag of 0", 3, map[string]interface{}{"maxLagSeconds": int64(0)}, Fence{}, "spec.failover.maxLagSeconds"},
		{"a lag of 11", 3, map[string]interface{}{"maxLagSeconds": int64(11)}, Fence{}, "spec.failover.maxLagSeconds"},
		{"negative", 3, map[string]interface{}{"minReplicasToWrite": int64(-1)}, Fence{}, "spec.failover.minReplicasToWrite"},
	} {
		spec := map[string]interface{}{"engine": map[string]interface{}{"version": "7.2"}, "replicas": tc.replicas}
		if tc.failover != nil {
			spec["failover"] = tc.failover
		}
		s, err := SpecFrom(&unstructured.Unstructured{Object: map[string]interface{}{"spec": spec}})
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v; want one naming %s", tc.name, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.err == "" && s.Fence != tc.want:
			t.Errorf("%s: fence %+v; want %+v", tc.name, s.Fence, tc.want)
		}
	}
}

// spec.shards: absent is a primary/replica cache; 3 to 32 is a sharded one of replicas members
// per shard (the fence per shard); anything else, or a name too long for the shards' children,
// is an error that names the field.
func TestShards(t *testing.T) {
	long := strings.Repeat("n", MaxShardedNameLength+1)
	for _, tc := range []struct {
		name, cache string
		spec        map[string]interface{}
		shards      int64
		fence       Fence
		err         string
	}{
		{"not sharded", "c", map[string]interface{}{"replicas": int64(3)}, 0, Fence{1, 5}, ""},
		{"three shards of two", "c", map[string]interface{}{"shards": int64(3), "replicas": int64(2)}, 3, Fence{0, 5}, ""},
		{"six shards of three: the fence per shard", "c", map[string]interface{}{"shards": float64(6), "replicas": int64(3)}, 6, Fence{1, 5}, ""},
		{"the most", "c", map[string]interface{}{"shards": int64(MaxShards)}, MaxShards, Fence{0, 5}, ""},
		{"two shards", "c", map[string]interface{}{"shards": int64(2)}, 0, Fence{}, "spec.shards: must be an integer between 3 and 32"},
		{"zero", "c", map[string]interface{}{"shards": int64(0)}, 0, Fence{}, "spec.shards"},
		{"too many", "c", map[string]interface{}{"shards": int64(MaxShards + 1)}, 0, Fence{}, "spec.shards"},
		{"not a number", "c", map[string]interface{}{"shards": "3"}, 0, Fence{}, "spec.shards"},
		{"a long name, not sharded", long, map[string]interface{}{}, 0, Fence{0, 5}, ""},
		{"a long name, sharded", long, map[string]interface{}{"shards": int64(3)}, 0, Fence{}, "metadata.name: a sharded cache's name may be at most 48"},
	} {
		spec := map[string]interface{}{"engine": map[string]interface{}{"version": "7.2"}}
		for k, v := range tc.spec {
			spec[k] = v
		}
		mc := &unstructured.Unstructured{Object: map[string]interface{}{"metadata": map[string]interface{}{"name": tc.cache}, "spec": spec}}
		s, err := SpecFrom(mc)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v; want one containing %q", tc.name, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.err == "" && (s.Shards != tc.shards || s.Sharded() != (tc.shards > 0) || s.Fence != tc.fence):
			t.Errorf("%s: shards %d (sharded %v), fence %+v; want %d, %+v", tc.name, s.Shards, s.Sharded(), s.Fence, tc.shards, tc.fence)
		}
	}
}

// The CRD's rules refuse what the operator does not serve for a sharded cache with the same words
// as the operator.
func TestCRDRefusesShardsWithTheSameWords(t *testing.T) {
	for _, msg := range []string{ShardedRestorePathNotServed, ShardedTLSChange} {
		if want := `message: "` + msg + `"`; !strings.Contains(string(crd.ManagedCaches), want) {
			t.Errorf("the CRD has no rule with %s", want)
		}
	}
}

// What a sharded cache cannot have yet is named, every one, and refused by SpecFrom; a
// primary/replica cache has it all.
func TestShardedNotServed(t *testing.T) {
	spec := map[string]interface{}{"engine": map[string]interface{}{"version": "7.2"}, "shards": int64(3), "hibernate": true,
		"tls": map[string]interface{}{"enabled": true}, "backup": map[string]interface{}{"store": map[string]interface{}{"secretName": "s3"}},
		"restore": map[string]interface{}{"path": "ns/c/b1.rdb", "store": map[string]interface{}{"secretName": "s3"}}}
	mc := &unstructured.Unstructured{Object: map[string]interface{}{"metadata": map[string]interface{}{"name": "c"}, "spec": spec}}
	want := ShardedRestorePathNotServed
	if _, err := SpecFrom(mc); err == nil || err.Error() != want {
		t.Errorf("SpecFrom: %v; want %q", err, want)
	}
	delete(spec, "shards")
	if s, err := SpecFrom(mc); err != nil || s.ShardedNotServed() != "" {
		t.Errorf("the same spec without shards: %v, %q; want served", err, s.ShardedNotServed())
	}
}

// A sharded cache's member names: <name>-s<shard>-<ordinal>, and nothing else, even where the
// cache's own name looks like one.
func TestShardMemberOf(t *testing.T) {
	for _, tc := range []struct {
		cache, pod     string
		shard, ordinal int
		ok             bool
	}{
		{"shop", "shop-s0-0", 0, 0, true},
		{"shop", "shop-s12-3", 12, 3, true},
		{"shop", ShardSetName("shop", 31) + "-8", 31, 8, true},
		{"a-s1", "a-s1-s2-0", 2, 0, true},
		{"shop", "shop-0", 0, 0, false},
		{"shop", "shop-s1", 0, 0, false},
		{"shop", "shop-s1-", 0, 0, false},
		{"shop", "shop-s01-0", 0, 0, false},
		{"shop", "shop-sx-0", 0, 0, false},
		{"shop", "shop-s1-0-1", 0, 0, false},
		{"shop", "shopx-s1-0", 0, 0, false},
		{"shop", "shop-s1-+1", 0, 0, false},
	} {
		s, o, ok := ShardMemberOf(tc.cache, tc.pod)
		if ok != tc.ok || ok && (s != tc.shard || o != tc.ordinal) {
			t.Errorf("ShardMemberOf(%q, %q) = %d, %d, %v; want %d, %d, %v", tc.cache, tc.pod, s, o, ok, tc.shard, tc.ordinal, tc.ok)
		}
	}
}
