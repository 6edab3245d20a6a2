package controller

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/ssa"
)

// ownership says how a live child relates to the cache that wants it.
type ownership int

const (
	ownedByCache  ownership = iota // controlled by this cache
	orphanOfCache                  // no controller, but carries this cache's labels: adopt it
	ownedByOther                   // controlled by something else, or foreign: leave it alone
)

// ownershipOf decides whether the cache with uid may manage live.
func ownershipOf(live *unstructured.Unstructured, cacheName string, uid types.UID) (ownership, string) {
	ref := metav1.GetControllerOfNoCopy(live)
	if ref != nil {
		if ref.UID == uid {
			return ownedByCache, ""
		}
		return ownedByOther, fmt.Sprintf("%s exists and is controlled by %s %s", ssa.ObjectID(live), ref.Kind, ref.Name)
	}
	l := live.GetLabels()
	if l[api.LabelManagedBy] == api.ManagedByValue && l[api.LabelInstance] == cacheName {
		return orphanOfCache, ""
	}
	return ownedByOther, fmt.Sprintf("%s exists and is not managed by this ManagedCache (no controller reference, no %s=%s label)",
		ssa.ObjectID(live), api.LabelManagedBy, api.ManagedByValue)
}
