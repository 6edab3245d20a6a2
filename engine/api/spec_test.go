package api

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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
