package controller

import (
	"context"
	"encoding/json"
	"errors"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/informers"
	"example.com/cache-operator/engine/roles"
	"example.com/cache-operator/engine/ssa"
	"example.com/cache-operator/engine/status"
	"example.com/cache-operator/engine/storage"
)

// What the StatefulSet needs before it is applied, beyond its template: its volumes grown
// (package storage), its update strategy changed, a scale-down held for the primary's handover.

// prepareStorage grows the cache's volumes for the StatefulSet want (storage.Resizer.Prepare),
// and comes back while they grow.
func (c *Controller) prepareStorage(ctx context.Context, mc, want *unstructured.Unstructured) (storage.Outcome, error) {
	live, err := c.child(informers.StatefulSet, want.GetNamespace(), want.GetName())
	if err != nil {
		return storage.Outcome{}, err
	}
	r := storage.Resizer{Client: c.client, Recorder: c.recorder}
	out, err := r.Prepare(ctx, mc, want, live, status.Condition(mc, api.ConditionStorageResizing))
	if err == nil && out.RequeueAfter > 0 {
		c.queue.AddAfter(mc.GetNamespace()+"/"+mc.GetName(), out.RequeueAfter)
	}
	return out, err
}

// createClaims makes the claims the StatefulSet want will use that do not exist yet, owned by the
// cache (storage.ClaimsToCreate says why); none when they all exist (an informer lookup).
func (c *Controller) createClaims(ctx context.Context, mc, want *unstructured.Unstructured) error {
	todo := storage.ClaimsToCreate(mc, want, c.informers.CacheClaims(mc.GetNamespace(), mc.GetName()))
	r := storage.Resizer{Client: c.client, Recorder: c.recorder}
	var errs error
	for _, claim := range todo {
		if err := r.CreateClaim(ctx, claim); err != nil {
			if apierrors.IsForbidden(err) {
				// An operator whose RBAC predates this (no create on claims): the StatefulSet
				// controller makes them, as it always did, and ownClaims owns them once bound.
				klog.FromContext(ctx).Info("May not create volume claims; the StatefulSet controller will", "claim", claim.GetName())
				return nil
			}
			errs = errors.Join(errs, err)
			continue
		}
		klog.FromContext(ctx).V(2).Info("Volume claim created before its pod", "claim", claim.GetName())
	}
	return errs
}

// prepareUpdateStrategy changes the type of a live StatefulSet's update strategy when want has
// another, with a JSON patch that replaces the whole strategy. An apply cannot do it: the API
// server filled in rollingUpdate when the type was RollingUpdate, and rollingUpdate is invalid
// with any other type, so an apply of type OnDelete alone is refused (StatefulSets made before
// members had roles roll with RollingUpdate; the operator now rolls them itself, OnDelete).
func (c *Controller) prepareUpdateStrategy(ctx context.Context, want *unstructured.Unstructured) error {
	live, err := c.child(informers.StatefulSet, want.GetNamespace(), want.GetName())
	if err != nil || live == nil {
		return err
	}
	wantType, _, _ := unstructured.NestedString(want.Object, "spec", "updateStrategy", "type")
	liveType, _, _ := unstructured.NestedString(live.Object, "spec", "updateStrategy", "type")
	if wantType == "" || wantType == liveType {
		return nil
	}
	strategy, _, _ := unstructured.NestedMap(want.Object, "spec", "updateStrategy")
	patch, err := json.Marshal([]map[string]interface{}{
		{"op": "test", "path": "/metadata/uid", "value": live.GetUID()},
		{"op": "replace", "path": "/spec/updateStrategy", "value": strategy},
	})
	if err != nil {
		return err
	}
	_, err = c.client.Resource(informers.StatefulSets).Namespace(live.GetNamespace()).Patch(ctx, live.GetName(), types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: api.FieldManager})
	if err != nil {
		return ssa.Errorf(want, "changing the update strategy from %s to %s: %w", liveType, wantType, err)
	}
	klog.FromContext(ctx).Info("Changed the StatefulSet's update strategy", "from", liveType, "to", wantType)
	return nil
}

// holdScaleDown keeps a StatefulSet at the primary's ordinal + 1 while a scale-down would remove the
// primary: the member pass hands the role to a member that stays, and then the scale-down lands.
func holdScaleDown(sts *unstructured.Unstructured, replicas int64, cacheName, primary string) {
	if ord, ok := roles.OrdinalOf(cacheName, primary); ok && int64(ord) >= replicas {
		_ = unstructured.SetNestedField(sts.Object, int64(ord)+1, "spec", "replicas")
	}
}
