package storage

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/informers"
)

// The volumes belong to the cache. The StatefulSet keeps its claims whatever happens to it or its
// pods (persistentVolumeClaimRetentionPolicy Retain, templates/statefulset.yaml), and each claim
// carries an owner reference to the ManagedCache, which the operator adds as soon as it sees the
// claim: the garbage collector deletes the claims with the cache, and never because a StatefulSet
// or a pod was deleted (a dependent goes only when none of its owners is left). A claim made by an
// older operator, owned by the StatefulSet, keeps that reference until the StatefulSet controller
// drops it under the Retain policy; meanwhile the cache's reference alone keeps the claim through
// any deletion of the StatefulSet.
//
// The cache's reference is not a controller reference: the StatefulSet controller made the claim,
// and the API server allows one controller per object.

// ClaimOwnerReference is the owner reference a claim of mc carries.
func ClaimOwnerReference(mc *unstructured.Unstructured) metav1.OwnerReference {
	ref := api.OwnerReference(mc)
	ref.Controller = nil
	ref.BlockOwnerDeletion = ptr.To(true)
	return ref
}

// ownsClaim reports whether claim carries an owner reference to the cache with uid.
func ownsClaim(claim *informers.Claim, uid types.UID) bool {
	for _, ref := range claim.OwnerReferences {
		if ref.UID == uid {
			return true
		}
	}
	return false
}

// ClaimsToOwn returns the bound claims of the cache mc (from the claim informer) that lack its
// owner reference, the ones being deleted left out. A claim not yet bound holds no data, and its
// provisioner and the volume binder are writing it: it is owned once bound, so that no write
// races theirs. A cache whose claims all carry the reference needs no request.
func ClaimsToOwn(mc *unstructured.Unstructured, claims []*informers.Claim) []*informers.Claim {
	var out []*informers.Claim
	for _, c := range claims {
		if c.Bound && c.DeletionTimestamp == nil && !ownsClaim(c, mc.GetUID()) {
			out = append(out, c)
		}
	}
	return out
}

// OwnClaim adds mc's owner reference to a claim, with a strategic merge patch (owner references
// merge by UID: the StatefulSet's, if any, stays) that fails if the claim was made anew meanwhile
// (its UID).
func (r *Resizer) OwnClaim(ctx context.Context, mc *unstructured.Unstructured, claim *informers.Claim) error {
	patch, err := json.Marshal(map[string]interface{}{"metadata": map[string]interface{}{
		"uid":             claim.UID,
		"ownerReferences": []metav1.OwnerReference{ClaimOwnerReference(mc)},
	}})
	if err != nil {
		return err
	}
	_, err = r.Client.Resource(pvcResource).Namespace(claim.Namespace).Patch(ctx, claim.Name, types.StrategicMergePatchType, patch,
		metav1.PatchOptions{FieldManager: api.FieldManager})
	if err != nil {
		return fmt.Errorf("PersistentVolumeClaim/%s/%s: adding the ManagedCache's owner reference: %w", claim.Namespace, claim.Name, err)
	}
	return nil
}

// ClaimsToCreate returns the claims that the StatefulSet sts (as the operator wants it) will use
// and that do not exist yet (claims: the cache's, from the claim informer), made from its volume
// claim templates as the StatefulSet controller would make them (name <template>-<set>-<ordinal>,
// the template's labels and the set's selector labels), and owned by the cache from their first
// moment.
//
// The operator makes them before the StatefulSet asks for its pods: the StatefulSet controller
// uses a claim that exists as it is. Left to the StatefulSet controller, the claim is created just
// before its pod, and the scheduler, whose informer may not have the claim yet, reports the pod
// FailedScheduling (a Warning Event on a healthy new cache); the owner reference added later is
// then a write that races the StatefulSet controller's own updates of the claim.
func ClaimsToCreate(mc, sts *unstructured.Unstructured, claims []*informers.Claim) []*unstructured.Unstructured {
	replicas, _, _ := unstructured.NestedInt64(sts.Object, "spec", "replicas")
	templates, _, _ := unstructured.NestedSlice(sts.Object, "spec", "volumeClaimTemplates")
	selector, _, _ := unstructured.NestedStringMap(sts.Object, "spec", "selector", "matchLabels")
	have := make(map[string]bool, len(claims))
	for _, c := range claims {
		have[c.Name] = true
	}
	var out []*unstructured.Unstructured
	for _, t := range templates {
		tm, ok := t.(map[string]interface{})
		if !ok {
			continue
		}
		tmpl := &unstructured.Unstructured{Object: tm}
		for i := int64(0); i < replicas; i++ {
			name := fmt.Sprintf("%s-%s-%d", tmpl.GetName(), sts.GetName(), i)
			if have[name] {
				continue
			}
			claim := &unstructured.Unstructured{Object: map[string]interface{}{}}
			spec, _, _ := unstructured.NestedMap(tm, "spec")
			claim.Object["spec"] = spec
			claim.SetAPIVersion("v1")
			claim.SetKind("PersistentVolumeClaim")
			claim.SetName(name)
			claim.SetNamespace(sts.GetNamespace())
			labels := tmpl.GetLabels()
			if labels == nil {
				labels = map[string]string{}
			}
			for k, v := range selector {
				labels[k] = v
			}
			claim.SetLabels(labels)
			claim.SetOwnerReferences([]metav1.OwnerReference{ClaimOwnerReference(mc)})
			out = append(out, claim)
		}
	}
	return out
}

// CreateClaim creates a claim from ClaimsToCreate. One that exists already (made meanwhile by the
// StatefulSet controller, or by this operator before its informer saw it) is no error.
func (r *Resizer) CreateClaim(ctx context.Context, claim *unstructured.Unstructured) error {
	_, err := r.Client.Resource(pvcResource).Namespace(claim.GetNamespace()).Create(ctx, claim, metav1.CreateOptions{FieldManager: api.FieldManager})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("PersistentVolumeClaim/%s/%s: creating it before its pod: %w", claim.GetNamespace(), claim.GetName(), err)
	}
	return nil
}
