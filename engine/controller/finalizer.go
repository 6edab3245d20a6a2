package controller

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/ssa"
)

// The finalizer holds a deletion only while the controller has work to do first: a CleanupFunc
// (state outside the cluster), or a cache whose backups are deleted with it (spec.backup.onDelete:
// Delete). The children need none: they carry owner references, and the
// garbage collector removes them. A controller without cleanups never adds the finalizer and
// removes it where an older version added it, so that deleting a cache or its namespace never
// waits for the operator.

// finalizerIndex returns the index of the operator's finalizer in mc's finalizers, or -1.
func finalizerIndex(mc *unstructured.Unstructured) int {
	for i, f := range mc.GetFinalizers() {
		if f == api.Finalizer {
			return i
		}
	}
	return -1
}

// syncFinalizer adds the finalizer when the controller has cleanups and mc lacks it, and removes
// it when there are none and mc has it. It writes with a JSON patch that touches the finalizer
// alone (and fails if the list changed meanwhile), never with a full-object update. It returns
// mc as it now is.
func (c *Controller) syncFinalizer(ctx context.Context, mc *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	i := finalizerIndex(mc)
	switch want := len(c.cleanups) > 0 || (c.backups != nil && c.backups.WantsFinalizer(mc)); {
	case want && i < 0:
		return c.patchFinalizers(ctx, mc, "adding finalizer", addFinalizerPatch(mc))
	case !want && i >= 0:
		return c.patchFinalizers(ctx, mc, "removing finalizer", removeFinalizerPatch(i))
	}
	return mc, nil
}

type jsonPatchOp struct {
	Op    string      `json:"op"`
	Path  string      `json:"path"`
	Value interface{} `json:"value,omitempty"`
}

// addFinalizerPatch appends the finalizer; on an empty list it creates the list, guarded by the
// resourceVersion (a JSON patch cannot test that a field is absent).
func addFinalizerPatch(mc *unstructured.Unstructured) []jsonPatchOp {
	if n := len(mc.GetFinalizers()); n > 0 {
		return []jsonPatchOp{
			{Op: "test", Path: fmt.Sprintf("/metadata/finalizers/%d", n-1), Value: mc.GetFinalizers()[n-1]},
			{Op: "add", Path: "/metadata/finalizers/-", Value: api.Finalizer},
		}
	}
	return []jsonPatchOp{
		{Op: "test", Path: "/metadata/resourceVersion", Value: mc.GetResourceVersion()},
		{Op: "add", Path: "/metadata/finalizers", Value: []string{api.Finalizer}},
	}
}

// removeFinalizerPatch removes the finalizer at index i, if it is still there.
func removeFinalizerPatch(i int) []jsonPatchOp {
	p := fmt.Sprintf("/metadata/finalizers/%d", i)
	return []jsonPatchOp{{Op: "test", Path: p, Value: api.Finalizer}, {Op: "remove", Path: p}}
}

func (c *Controller) patchFinalizers(ctx context.Context, mc *unstructured.Unstructured, what string, ops []jsonPatchOp) (*unstructured.Unstructured, error) {
	patch, err := json.Marshal(ops)
	if err != nil {
		return nil, err
	}
	out, err := c.client.Resource(api.Resource).Namespace(mc.GetNamespace()).
		Patch(ctx, mc.GetName(), types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: api.FieldManager})
	if err != nil {
		return nil, ssa.Errorf(mc, "%s: %w", what, err)
	}
	klog.FromContext(ctx).Info("Finalizer", "action", what)
	return out, nil
}

// finalize runs every cleanup of state outside the cluster, then removes the finalizer. The
// children are left to the garbage collector (they carry owner references).
func (c *Controller) finalize(ctx context.Context, mc *unstructured.Unstructured) error {
	i := finalizerIndex(mc)
	if i < 0 {
		return nil
	}
	// The cleanup deletes state outside the cluster: read the cache live first, so that a cache
	// someone released meanwhile (the escape hatch: finalizers emptied) keeps its objects, even
	// when the informer has not seen it go yet.
	live, err := c.client.Resource(api.Resource).Namespace(mc.GetNamespace()).Get(ctx, mc.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) || (err == nil && (live.GetUID() != mc.GetUID() || finalizerIndex(live) < 0)) {
		klog.FromContext(ctx).Info("The cache was released meanwhile; its cleanup is skipped")
		return nil
	}
	if err != nil {
		return ssa.Errorf(mc, "reading the cache before its cleanup: %w", err)
	}
	mc, i = live, finalizerIndex(live)
	for _, cleanup := range c.cleanups {
		if err := cleanup(ctx, mc); err != nil {
			return ssa.Errorf(mc, "cleanup before deletion: %w", err)
		}
	}
	if err := c.cleanupBackups(ctx, mc); err != nil {
		return ssa.Errorf(mc, "cleanup before deletion: %w", err)
	}
	_, err = c.patchFinalizers(ctx, mc, "removing finalizer", removeFinalizerPatch(i))
	return err
}
