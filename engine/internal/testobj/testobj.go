// Package testobj builds the ManagedCaches and children that the engine's unit tests share.
package testobj

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"example.com/cache-operator/engine/api"
)

// Cache is a v2 ManagedCache shop/<name> of three replicas (uid "uid-<name>", generation 1).
func Cache(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": api.GroupVersion.String(), "kind": api.Kind,
		"metadata": map[string]interface{}{"name": name, "namespace": "shop", "uid": "uid-" + name, "generation": int64(1)},
		"spec":     map[string]interface{}{"replicas": int64(3), "engine": map[string]interface{}{"version": "7.2"}},
	}}
}

// Child is an empty object of the kind in namespace shop, controlled by owner when it is not nil.
func Child(apiVersion, kind, name string, owner *unstructured.Unstructured) *unstructured.Unstructured {
	o := &unstructured.Unstructured{}
	o.SetAPIVersion(apiVersion)
	o.SetKind(kind)
	o.SetNamespace("shop")
	o.SetName(name)
	if owner != nil {
		o.SetOwnerReferences([]metav1.OwnerReference{api.OwnerReference(owner)})
	}
	return o
}
