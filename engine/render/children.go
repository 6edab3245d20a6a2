package render

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"example.com/cache-operator/engine/api"
)

// Children renders the desired children of mc: the templates' objects with the cache's
// namespace, standard labels and controller reference. auth is what the cache's Secret holds (read
// from the live Secret, or newly generated).
func (r *Renderer) Children(mc *unstructured.Unstructured, spec api.Spec, cfg Config, auth Auth) ([]*unstructured.Unstructured, error) {
	objs, err := r.Render(NewValues(mc, spec, cfg, auth))
	if err != nil {
		return nil, err
	}
	ref := api.OwnerReference(mc)
	for _, o := range objs {
		o.SetOwnerReferences([]metav1.OwnerReference{ref})
	}
	return objs, nil
}

// Kinds returns the kinds the templates produce, by rendering a sample cache. The controller
// watches exactly these.
func (r *Renderer) Kinds() ([]schema.GroupVersionKind, error) {
	sample := &unstructured.Unstructured{}
	sample.SetName("sample")
	sample.SetNamespace("default")
	objs, err := r.Render(NewValues(sample, sampleSpec(), DefaultConfig(), SimpleAuth("sample")))
	if err != nil {
		return nil, err
	}
	seen := map[schema.GroupVersionKind]bool{}
	var kinds []schema.GroupVersionKind
	for _, o := range objs {
		if gvk := o.GroupVersionKind(); !seen[gvk] {
			seen[gvk] = true
			kinds = append(kinds, gvk)
		}
	}
	return kinds, nil
}

// sampleSpec is a valid spec that sets every optional field, so that templates render every
// object and every branch they have.
func sampleSpec() api.Spec {
	return api.Spec{
		Replicas: 3, Engine: api.Engine{Name: "redis", Version: "7.2"},
		Storage:   api.Storage{Size: "1Gi", StorageClassName: "standard"},
		Eviction:  api.Eviction{Policy: "allkeys-lru", MaxMemory: "1Gi", MaxMemoryBytes: 1 << 30},
		Resources: map[string]interface{}{"limits": map[string]interface{}{"memory": "2Gi"}},
	}
}

// Samples renders, into namespace ns, the children of three sample caches named name: one that
// sets every optional field, one that sets only what the CRD requires (the rest defaulted), and a
// sharded one (its StatefulSets roll themselves). Their dry-run creates tell which fields the API
// server fills in on create (see ssa.LearnDefaults).
func (r *Renderer) Samples(ns, name string) ([]*unstructured.Unstructured, error) {
	sample := &unstructured.Unstructured{Object: map[string]interface{}{
		"metadata": map[string]interface{}{"name": name, "namespace": ns},
		"spec":     map[string]interface{}{"engine": map[string]interface{}{"version": "7.2"}},
	}}
	minimal, err := api.SpecFrom(sample)
	if err != nil {
		return nil, err
	}
	sharded := sampleSpec()
	sharded.Shards = api.MinShards
	var out []*unstructured.Unstructured
	for _, spec := range []api.Spec{sampleSpec(), minimal, sharded} {
		objs, err := r.Render(NewValues(sample, spec, DefaultConfig(), SimpleAuth("sample")))
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	return out, nil
}
