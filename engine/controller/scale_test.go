package controller

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestHoldScaleDown(t *testing.T) {
	for _, tc := range []struct {
		primary  string
		replicas int64
		want     int64
	}{
		{"c-2", 2, 3}, {"c-4", 2, 5}, {"c-1", 2, 2}, {"", 2, 2}, {"other-9", 2, 2},
	} {
		sts := &unstructured.Unstructured{Object: map[string]interface{}{"spec": map[string]interface{}{"replicas": tc.replicas}}}
		holdScaleDown(sts, tc.replicas, "c", tc.primary)
		if got, _, _ := unstructured.NestedInt64(sts.Object, "spec", "replicas"); got != tc.want {
			t.Errorf("primary %q, %d wanted: StatefulSet replicas %d; want %d", tc.primary, tc.replicas, got, tc.want)
		}
	}
}
