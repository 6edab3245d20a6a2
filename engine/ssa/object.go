// Package ssa compares unstructured objects with their live state and writes them with
// server-side apply: the drift check (which fields this field manager set that differ, the way
// apply merges them, from the kinds' schemas), the apply itself (forcing ownership, after moving a
// plain create's fields to the apply entry), and the errors that name the object.
//
// It knows nothing about ManagedCaches or any other kind of owner; a caller passes the field
// manager and the objects. It does not decide what to write or when: that is the controller's.
package ssa

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ObjectID names an object in errors and logs: Kind/namespace/name, or Kind/name for an object
// without a namespace.
func ObjectID(obj *unstructured.Unstructured) string {
	if ns := obj.GetNamespace(); ns != "" {
		return fmt.Sprintf("%s/%s/%s", obj.GetKind(), ns, obj.GetName())
	}
	return fmt.Sprintf("%s/%s", obj.GetKind(), obj.GetName())
}

// Errorf returns an error about obj: the message is prefixed with ObjectID(obj), and %w wraps as
// in fmt.Errorf.
func Errorf(obj *unstructured.Unstructured, format string, args ...interface{}) error {
	return fmt.Errorf("%s: "+format, append([]interface{}{ObjectID(obj)}, args...)...)
}

// ResourceFor maps a kind to its resource.
func ResourceFor(mapper meta.RESTMapper, gvk schema.GroupVersionKind) (schema.GroupVersionResource, error) {
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return schema.GroupVersionResource{}, err
	}
	return m.Resource, nil
}
