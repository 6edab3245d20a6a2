package informers

import (
	"encoding/json"
	"reflect"
	"sort"
	"testing"
	"time"

	"example.com/cache-operator/engine/internal/testobj"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/render"
	"example.com/cache-operator/templates"
)

// A child's version digest is the same packed and decoded; it changes with the metadata the
// drift check compares and the generation, not with status (for kinds with a generation).
func TestObjectVersion(t *testing.T) {
	base := func() *unstructured.Unstructured {
		o := child("apps/v1", "StatefulSet", "sessions", newCache("sessions"))
		o.SetUID("u1")
		o.SetGeneration(2)
		o.SetResourceVersion("10")
		o.SetLabels(map[string]string{"a": "1", "b": "2"})
		return o
	}
	v := Version(base())
	same := base()
	same.SetResourceVersion("11") // a status update
	same.Object["status"] = map[string]interface{}{"readyReplicas": int64(3)}
	same.SetLabels(map[string]string{"b": "2", "a": "1"})
	if Version(same) != v {
		t.Error("a status update changed the version of a kind with a generation")
	}
	renderer, err := render.NewRenderer(templates.FS)
	if err != nil {
		t.Fatal(err)
	}
	p := newTestPacker(t, renderer)
	stored, err := p.ChildTransform(StatefulSet, api.FieldManager)(base())
	if err != nil {
		t.Fatal(err)
	}
	decoded, err := p.Unpack(stored)
	if err != nil {
		t.Fatal(err)
	}
	if stored.(*Object).Version != v || Version(decoded) != v {
		t.Error("the packed object's version differs from the decoded one's")
	}
	for name, change := range map[string]func(o *unstructured.Unstructured){
		"generation":  func(o *unstructured.Unstructured) { o.SetGeneration(3) },
		"uid":         func(o *unstructured.Unstructured) { o.SetUID("u2") },
		"label":       func(o *unstructured.Unstructured) { o.SetLabels(map[string]string{"a": "1"}) },
		"label moved": func(o *unstructured.Unstructured) { o.SetLabels(map[string]string{"a": "12"}) },
		"annotation":  func(o *unstructured.Unstructured) { o.SetAnnotations(map[string]string{"a": "1"}) },
		"owner":       func(o *unstructured.Unstructured) { o.SetOwnerReferences(nil) },
		"finalizer":   func(o *unstructured.Unstructured) { o.SetFinalizers([]string{"f"}) },
		"deletion":    func(o *unstructured.Unstructured) { now := metav1.Now(); o.SetDeletionTimestamp(&now) },
	} {
		o := base()
		change(o)
		if Version(o) == v {
			t.Errorf("%s changed, the version did not", name)
		}
	}
	secret := child("v1", "Secret", "sessions-auth", nil)
	secret.SetResourceVersion("5")
	sv := Version(secret)
	secret.SetResourceVersion("6")
	if Version(secret) == sv {
		t.Error("a kind without a generation: a new resourceVersion did not change the version")
	}
}

// The child informers keep an object as its metadata and its JSON packed: keyed and routed like
// the object, decoded back to it (with the operator's managedFields entry only), and a fraction of
// the JSON's size.
func TestPackedChildRoundTrip(t *testing.T) {
	objs, p := samplesAndPacker(t)
	totalJSON, totalPacked := 0, 0
	for _, o := range objs {
		transform := p.ChildTransform(o.GroupVersionKind(), api.FieldManager)
		o.SetResourceVersion("42")
		if o.GetKind() == "StatefulSet" {
			o.Object["status"] = map[string]interface{}{"updateRevision": "sessions-7d4f"}
		}
		o.SetOwnerReferences([]metav1.OwnerReference{api.OwnerReference(newCache("sessions"))})
		o.SetManagedFields([]metav1.ManagedFieldsEntry{
			{Manager: api.FieldManager, Operation: metav1.ManagedFieldsOperationApply, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{}}`)}},
			{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{}}`)}},
		})
		want := o.DeepCopy()
		want.SetManagedFields(want.GetManagedFields()[:1])
		stored, err := transform(o)
		if err != nil {
			t.Fatal(err)
		}
		if again, _ := transform(stored); again != stored {
			t.Errorf("%s: transforming a stored object again changed it", o.GetKind())
		}
		key, err := cache.MetaNamespaceKeyFunc(stored)
		if err != nil || key != "shop/"+o.GetName() {
			t.Errorf("%s: key %q, %v", o.GetKind(), key, err)
		}
		if ref := metav1.GetControllerOfNoCopy(stored.(metav1.Object)); ref == nil || ref.Name != "sessions" {
			t.Errorf("%s: owner reference lost: %v", o.GetKind(), ref)
		}
		got, err := p.Unpack(stored)
		if err != nil {
			t.Fatal(err)
		}
		if !equality.Semantic.DeepEqual(got.Object, want.Object) {
			t.Errorf("%s: decoded %v\nwant %v", o.GetKind(), got.Object, want.Object)
		}
		if rev, _, _ := unstructured.NestedString(o.Object, "status", "updateRevision"); stored.(*Object).UpdateRevision != rev {
			t.Errorf("%s: updateRevision %q, want %q", o.GetKind(), stored.(*Object).UpdateRevision, rev)
		}
		raw, _ := want.MarshalJSON()
		packed := len(stored.(*Object).packed)
		t.Logf("%s: %d bytes of JSON packed into %d", o.GetKind(), len(raw), packed)
		totalJSON, totalPacked = totalJSON+len(raw), totalPacked+packed
	}
	if totalPacked*4 > totalJSON {
		t.Errorf("%d bytes of JSON packed into %d, more than a quarter", totalJSON, totalPacked)
	}
}

// A built-in child read through the typed (protobuf) informer is packed as the same object as
// when a dynamic informer reads the API server's JSON of it; a pod becomes the same member pod.
func TestTypedInformerObjectsPackAsDynamic(t *testing.T) {
	objs, p := samplesAndPacker(t)
	created := metav1.NewTime(time.Date(2026, 12, 1, 7, 0, 0, 0, time.UTC))
	for _, o := range objs {
		o.SetResourceVersion("42")
		o.SetUID("u-" + types.UID(o.GetName()))
		o.SetCreationTimestamp(created)
		o.SetOwnerReferences([]metav1.OwnerReference{api.OwnerReference(newCache("sessions"))})
		o.SetManagedFields([]metav1.ManagedFieldsEntry{
			{Manager: api.FieldManager, Operation: metav1.ManagedFieldsOperationApply, APIVersion: o.GetAPIVersion(), FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{}}`)}},
			{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{}}`)}},
		})
		if o.GetKind() == "StatefulSet" {
			o.Object["status"] = map[string]interface{}{"replicas": int64(3), "updateRevision": "sessions-7d4f"}
		}
		// The typed object, as the protobuf informer decodes it, and the API server's JSON of
		// it, as a dynamic informer decodes that.
		typed, err := scheme.Scheme.New(o.GroupVersionKind())
		if err != nil {
			t.Fatal(err)
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, typed); err != nil {
			t.Fatal(err)
		}
		raw, err := json.Marshal(typed)
		if err != nil {
			t.Fatal(err)
		}
		server := &unstructured.Unstructured{}
		if err := server.UnmarshalJSON(raw); err != nil {
			t.Fatal(err)
		}
		typed.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{}) // informers leave it empty
		transform := p.ChildTransform(o.GroupVersionKind(), api.FieldManager)
		fromTyped, err := transform(typed)
		if err != nil {
			t.Fatal(err)
		}
		fromDynamic, err := transform(server)
		if err != nil {
			t.Fatal(err)
		}
		pt, pd := fromTyped.(*Object), fromDynamic.(*Object)
		if !equality.Semantic.DeepEqual(pt.ObjectMeta, pd.ObjectMeta) || pt.UpdateRevision != pd.UpdateRevision {
			t.Errorf("%s: routing metadata typed %+v (%q), dynamic %+v (%q)", o.GetKind(), pt.ObjectMeta, pt.UpdateRevision, pd.ObjectMeta, pd.UpdateRevision)
		}
		gotTyped, err := p.Unpack(pt)
		if err != nil {
			t.Fatal(err)
		}
		gotDynamic, err := p.Unpack(pd)
		if err != nil {
			t.Fatal(err)
		}
		if !equality.Semantic.DeepEqual(gotTyped.Object, gotDynamic.Object) {
			t.Errorf("%s: from the typed informer %v\nfrom the dynamic one %v", o.GetKind(), gotTyped.Object, gotDynamic.Object)
		}
		if n := len(gotTyped.GetManagedFields()); n != 1 {
			t.Errorf("%s: %d managedFields entries kept, want the operator's one", o.GetKind(), n)
		}
		t.Logf("%s: %d bytes of JSON, packed from typed %d, from dynamic %d", o.GetKind(), len(raw), len(pt.packed), len(pd.packed))
	}

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "sessions-1", Namespace: "shop", UID: "u1", ResourceVersion: "9",
			Labels:          map[string]string{api.LabelInstance: "sessions", api.LabelRole: api.RolePrimary, "controller-revision-hash": "r1", "other": "x"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "sessions", UID: "s1", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "redis"}}},
		Status: corev1.PodStatus{PodIP: "198.18.0.9",
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "redis", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}},
	}
	for _, state := range []corev1.ContainerState{{Running: &corev1.ContainerStateRunning{}}, {Waiting: &corev1.ContainerStateWaiting{}}} {
		pod.Status.ContainerStatuses[0].State = state
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(pod)
		if err != nil {
			t.Fatal(err)
		}
		fromTyped, _ := podTransform(pod.DeepCopy())
		fromDynamic, _ := podTransform(&unstructured.Unstructured{Object: obj})
		if !reflect.DeepEqual(fromTyped, fromDynamic) {
			t.Errorf("member pod from the typed informer %+v, from the dynamic one %+v", fromTyped, fromDynamic)
		}
	}
}

// samplesAndPacker returns the sample children of cache shop/sessions and the packer New makes.
func samplesAndPacker(t *testing.T) ([]*unstructured.Unstructured, *Packer) {
	t.Helper()
	renderer, err := render.NewRenderer(templates.FS)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := renderer.Samples("shop", "sessions")
	if err != nil {
		t.Fatal(err)
	}
	return objs, newTestPacker(t, renderer)
}

// newTestPacker is the packer New makes: its dictionary is another cache's sample children.
func newTestPacker(t testing.TB, renderer *render.Renderer) *Packer {
	p, err := NewSamplesPacker(renderer)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// The ManagedCache informer keeps what cacheUpdated compares and the Ready status unpacked; the
// pod informer keeps what a member pass reads.
func TestPackedCacheAndMemberPod(t *testing.T) {
	renderer, err := render.NewRenderer(templates.FS)
	if err != nil {
		t.Fatal(err)
	}
	p := newTestPacker(t, renderer)
	mc := newCache("sessions")
	mc.SetGeneration(3)
	mc.SetResourceVersion("7")
	mc.SetAnnotations(map[string]string{api.SwitchoverAnnotation: "sessions-1"})
	mc.SetFinalizers([]string{"example.com/x"})
	now := metav1.Now()
	mc.SetDeletionTimestamp(&now)
	mc.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}})
	if err := unstructured.SetNestedSlice(mc.Object, []interface{}{map[string]interface{}{"type": api.ConditionReady, "status": "False"}}, "status", "conditions"); err != nil {
		t.Fatal(err)
	}
	want := mc.DeepCopy()
	want.SetManagedFields(nil)
	stored, err := p.CacheTransform()(mc)
	if err != nil {
		t.Fatal(err)
	}
	po := stored.(*Object)
	if po.GetGeneration() != 3 || po.GetResourceVersion() != "7" || po.GetAnnotations()[api.SwitchoverAnnotation] != "sessions-1" ||
		len(po.GetFinalizers()) != 1 || po.GetDeletionTimestamp() == nil || po.Ready != "False" {
		t.Errorf("routing metadata: %+v, ready %q", po.ObjectMeta, po.Ready)
	}
	got, err := p.Unpack(stored)
	if err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(got.Object, want.Object) {
		t.Errorf("decoded %v\nwant %v", got.Object, want.Object)
	}

	pod := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]interface{}{
			"name": "sessions-1", "namespace": "shop", "uid": "u1", "resourceVersion": "9",
			"labels":          map[string]interface{}{api.LabelInstance: "sessions", api.LabelRole: api.RolePrimary, "controller-revision-hash": "r1", "other": "x"},
			"ownerReferences": []interface{}{map[string]interface{}{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "sessions", "uid": "s1", "controller": true}},
		},
		"spec": map[string]interface{}{"nodeName": "n1", "containers": []interface{}{map[string]interface{}{"name": "redis"}}},
		"status": map[string]interface{}{
			"podIP":             "198.18.0.9",
			"conditions":        []interface{}{map[string]interface{}{"type": "Ready", "status": "True"}},
			"containerStatuses": []interface{}{map[string]interface{}{"name": "redis", "state": map[string]interface{}{"running": map[string]interface{}{}}}},
		},
	}}
	out, err := podTransform(pod)
	if err != nil {
		t.Fatal(err)
	}
	mp := out.(*Pod)
	if mp.Name != "sessions-1" || mp.UID != "u1" || mp.IP != "198.18.0.9" || !mp.Ready || !mp.Running ||
		len(mp.Labels) != 3 || mp.Labels[api.LabelRole] != api.RolePrimary || metav1.GetControllerOfNoCopy(mp).Name != "sessions" {
		t.Errorf("member pod: %+v", mp)
	}
	if keys, _ := podInstance(mp); len(keys) != 1 || keys[0] != "shop/sessions" {
		t.Errorf("indexed as %v", keys)
	}
	unstructured.RemoveNestedField(pod.Object, "status", "containerStatuses", "0", "state")
	_ = unstructured.SetNestedSlice(pod.Object, []interface{}{map[string]interface{}{"name": "redis", "state": map[string]interface{}{"waiting": map[string]interface{}{}}}}, "status", "containerStatuses")
	if out, _ := podTransform(pod); out.(*Pod).Running {
		t.Errorf("a waiting container counts as running")
	}
}

// BenchmarkUnpackCache is what a reconcile or a member pass pays to read a cache from the informer.
func BenchmarkUnpackCache(b *testing.B) {
	renderer, err := render.NewRenderer(templates.FS)
	if err != nil {
		b.Fatal(err)
	}
	p := newTestPacker(b, renderer)
	stored, err := p.CacheTransform()(newCache("sessions"))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Unpack(stored); err != nil {
			b.Fatal(err)
		}
	}
}

// newCache and child are the shared test objects (package testobj).
var (
	newCache = testobj.Cache
	child    = testobj.Child
)

// A child the operator made with a plain create (its entry is an Update) keeps every manager's
// entry until its first apply, which rewrites the whole list from this copy; after it, only the
// operator's Apply entry is kept.
func TestManagedFieldsKeptUntilTheUpgrade(t *testing.T) {
	entry := func(manager string, op metav1.ManagedFieldsOperationType, sub string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: op, Subresource: sub, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{}`)}}
	}
	kcm := entry("kube-controller-manager", metav1.ManagedFieldsOperationUpdate, "status")
	for _, tc := range []struct {
		name string
		in   []metav1.ManagedFieldsEntry
		want []string
	}{
		{"created, not yet applied", []metav1.ManagedFieldsEntry{entry(api.FieldManager, metav1.ManagedFieldsOperationUpdate, ""), kcm},
			[]string{api.FieldManager + "/Update/", "kube-controller-manager/Update/status"}},
		{"applied", []metav1.ManagedFieldsEntry{entry(api.FieldManager, metav1.ManagedFieldsOperationApply, ""), kcm},
			[]string{api.FieldManager + "/Apply/"}},
		{"the operator's status entry is not an Update of the object", []metav1.ManagedFieldsEntry{entry(api.FieldManager, metav1.ManagedFieldsOperationUpdate, "status"), kcm},
			nil},
	} {
		o := child("apps/v1", "StatefulSet", "sessions", nil)
		o.SetManagedFields(tc.in)
		keepManagedFields(o, api.FieldManager)
		var got []string
		for _, e := range o.GetManagedFields() {
			got = append(got, e.Manager+"/"+string(e.Operation)+"/"+e.Subresource)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: kept %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A cache's members are the pods its StatefulSet (or a shard's, <name>-s<shard>) controls and the
// pods with its labels that nothing controls (orphaned by a StatefulSet deleted with
// --cascade=orphan: still running, still the primary); a pod with the labels that another
// controller owns is none.
func TestMemberPodsKeepOrphans(t *testing.T) {
	pods := cache.NewSharedIndexInformer(&cache.ListWatch{}, &corev1.Pod{}, 0, cache.Indexers{InstanceIndex: podInstance})
	s := &Set{Pods: pods}
	add := func(name string, owner *metav1.OwnerReference) {
		p := &Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", Labels: map[string]string{api.LabelInstance: "sessions"}}}
		if owner != nil {
			p.OwnerReferences = []metav1.OwnerReference{*owner}
		}
		if err := pods.GetIndexer().Add(p); err != nil {
			t.Fatal(err)
		}
	}
	controller := func(kind, name string) *metav1.OwnerReference {
		return &metav1.OwnerReference{APIVersion: "apps/v1", Kind: kind, Name: name, UID: types.UID(kind + name), Controller: ptr.To(true)}
	}
	add("sessions-0", controller("StatefulSet", "sessions"))
	add("sessions-1", nil)                                                                                              // orphaned
	add("sessions-2", &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "sessions", UID: "old"}) // a reference, not a controller
	add("sessions-backup-x", controller("Job", "sessions-backup-x"))
	add("sessions-3", controller("StatefulSet", "other"))
	add("sessions-s1-0", controller("StatefulSet", "sessions-s1")) // a shard's member
	add("sessions-x-0", controller("StatefulSet", "sessions-x"))
	var got []string
	for _, p := range s.MemberPods("shop", "sessions") {
		got = append(got, p.Name)
	}
	sort.Strings(got)
	if want := []string{"sessions-0", "sessions-1", "sessions-2", "sessions-s1-0"}; !reflect.DeepEqual(got, want) {
		t.Errorf("members %v; want %v", got, want)
	}
}
