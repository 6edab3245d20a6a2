package conversion

import (
	"reflect"
	"testing"
)

// spec.backup and spec.restore, which v1 cannot express, travel through v1 in the v2-spec annotation.
func TestBackupAndRestoreTravelThroughV1(t *testing.T) {
	v2 := map[string]interface{}{"apiVersion": "cache.example.com/v2", "kind": "ManagedCache",
		"metadata": map[string]interface{}{"name": "a", "namespace": "b"},
		"spec": map[string]interface{}{"replicas": int64(3), "engine": map[string]interface{}{"name": "redis", "version": "7.0"},
			"backup":  map[string]interface{}{"store": map[string]interface{}{"secretName": "s"}, "schedule": "@daily", "keep": int64(3), "onDelete": "Delete"},
			"restore": map[string]interface{}{"backup": "x"}}}
	v1, err := Convert(v2, V1)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Convert(v1, V2)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back["spec"].(map[string]interface{})["backup"], v2["spec"].(map[string]interface{})["backup"]) {
		t.Fatalf("lost: %v", back["spec"])
	}
	if _, ok := v1["spec"].(map[string]interface{})["backup"]; ok {
		t.Error("v1 has a spec.backup")
	}
}
