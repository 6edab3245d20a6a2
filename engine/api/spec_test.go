package api

import (
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
		spec := map[string]interface{}{"engine": map[string]interface{}{"version": "7.4"}}
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
