/*
Copyright 2026 The cache-operator Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package controller

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/klauspost/compress/zstd"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/render"
)

// What the informers hold. The operator's memory is mostly its informer caches, so they hold each
// object in a compact form: the metadata that keys it and routes its events, and the rest as
// compressed JSON that a reconcile decodes when it reads the object. As nested maps a StatefulSet
// costs about 30 KiB; as JSON about 6; compressed against the rendered sample children (which
// every real child resembles) a few hundred bytes. Pods keep only the fields a member pass reads.

// packer compresses the JSON of the objects the informers hold, and decompresses it again. Its
// dictionary is the JSON of sample children rendered by the process's own templates, so a child
// compresses to little more than what makes it differ from the samples.
type packer struct {
	enc *zstd.Encoder
	dec *zstd.Decoder
}

// packerDictID names the dictionary inside each compressed frame (any value; one dictionary).
const packerDictID = 0x63616368

func newPacker(dict []byte) (*packer, error) {
	eopts := []zstd.EOption{
		zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderCRC(false),
		zstd.WithWindowSize(1 << 17), zstd.WithLowerEncoderMem(true), zstd.WithEncoderConcurrency(2),
	}
	dopts := []zstd.DOption{zstd.WithDecoderLowmem(true), zstd.WithDecoderConcurrency(2), zstd.WithDecoderMaxWindow(1 << 20)}
	if len(dict) > 0 {
		eopts = append(eopts, zstd.WithEncoderDictRaw(packerDictID, dict))
		dopts = append(dopts, zstd.WithDecoderDictRaw(packerDictID, dict))
	}
	enc, err := zstd.NewWriter(nil, eopts...)
	if err != nil {
		return nil, err
	}
	dec, err := zstd.NewReader(nil, dopts...)
	if err != nil {
		return nil, err
	}
	return &packer{enc: enc, dec: dec}, nil
}

// newSamplesPacker returns the packer of the informers: its dictionary is the JSON of the sample
// children renderer renders.
func newSamplesPacker(renderer *render.Renderer) (*packer, error) {
	samples, err := renderer.Samples(metav1.NamespaceDefault, "cache")
	if err != nil {
		return nil, fmt.Errorf("rendering sample caches: %w", err)
	}
	dict, err := samplesDict(samples)
	if err != nil {
		return nil, err
	}
	return newPacker(dict)
}

// samplesDict is the dictionary: the JSON of the sample children, one after the other, each both
// as the dynamic informers encode it (keys sorted) and, for a built-in kind, as the typed ones
// do (keys in field order).
func samplesDict(samples []*unstructured.Unstructured) ([]byte, error) {
	var b bytes.Buffer
	for _, s := range samples {
		raw, err := s.MarshalJSON()
		if err != nil {
			return nil, err
		}
		b.Write(raw)
		typed, err := scheme.Scheme.New(s.GroupVersionKind())
		if err != nil {
			continue // not a built-in kind: read by a dynamic informer only
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(s.Object, typed); err != nil {
			return nil, err
		}
		if raw, err = json.Marshal(typed); err != nil {
			return nil, err
		}
		b.Write(raw)
	}
	return b.Bytes(), nil
}

// pack compresses raw JSON.
func (p *packer) pack(raw []byte) []byte {
	return bytes.Clone(p.enc.EncodeAll(raw, nil)) // Clone: the encoder leaves room to spare
}

func (p *packer) unpack(packed []byte) (*unstructured.Unstructured, error) {
	raw, err := p.dec.DecodeAll(packed, nil)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	return u, u.UnmarshalJSON(raw)
}

// packedObject is a child or a ManagedCache as an informer holds it: the metadata that keys it and
// routes its events, and the whole object packed (with only the managedFields entry kept).
type packedObject struct {
	metav1.ObjectMeta
	packed []byte
	// ready is a ManagedCache's Ready condition status, for the fleet gauge ("" for a child).
	ready string
	// updateRevision is a StatefulSet's status.updateRevision, which every member pass reads.
	updateRevision string
	// version is a child's objectVersion (verified.go).
	version uint64
}

// packTransform returns the transform of an informer of kind gvk: managedFields dropped but
// manager's own ("": all), then packed. routing is the metadata the object keeps unpacked. The
// informer may hold unstructured objects (dynamic informers) or typed ones (built-in kinds, read
// as protobuf); both are packed as the JSON the API server would send.
func (p *packer) packTransform(gvk schema.GroupVersionKind, manager string, routing func(obj metav1.Object) packedObject) cache.TransformFunc {
	return func(obj interface{}) (interface{}, error) {
		if _, done := obj.(*packedObject); done {
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

// routingMeta is the metadata a packed ManagedCache keeps unpacked: what cacheUpdated compares.
func routingMeta(o metav1.Object) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: o.GetName(), Namespace: o.GetNamespace(), UID: o.GetUID(), ResourceVersion: o.GetResourceVersion(),
		Generation: o.GetGeneration(), Labels: o.GetLabels(), Annotations: o.GetAnnotations(),
		OwnerReferences: o.GetOwnerReferences(), Finalizers: o.GetFinalizers(), DeletionTimestamp: o.GetDeletionTimestamp(),
	}
}

// childTransform is the transform of the informer of child kind gvk: the operator's own
// managedFields entry is what the drift check reads; nothing reads the others'.
func (p *packer) childTransform(gvk schema.GroupVersionKind, manager string) cache.TransformFunc {
	return p.packTransform(gvk, manager, func(o metav1.Object) packedObject {
		// Only what enqueueOwner routes by; the version stands for the rest of the metadata.
		out := packedObject{ObjectMeta: metav1.ObjectMeta{
			Name: o.GetName(), Namespace: o.GetNamespace(), UID: o.GetUID(), ResourceVersion: o.GetResourceVersion(),
			Generation: o.GetGeneration(), DeletionTimestamp: o.GetDeletionTimestamp(),
			Labels: keepLabels(o.GetLabels(), api.LabelManagedBy, api.LabelInstance),
		}, version: objectVersion(o)}
		if ref := metav1.GetControllerOfNoCopy(o); ref != nil {
			out.OwnerReferences = []metav1.OwnerReference{*ref}
		}
		switch sts := o.(type) {
		case *unstructured.Unstructured:
			if gvk == statefulSetGVK {
				out.updateRevision, _, _ = unstructured.NestedString(sts.Object, "status", "updateRevision")
			}
		case *appsv1.StatefulSet:
			out.updateRevision = sts.Status.UpdateRevision
		}
		return out
	})
}

// cacheTransform is the ManagedCache informer's transform: what cacheUpdated compares stays
// unpacked, and the Ready condition's status for the gauge.
func (p *packer) cacheTransform() cache.TransformFunc {
	return p.packTransform(api.GroupVersion.WithKind(api.Kind), "", func(o metav1.Object) packedObject {
		out := packedObject{ObjectMeta: routingMeta(o), ready: "Unknown"}
		if u, ok := o.(*unstructured.Unstructured); ok {
			for _, cond := range statusOf(u).Conditions {
				if cond.Type == ConditionReady {
					out.ready = string(cond.Status)
				}
			}
		}
		return out
	})
}

// unpackObject returns what an informer holds as an object of its own.
func (p *packer) unpackObject(obj interface{}) (*unstructured.Unstructured, error) {
	switch o := obj.(type) {
	case *packedObject:
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

// memberPod is a pod as the pod informer holds it: what a member pass reads.
type memberPod struct {
	metav1.ObjectMeta // name, namespace, UID, resourceVersion, deletion timestamp, the labels read, the controller
	ip                string
	ready             bool // the Ready condition is True
	running           bool // every container runs (false while one has exited or waits to restart)
}

// memberPodLabels are the pod labels a member pass reads.
var memberPodLabels = []string{api.LabelInstance, api.LabelRole, "controller-revision-hash"}

// podTransform is the pod informer's transform.
func podTransform(obj interface{}) (interface{}, error) {
	switch pod := obj.(type) {
	case *corev1.Pod:
		return typedMemberPod(pod), nil
	case *unstructured.Unstructured:
		return unstructuredMemberPod(pod), nil
	}
	return obj, nil
}

func memberPodMeta(o metav1.Object) memberPod {
	p := memberPod{ObjectMeta: metav1.ObjectMeta{
		Name: o.GetName(), Namespace: o.GetNamespace(), UID: o.GetUID(), ResourceVersion: o.GetResourceVersion(),
		DeletionTimestamp: o.GetDeletionTimestamp(),
	}}
	p.Labels = keepLabels(o.GetLabels(), memberPodLabels...)
	if ref := metav1.GetControllerOfNoCopy(o); ref != nil {
		p.OwnerReferences = []metav1.OwnerReference{*ref}
	}
	return p
}

// typedMemberPod reads a pod from the typed (protobuf) informer.
func typedMemberPod(pod *corev1.Pod) *memberPod {
	p := memberPodMeta(pod)
	p.ip = pod.Status.PodIP
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			p.ready = c.Status == corev1.ConditionTrue
		}
	}
	p.running = len(pod.Status.ContainerStatuses) > 0
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.State.Running == nil {
			p.running = false
		}
	}
	return &p
}

// unstructuredMemberPod reads a pod from a dynamic informer.
func unstructuredMemberPod(u *unstructured.Unstructured) *memberPod {
	p := memberPodMeta(u)
	p.ip, _, _ = unstructured.NestedString(u.Object, "status", "podIP")
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]interface{}); ok && m["type"] == string(corev1.PodReady) {
			p.ready = m["status"] == string(corev1.ConditionTrue)
		}
	}
	statuses, _, _ := unstructured.NestedSlice(u.Object, "status", "containerStatuses")
	p.running = len(statuses) > 0
	for _, cs := range statuses {
		if m, ok := cs.(map[string]interface{}); ok {
			if _, ok := m["state"].(map[string]interface{})["running"]; !ok {
				p.running = false
			}
		}
	}
	return &p
}
