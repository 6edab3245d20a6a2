package engine

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// The ManagedCache API.
var (
	// GroupVersion is the API version the operator reads and writes: v2, the hub.
	GroupVersion = schema.GroupVersion{Group: "cache.example.com", Version: "v2"}
	// OwnerAPIVersion is the apiVersion of the children's owner references. It stays v1 (the
	// storage version) so that children made before v2 existed do not drift; the garbage
	// collector resolves owners in any served version.
	OwnerAPIVersion = "cache.example.com/v1"
	// Kind is the ManagedCache kind.
	Kind = "ManagedCache"
	// Resource is the ManagedCache resource, in the hub version.
	Resource = GroupVersion.WithResource("managedcaches")
)

// Finalizer is set on every ManagedCache before any child is created.
const Finalizer = "cache.example.com/finalizer"

// ownerReference returns the controller reference a child of mc carries.
func ownerReference(mc *unstructured.Unstructured) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion:         OwnerAPIVersion,
		Kind:               Kind,
		Name:               mc.GetName(),
		UID:                mc.GetUID(),
		Controller:         ptr.To(true),
		BlockOwnerDeletion: ptr.To(true),
	}
}

// isManagedCacheRef reports whether ref points at a ManagedCache (any version of the group).
func isManagedCacheRef(ref *metav1.OwnerReference) bool {
	if ref == nil || ref.Kind != Kind {
		return false
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	return err == nil && gv.Group == GroupVersion.Group
}

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
		return ownedByOther, fmt.Sprintf("%s/%s/%s exists and is controlled by %s %s",
			live.GetKind(), live.GetNamespace(), live.GetName(), ref.Kind, ref.Name)
	}
	l := live.GetLabels()
	if l[LabelManagedBy] == ManagedByValue && l[LabelInstance] == cacheName {
		return orphanOfCache, ""
	}
	return ownedByOther, fmt.Sprintf("%s/%s/%s exists and is not managed by this ManagedCache (no controller reference, no %s=%s label)",
		live.GetKind(), live.GetNamespace(), live.GetName(), LabelManagedBy, ManagedByValue)
}

// objectID names an object in errors and logs: Kind/namespace/name.
func objectID(obj *unstructured.Unstructured) string {
	return fmt.Sprintf("%s/%s/%s", obj.GetKind(), obj.GetNamespace(), obj.GetName())
}
