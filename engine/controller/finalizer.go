package controller

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2"

	"example.com/cache-operator/engine/api"
)

func hasFinalizer(mc *unstructured.Unstructured) bool {
	for _, f := range mc.GetFinalizers() {
		if f == api.Finalizer {
			return true
		}
	}
	return false
}

// addFinalizer adds the finalizer before any child exists, so a deletion always passes through
// finalize. It returns the updated object.
func (c *Controller) addFinalizer(ctx context.Context, mc *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	mc.SetFinalizers(append(mc.GetFinalizers(), api.Finalizer))
	out, err := c.client.Resource(api.Resource).Namespace(mc.GetNamespace()).Update(ctx, mc, metav1.UpdateOptions{FieldManager: api.FieldManager})
	if err != nil {
		return nil, fmt.Errorf("ManagedCache/%s/%s: adding finalizer: %w", mc.GetNamespace(), mc.GetName(), err)
	}
	klog.FromContext(ctx).Info("Added finalizer")
	return out, nil
}

// finalize runs every cleanup of state outside the cluster, then removes the finalizer. The
// children are left to the garbage collector (they carry owner references).
func (c *Controller) finalize(ctx context.Context, mc *unstructured.Unstructured) error {
	if !hasFinalizer(mc) {
		return nil
	}
	for _, cleanup := range c.cleanups {
		if err := cleanup(ctx, mc); err != nil {
			return fmt.Errorf("ManagedCache/%s/%s: cleanup before deletion: %w", mc.GetNamespace(), mc.GetName(), err)
		}
	}
	var kept []string
	for _, f := range mc.GetFinalizers() {
		if f != api.Finalizer {
			kept = append(kept, f)
		}
	}
	mc.SetFinalizers(kept)
	_, err := c.client.Resource(api.Resource).Namespace(mc.GetNamespace()).Update(ctx, mc, metav1.UpdateOptions{FieldManager: api.FieldManager})
	if err != nil {
		return fmt.Errorf("ManagedCache/%s/%s: removing finalizer: %w", mc.GetNamespace(), mc.GetName(), err)
	}
	klog.FromContext(ctx).Info("Removed finalizer; children are left to garbage collection")
	return nil
}
