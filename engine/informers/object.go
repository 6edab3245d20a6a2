package informers

import (
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"example.com/cache-operator/engine/api"
)

// Object is a child or a ManagedCache as an informer holds it: the metadata that keys it and
// routes its events, and the whole object packed (with only the managedFields entry kept).
type Object struct {
	metav1.ObjectMeta
	packed []byte
	// Ready is a ManagedCache's Ready condition status, for the fleet gauge ("" for a child), or
	// Hibernated for a cache whose members are stopped on purpose (spec.hibernate).
	Ready string
	// UpdateRevision is a StatefulSet's status.updateRevision, which every member pass reads.
	UpdateRevision string
	// Version is a child's version digest (Version).
	Version uint64
}

// packTransform returns the transform of an informer of kind gvk: managedFields dropped but
// manager's own ("": all), then packed. routing is the metadata the object keeps unpacked. The
// informer may hold unstructured objects (dynamic informers) or typed ones (built-in kinds, read
// as protobuf); both are packed as the JSON the API server would send.
func (p *Packer) packTransform(gvk schema.GroupVersionKind, manager string, routing func(obj metav1.Object) Object) cache.TransformFunc {
	return func(obj interface{}) (interface{}, error) {
		if _, done := obj.(*Object); done {
			return obj, nil
		}
		o, ok := obj.(metav1.Object)
		ro, isObject := obj.(runtime.Object)
		if !ok || !isObject {
			return obj, nil
		}
		keepManagedFields(o, manager)
		out := routing(o)
		var raw []byte
		var err error
		if u, ok := obj.(*unstructured.Unstructured); ok {
			raw, err = u.MarshalJSON()
		} else {
			// Typed objects from an informer carry no kind; the drift check reads it.
			ro.GetObjectKind().SetGroupVersionKind(gvk)
			raw, err = json.Marshal(ro)
		}
		if err != nil {
			return nil, err
		}
		out.packed = p.pack(raw)
		return &out, nil
	}
}

// routingMeta is the metadata a packed ManagedCache keeps unpacked: what the controller compares on an update.
func routingMeta(o metav1.Object) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: o.GetName(), Namespace: o.GetNamespace(), UID: o.GetUID(), ResourceVersion: o.GetResourceVersion(),
		Generation: o.GetGeneration(), Labels: o.GetLabels(), Annotations: o.GetAnnotations(),
		OwnerReferences: o.GetOwnerReferences(), Finalizers: o.GetFinalizers(), DeletionTimestamp: o.GetDeletionTimestamp(),
	}
}

// ChildTransform is the transform of the informer of child kind gvk: the operator's own
// managedFields entry is what the drift check reads; nothing reads the others'.
func (p *Packer) ChildTransform(gvk schema.GroupVersionKind, manager string) cache.TransformFunc {
	return p.packTransform(gvk, manager, func(o metav1.Object) Object {
		// Only what the controller routes events by; the version stands for the rest of the metadata.
		out := Object{ObjectMeta: metav1.ObjectMeta{
			Name: o.GetName(), Namespace: o.GetNamespace(), UID: o.GetUID(), ResourceVersion: o.GetResourceVersion(),
			Generation: o.GetGeneration(), DeletionTimestamp: o.GetDeletionTimestamp(),
			Labels: keepLabels(o.GetLabels(), api.LabelManagedBy, api.LabelInstance),
		}, Version: Version(o)}
		if ref := metav1.GetControllerOfNoCopy(o); ref != nil {
			out.OwnerReferences = []metav1.OwnerReference{*ref}
		}
		switch sts := o.(type) {
		case *unstructured.Unstructured:
			if gvk == StatefulSet {
				out.UpdateRevision, _, _ = unstructured.NestedString(sts.Object, "status", "updateRevision")
			}
		case *appsv1.StatefulSet:
			out.UpdateRevision = sts.Status.UpdateRevision
		}
		return out
	})
}

// CacheTransform is the ManagedCache informer's transform: what the controller compares on an update stays
// unpacked, and the Ready condition's status for the gauge.
func (p *Packer) CacheTransform() cache.TransformFunc {
	return p.packTransform(api.GroupVersion.WithKind(api.Kind), "", func(o metav1.Object) Object {
		out := Object{ObjectMeta: routingMeta(o), Ready: "Unknown"}
		if u, ok := o.(*unstructured.Unstructured); ok {
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, c := range conds {
				if m, ok := c.(map[string]interface{}); ok && m["type"] == api.ConditionReady {
					if s, ok := m["status"].(string); ok {
						out.Ready = s
					}
					if m["reason"] == "Hibernated" {
						out.Ready = "Hibernated" // stopped on purpose: not counted as not Ready
					}
				}
			}
		}
		return out
	})
}

// Unpack returns what an informer holds as an object of its own.
func (p *Packer) Unpack(obj interface{}) (*unstructured.Unstructured, error) {
	switch o := obj.(type) {
	case *Object:
		u, err := p.unpack(o.packed)
		if err != nil {
			return nil, fmt.Errorf("decoding %s/%s from the informer cache: %w", o.Namespace, o.Name, err)
		}
		return u, nil
	case *unstructured.Unstructured:
		return o.DeepCopy(), nil
	}
	return nil, fmt.Errorf("unexpected object in an informer: %T", obj)
}

// keepManagedFields drops every managedFields entry of o except manager's own on the main
// resource ("": drop all). Other managers' entries are often most of an object's size, and the
// controller never reads them; with one exception: while manager owns fields through an update
// (a child made by a plain create and not yet applied), every entry is kept, because the first
// apply moves those fields to manager's apply entry with a patch of the whole list, computed from
// this copy (ssa.Applier.Apply), so that it needs no read.
func keepManagedFields(o metav1.Object, manager string) {
	entries := o.GetManagedFields()
	if len(entries) == 0 {
		return
	}
	var kept []metav1.ManagedFieldsEntry
	for _, e := range entries {
		if manager != "" && e.Manager == manager && e.Subresource == "" {
			if e.Operation == metav1.ManagedFieldsOperationUpdate {
				return
			}
			kept = append(kept, e)
		}
	}
	o.SetManagedFields(kept)
}

// keepLabels returns the labels among keys that all has (nil if none).
func keepLabels(all map[string]string, keys ...string) map[string]string {
	var out map[string]string
	for _, k := range keys {
		if v, ok := all[k]; ok {
			if out == nil {
				out = make(map[string]string, len(keys))
			}
			out[k] = v
		}
	}
	return out
}
