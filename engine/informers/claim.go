package informers

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Claims is the resource of the members' PersistentVolumeClaims.
var Claims = schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumeclaims"}

// Claim is a member's PersistentVolumeClaim as the claim informer holds it: its metadata alone
// (name, namespace, UID, resourceVersion, deletion timestamp, the instance label, the owner
// references), which is all the operator reads of a claim.
type Claim struct {
	metav1.ObjectMeta
	// Bound: the claim is bound to a volume (status.phase Bound).
	Bound bool
}

// claimTransform is the claim informer's transform: the metadata the operator reads.
func claimTransform(obj interface{}) (interface{}, error) {
	o, ok := obj.(metav1.Object)
	if !ok {
		return obj, nil
	}
	if _, done := obj.(*Claim); done {
		return obj, nil
	}
	c := &Claim{ObjectMeta: metav1.ObjectMeta{
		Name: o.GetName(), Namespace: o.GetNamespace(), UID: o.GetUID(), ResourceVersion: o.GetResourceVersion(),
		DeletionTimestamp: o.GetDeletionTimestamp(), OwnerReferences: o.GetOwnerReferences(),
		Labels: keepLabels(o.GetLabels(), podLabels...),
	}}
	switch pvc := obj.(type) {
	case *corev1.PersistentVolumeClaim:
		c.Bound = pvc.Status.Phase == corev1.ClaimBound
	case *unstructured.Unstructured:
		phase, _, _ := unstructured.NestedString(pvc.Object, "status", "phase")
		c.Bound = phase == string(corev1.ClaimBound)
	}
	return c, nil
}

// CacheClaims returns the claims of the cache namespace/name (those with its instance label). Each
// is the informer's own copy: read it, never change it.
func (s *Set) CacheClaims(namespace, name string) []*Claim {
	objs, err := s.Claims.GetIndexer().ByIndex(InstanceIndex, namespace+"/"+name)
	if err != nil {
		return nil
	}
	out := make([]*Claim, 0, len(objs))
	for _, o := range objs {
		if c, ok := o.(*Claim); ok {
			out = append(out, c)
		}
	}
	return out
}
