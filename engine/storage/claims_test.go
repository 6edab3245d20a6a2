package storage

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"example.com/cache-operator/engine/informers"
)

// Only the bound claims that lack the cache's owner reference, and are not going, need a request; the
// reference is not a controller (the StatefulSet controller's may be there).
func TestClaimsToOwn(t *testing.T) {
	mc := &unstructured.Unstructured{}
	mc.SetName("c")
	mc.SetUID("cache-uid")
	now := metav1.Now()
	claim := func(name string, deleting bool, owners ...types.UID) *informers.Claim {
		cl := &informers.Claim{ObjectMeta: metav1.ObjectMeta{Name: name}, Bound: true}
		for _, uid := range owners {
			cl.OwnerReferences = append(cl.OwnerReferences, metav1.OwnerReference{UID: uid})
		}
		if deleting {
			cl.DeletionTimestamp = &now
		}
		return cl
	}
	got := ClaimsToOwn(mc, []*informers.Claim{
		claim("data-c-0", false, "cache-uid"),
		claim("data-c-1", false, "sts-uid"),
		claim("data-c-2", false),
		claim("data-c-3", true),
		claim("data-c-4", false, "sts-uid", "cache-uid"),
		{ObjectMeta: metav1.ObjectMeta{Name: "data-c-5"}}, // not yet bound
	})
	var names []string
	for _, c := range got {
		names = append(names, c.Name)
	}
	if len(names) != 2 || names[0] != "data-c-1" || names[1] != "data-c-2" {
		t.Errorf("ClaimsToOwn = %v; want [data-c-1 data-c-2]", names)
	}
	ref := ClaimOwnerReference(mc)
	if ref.Controller != nil || ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion || ref.UID != "cache-uid" || ref.Kind != "ManagedCache" {
		t.Errorf("ClaimOwnerReference = %+v; want a non-controller reference to the cache that blocks its deletion", ref)
	}
}
