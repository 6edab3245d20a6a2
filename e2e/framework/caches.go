package framework

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ManagedCachesV2 is the ManagedCache resource at v2.
var ManagedCachesV2 = schema.GroupVersionResource{Group: "cache.example.com", Version: "v2", Resource: "managedcaches"}

// WaitCacheReady waits for the cache's Ready condition with readyReplicas = want.
func (c *Cluster) WaitCacheReady(t testing.TB, ns, name string, want int64, timeout time.Duration) {
	t.Helper()
	Eventually(t, timeout, fmt.Sprintf("ManagedCache %s/%s Ready with %d members", ns, name, want), func() (bool, string, error) {
		mc, err := c.Dynamic.Resource(ManagedCachesV2).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		ready, _, _ := unstructured.NestedInt64(mc.Object, "status", "readyReplicas")
		conds, _, _ := unstructured.NestedSlice(mc.Object, "status", "conditions")
		for _, cond := range conds {
			if m, ok := cond.(map[string]interface{}); ok && m["type"] == "Ready" {
				return m["status"] == "True" && ready == want, fmt.Sprintf("Ready=%v (%v: %v), readyReplicas %d", m["status"], m["reason"], m["message"], ready), nil
			}
		}
		return false, "no Ready condition", nil
	})
}
