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

// The claims a StatefulSet will use and that do not exist are made as its controller would make
// them, owned by the cache; existing ones (any state) and ordinals past replicas are left alone.
func TestClaimsToCreate(t *testing.T) {
	mc := &unstructured.Unstructured{}
	mc.SetName("c")
	mc.SetUID("cache-uid")
	sts := &unstructured.Unstructured{Object: map[string]interface{}{
		"metadata": map[string]interface{}{"name": "c", "namespace": "ns"},
		"spec": map[string]interface{}{
			"replicas": int64(3),
			"selector": map[string]interface{}{"matchLabels": map[string]interface{}{"app.kubernetes.io/instance": "c"}},
			"volumeClaimTemplates": []interface{}{map[string]interface{}{
				"metadata": map[string]interface{}{"name": "data", "labels": map[string]interface{}{"app.kubernetes.io/name": "managedcache"}},
				"spec": map[string]interface{}{"accessModes": []interface{}{"ReadWriteOnce"},
					"resources": map[string]interface{}{"requests": map[string]interface{}{"storage": "2Gi"}}},
			}},
		},
	}}
	got := ClaimsToCreate(mc, sts, []*informers.Claim{
		{ObjectMeta: metav1.ObjectMeta{Name: "data-c-1"}},     // exists, not bound
		{ObjectMeta: metav1.ObjectMeta{Name: "data-c-7"}},     // past replicas: not ours to judge
		{ObjectMeta: metav1.ObjectMeta{Name: "data-other-0"}}, // another set's
	})
	if len(got) != 2 || got[0].GetName() != "data-c-0" || got[1].GetName() != "data-c-2" {
		var names []string
		for _, c := range got {
			names = append(names, c.GetName())
		}
		t.Fatalf("ClaimsToCreate = %v; want [data-c-0 data-c-2]", names)
	}
	c := got[0]
	if c.GetNamespace() != "ns" || c.GetKind() != "PersistentVolumeClaim" {
		t.Errorf("claim %s/%s of kind %s", c.GetNamespace(), c.GetName(), c.GetKind())
	}
	if l := c.GetLabels(); l["app.kubernetes.io/instance"] != "c" || l["app.kubernetes.io/name"] != "managedcache" {
		t.Errorf("labels %v: want the template's and the selector's", l)
	}
	if size, _, _ := unstructured.NestedString(c.Object, "spec", "resources", "requests", "storage"); size != "2Gi" {
		t.Errorf("size %q; want the template's 2Gi", size)
	}
	refs := c.GetOwnerReferences()
	if len(refs) != 1 || refs[0].UID != "cache-uid" || (refs[0].Controller != nil && *refs[0].Controller) {
		t.Errorf("owner references %+v; want the cache's, not a controller", refs)
	}
	// The template itself is not changed by the claims made from it.
	tmpls, _, _ := unstructured.NestedSlice(sts.Object, "spec", "volumeClaimTemplates")
	if l := tmpls[0].(map[string]interface{})["metadata"].(map[string]interface{})["labels"].(map[string]interface{}); len(l) != 1 {
		t.Errorf("the template's labels changed: %v", l)
	}
	sts.Object["spec"].(map[string]interface{})["replicas"] = int64(0)
	if got := ClaimsToCreate(mc, sts, nil); len(got) != 0 {
		t.Errorf("a hibernating set (0 replicas) wants %d claims made", len(got))
	}
}
