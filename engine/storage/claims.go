package storage

import (
	"context"
	"encoding/json"
	"fmt"

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
