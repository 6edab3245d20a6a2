package webhook

import (
	"context"
	"testing"

	"example.com/cache-operator/engine/admission"
	"example.com/cache-operator/engine/api"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
)

// The /scale rule's quorum override is read from the API server at the moment of the request: an
// annotation added just before `kubectl scale` counts. (It used to come from the informer cache,
// which may not have seen the annotation yet.)
func TestScaleOverrideIsReadLive(t *testing.T) {
	mc := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": api.GroupVersion.String(), "kind": api.Kind,
		"metadata": map[string]interface{}{"name": "sessions", "namespace": "shop"},
	}}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{api.Resource: "ManagedCacheList"}, mc)
	lookup := liveAnnotations(client)
	ctx := context.Background()
	if a, err := lookup(ctx, "shop", "sessions"); err != nil || a[admission.AllowQuorumLossAnnotation] != "" {
		t.Fatalf("before: %v %v", a, err)
	}
	mc = mc.DeepCopy()
	mc.SetAnnotations(map[string]string{admission.AllowQuorumLossAnnotation: "true"})
	if _, err := client.Resource(api.Resource).Namespace("shop").Update(ctx, mc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if a, err := lookup(ctx, "shop", "sessions"); err != nil || a[admission.AllowQuorumLossAnnotation] != "true" {
		t.Errorf("right after the annotation was added: %v %v; want it seen", a, err)
	}
	if _, err := lookup(ctx, "shop", "gone"); err == nil {
		t.Error("a cache that does not exist: no error")
	}
}
