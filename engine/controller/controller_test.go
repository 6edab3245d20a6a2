package controller

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/credentials"
	"example.com/cache-operator/engine/dataplane"
	"example.com/cache-operator/engine/informers"
	"example.com/cache-operator/engine/internal/testobj"
	"example.com/cache-operator/engine/internal/workloop"
	"example.com/cache-operator/engine/render"
	"example.com/cache-operator/engine/status"
	"example.com/cache-operator/templates"
)

// The kinds the controller watches, for the fake client and the REST mapper.
var testKinds = map[schema.GroupVersionResource]string{
	api.Resource:                                                       "ManagedCache",
	{Version: "v1", Resource: "secrets"}:                               "Secret",
	{Version: "v1", Resource: "configmaps"}:                            "ConfigMap",
	{Version: "v1", Resource: "services"}:                              "Service",
	{Group: "apps", Version: "v1", Resource: "statefulsets"}:           "StatefulSet",
	{Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"}: "PodDisruptionBudget",
	informers.Pods:   "Pod",
	informers.Claims: "PersistentVolumeClaim",
}

type fixture struct {
	t        *testing.T
	client   *dynamicfake.FakeDynamicClient
	ctrl     *Controller
	recorder *record.FakeRecorder
}

// newFixture starts a controller on a fake dynamic client holding objs, with its caches synced.
func newFixture(t *testing.T, cleanups []CleanupFunc, objs ...*unstructured.Unstructured) *fixture {
	t.Helper()
	listKinds := map[schema.GroupVersionResource]string{}
	mapper := meta.NewDefaultRESTMapper(nil)
	for gvr, kind := range testKinds {
		listKinds[gvr] = kind + "List"
		mapper.Add(gvr.GroupVersion().WithKind(kind), meta.RESTScopeNamespace)
	}
	var runtimeObjs []runtime.Object
	for _, o := range objs {
		if o.GetResourceVersion() == "" {
			o.SetResourceVersion("1")
		}
		runtimeObjs = append(runtimeObjs, o)
	}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), listKinds, runtimeObjs...)
	// The fake client cannot server-side apply; stand in with create-or-replace, which is all
	// these tests need (the API-server tests in e2e/ prove what apply does).
	client.PrependReactor("patch", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
		p := a.(clienttesting.PatchAction)
		if p.GetPatchType() != types.ApplyPatchType {
			return false, nil, nil
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(p.GetPatch()); err != nil {
			return true, nil, err
		}
		tracker := client.Tracker()
		if _, err := tracker.Get(p.GetResource(), p.GetNamespace(), p.GetName()); err != nil {
			return true, obj, tracker.Create(p.GetResource(), obj, p.GetNamespace())
		}
		return true, obj, tracker.Update(p.GetResource(), obj, p.GetNamespace())
	})
	renderer, err := render.NewRenderer(templates.FS)
	if err != nil {
		t.Fatal(err)
	}
	recorder := record.NewFakeRecorder(100)
	set, err := informers.New(client, mapper, renderer, informers.Options{})
	if err != nil {
		t.Fatal(err)
	}
	queue := workloop.New(workloop.Options{Name: "test", Workers: fixtureWorkers, Grace: fixtureGrace})
	members, err := dataplane.New(client, set, recorder, queue, dataplane.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctrl, err := New(Deps{Client: client, Mapper: mapper, Renderer: renderer, Recorder: recorder, Informers: set, Queue: queue, Members: members}, Options{}, cleanups...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := ctrl.Start(ctx); err != nil {
		t.Fatal(err)
	}
	client.ClearActions()
	return &fixture{t: t, client: client, ctrl: ctrl, recorder: recorder}
}

// writes returns the verbs and resources of every request that was not a read.
func (f *fixture) writes() []string {
	var out []string
	for _, a := range f.client.Actions() {
		switch a.GetVerb() {
		case "get", "list", "watch":
			continue
		}
		r := a.GetResource().Resource
		if a.GetSubresource() != "" {
			r += "/" + a.GetSubresource()
		}
		if p, ok := a.(clienttesting.PatchAction); ok {
			r += " " + string(p.GetPatchType())
		}
		out = append(out, a.GetVerb()+" "+r)
	}
	return out
}

// newCache and child are the shared test objects (package testobj).
var (
	newCache = testobj.Cache
	child    = testobj.Child
)

// The fixture's work loop: two workers, and the operator's default shutdown grace.
const (
	fixtureWorkers = 2
	fixtureGrace   = 10 * time.Second
)

func (f *fixture) queued() []string { return f.ctrl.queue.Drain() }

// A child's events enqueue the cache that controls it, an orphan carrying a cache's labels enqueues
// that cache, and anything else enqueues nothing; a tombstone is unwrapped.
func TestChildEventsEnqueueTheirOwner(t *testing.T) {
	f := newFixture(t, nil)
	f.queued()
	owned := child("apps/v1", "StatefulSet", "sessions", newCache("sessions"))
	orphan := child("v1", "Service", "orders", nil)
	orphan.SetLabels(api.StandardLabels("orders"))
	foreign := child("v1", "Service", "web", nil)
	otherOwner := child("v1", "Service", "db", nil)
	otherOwner.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "db", UID: "x", Controller: ptr.To(true)}})
	for _, o := range []interface{}{owned, orphan, foreign, otherOwner, cache.DeletedFinalStateUnknown{Key: "shop/sessions", Obj: owned}} {
		f.ctrl.enqueueOwner(o)
	}
	got := strings.Join(f.queued(), ",")
	if got != "shop/sessions,shop/orders" {
		t.Errorf("queued %q, want shop/sessions,shop/orders", got)
	}
}

func drain(r *record.FakeRecorder) string {
	var out []string
	for {
		select {
		case e := <-r.Events:
			out = append(out, e)
		default:
			return strings.Join(out, "\n")
		}
	}
}

// The password Secret: created once with a plain create; a Secret that exists keeps its
// password; the password never appears in an Event.
func TestPasswordSecret(t *testing.T) {
	ctx := context.Background()
	t.Run("created once", func(t *testing.T) {
		f := newFixture(t, nil, newCache("sessions"))
		if err := f.ctrl.reconcile(ctx, "shop/sessions"); err != nil {
			t.Logf("reconcile: %v", err)
		}
		if w := f.writes(); len(w) == 0 || w[0] != "create secrets" {
			t.Errorf("writes %v, want a plain create of the Secret first", w)
		}
		s, err := f.client.Resource(schema.GroupVersionResource{Version: "v1", Resource: "secrets"}).Namespace("shop").Get(ctx, "sessions-auth", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sec, _ := credentials.Parse(s)
		pw := sec.Password
		if len(pw) != 64 {
			t.Errorf("generated password has %d characters, want 64 hex", len(pw))
		}
		if strings.Contains(drain(f.recorder), pw) {
			t.Error("an Event carries the password")
		}
	})
	t.Run("kept", func(t *testing.T) {
		mc := newCache("sessions")
		secret := child("v1", "Secret", "sessions-auth", mc)
		secret.SetLabels(api.StandardLabels("sessions"))
		secret.Object["data"] = map[string]interface{}{api.PasswordKey: base64.StdEncoding.EncodeToString([]byte("users-choice"))}
		f := newFixture(t, nil, mc, secret)
		d, err := f.ctrl.auth(mc)
		if err != nil || d.Auth.Password != "users-choice" || d.Auth.PasswordHash != render.PasswordHash("users-choice") {
			t.Errorf("password %q (hash %s), %v; want the Secret's", d.Auth.Password, d.Auth.PasswordHash, err)
		}
		for _, w := range f.writes() {
			if strings.Contains(w, "secrets") {
				t.Errorf("wrote the Secret: %s", w)
			}
		}
	})
}

// Without cleanup work the controller never adds the finalizer, and removes one an older version
// added with a JSON patch (never a full update); with cleanup work it adds it by patch.
func TestFinalizerOnlyForRealWork(t *testing.T) {
	ctx := context.Background()
	legacy := newCache("legacy")
	legacy.SetFinalizers([]string{"example.com/other", api.Finalizer})
	f := newFixture(t, nil, legacy)
	out, err := f.ctrl.syncFinalizer(ctx, legacy)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.GetFinalizers(); len(got) != 1 || got[0] != "example.com/other" {
		t.Errorf("finalizers %v, want only the other one", got)
	}
	if w := strings.Join(f.writes(), ";"); w != "patch managedcaches application/json-patch+json" {
		t.Errorf("writes %q, want one JSON patch", w)
	}
	f.client.ClearActions()
	if _, err := f.ctrl.syncFinalizer(ctx, out); err != nil || len(f.writes()) != 0 {
		t.Errorf("second pass: writes %v, err %v; want none", f.writes(), err)
	}

	fresh := newCache("fresh")
	g := newFixture(t, []CleanupFunc{func(context.Context, *unstructured.Unstructured) error { return nil }}, fresh)
	out, err = g.ctrl.syncFinalizer(ctx, fresh)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.GetFinalizers(); len(got) != 1 || got[0] != api.Finalizer {
		t.Errorf("with cleanup work: finalizers %v", got)
	}
}

// On shutdown the workers take no more queued caches, so a backlog cannot hold the process (and
// the lease) past its grace period: only the reconciles in flight finish.
func TestShutdownLeavesTheBacklog(t *testing.T) {
	var objs []*unstructured.Unstructured
	for i := 0; i < 100; i++ {
		objs = append(objs, newCache(fmt.Sprintf("c%03d", i)))
	}
	f := newFixture(t, nil, objs...)
	// Every write takes a while, as on a loaded API server.
	f.client.PrependReactor("*", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if v := a.GetVerb(); v != "get" && v != "list" && v != "watch" {
			time.Sleep(20 * time.Millisecond)
		}
		return false, nil, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	returned := make(chan struct{})
	go func() { f.ctrl.RunWorkers(ctx); close(returned) }()
	deadline := time.Now().Add(10 * time.Second)
	for f.ctrl.Reconciles() < 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	atCancel := f.ctrl.Reconciles()
	if atCancel < 1 || f.ctrl.queue.Len() < 50 {
		t.Fatalf("setup: %d reconciles done, %d queued; want a backlog", atCancel, f.ctrl.queue.Len())
	}
	start := time.Now()
	cancel()
	select {
	case <-returned:
	case <-time.After(fixtureGrace):
		t.Fatalf("RunWorkers still running %v after shutdown began", fixtureGrace)
	}
	if after := f.ctrl.Reconciles() - atCancel; after > int64(fixtureWorkers) {
		t.Errorf("%d reconciles finished after shutdown began (in %v); want at most the %d in flight", after, time.Since(start), fixtureWorkers)
	}
}

// The informers hold only the operator's objects, and of their managedFields only the operator's
// own entry.
func TestInformersHoldOnlyOurObjects(t *testing.T) {
	mc := newCache("sessions")
	ours := child("v1", "Service", "sessions", mc)
	ours.SetLabels(api.StandardLabels("sessions"))
	ours.SetManagedFields([]metav1.ManagedFieldsEntry{
		{Manager: api.FieldManager, Operation: metav1.ManagedFieldsOperationApply, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{}}`)}},
		{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{}}`)}},
		{Manager: api.FieldManager, Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{}`)}},
	})
	foreign := child("v1", "Service", "web", nil)
	f := newFixture(t, nil, mc, ours, foreign)
	var svc *informers.Kind
	for i := range f.ctrl.informers.Children {
		if f.ctrl.informers.Children[i].GVK.Kind == "Service" {
			svc = &f.ctrl.informers.Children[i]
		}
	}
	keys := svc.Informer.GetStore().ListKeys()
	if len(keys) != 1 || keys[0] != "shop/sessions" {
		t.Errorf("Service informer holds %v; want only shop/sessions", keys)
	}
	live, err := f.ctrl.child(svc.GVK, "shop", "sessions")
	if err != nil || live == nil {
		t.Fatalf("child: %v %v", live, err)
	}
	if mf := live.GetManagedFields(); len(mf) != 1 || mf[0].Manager != api.FieldManager || mf[0].Subresource != "" {
		t.Errorf("managedFields kept %+v; want the operator's main entry only", mf)
	}
}

// A reconcile that creates a cache's children reports them in one Event, not one per child; a
// reconcile that changes nothing reports nothing.
func TestOneEventPerReconcile(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, nil, newCache("sessions"))
	if err := f.ctrl.reconcile(ctx, "shop/sessions"); err != nil {
		t.Logf("reconcile: %v", err)
	}
	events := strings.Split(strings.TrimSpace(drain(f.recorder)), "\n")
	if len(events) != 1 || !strings.HasPrefix(events[0], "Normal Created Created Secret/sessions-auth, ") ||
		!strings.Contains(events[0], "StatefulSet/sessions") || !strings.Contains(events[0], "Service/sessions-rw") {
		t.Errorf("events %q, want one Created event naming every child", events)
	}
	ch := changes{created: []string{"Secret/a"}, updated: []string{"StatefulSet/a (.spec.replicas: differs)"}}
	rec := record.NewFakeRecorder(10)
	ch.record(rec, newCache("a"))
	changes{}.record(rec, newCache("a"))
	if got := strings.TrimSpace(drain(rec)); got != "Normal Reconciled Created Secret/a; updated StatefulSet/a (.spec.replicas: differs)" {
		t.Errorf("events %q", got)
	}
	long := changes{updated: []string{strings.Repeat("x", 2*maxEventMessage)}}
	long.record(rec, newCache("a"))
	if got := strings.TrimSpace(drain(rec)); len(got) > maxEventMessage+len("Normal Updated ") || !strings.HasSuffix(got, "...") {
		t.Errorf("a long message is not cut: %d characters", len(got))
	}
}

// A reconcile that finds every child as its last verified pass found them (same cache inputs,
// same child versions) skips rendering and comparing, and only computes status; a change to a
// child's metadata, to the spec or to a label of the cache makes the next one compare again.
func TestVerifiedPassSkipsTheComparison(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, nil, newCache("sessions"))
	// waitInformers waits until the informers show what the fake API server holds.
	var waitInformers func(what string)
	reconcileAndWait := func(what string) {
		t.Helper()
		if err := f.ctrl.reconcile(ctx, "shop/sessions"); err != nil {
			t.Fatalf("%s: reconcile: %v", what, err)
		}
		waitInformers(what)
	}
	waitInformers = func(what string) {
		t.Helper()
		// The fake API server does not move resourceVersions, so compare the objects.
		same := func(inf cache.SharedIndexInformer, live *unstructured.Unstructured) bool {
			obj, ok, _ := inf.GetIndexer().GetByKey("shop/" + live.GetName())
			if !ok {
				return false
			}
			held, err := f.ctrl.informers.Packer.Unpack(obj)
			if err != nil {
				t.Fatal(err)
			}
			held.SetManagedFields(nil)
			live = live.DeepCopy()
			live.SetManagedFields(nil)
			return equality.Semantic.DeepEqual(held.Object, live.Object)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			behind := ""
			for _, k := range f.ctrl.informers.Children {
				list, err := f.client.Resource(k.GVR).Namespace("shop").List(ctx, metav1.ListOptions{})
				if err != nil {
					t.Fatal(err)
				}
				for i := range list.Items {
					if !same(k.Informer, &list.Items[i]) {
						behind = k.GVK.Kind + "/" + list.Items[i].GetName()
					}
				}
			}
			live, err := f.client.Resource(api.Resource).Namespace("shop").Get(ctx, "sessions", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !same(f.ctrl.informers.Caches, live) {
				behind = "the cache"
			}
			if behind == "" {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the informers never showed %s", what, behind)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	reconcileAndWait("create")
	reconcileAndWait("first comparison")
	if _, ok := f.ctrl.verified.get("shop/sessions"); !ok {
		t.Fatal("a reconcile that found every child as wanted recorded no verified pass")
	}
	f.client.ClearActions()
	before := f.ctrl.verifiedReconciles.Load()
	reconcileAndWait("nothing changed")
	if got := f.ctrl.verifiedReconciles.Load() - before; got != 1 {
		t.Errorf("a reconcile with nothing changed went by the verified pass %d times, want 1", got)
	}
	if w := f.writes(); len(w) != 0 {
		t.Errorf("a verified reconcile wrote %v", w)
	}

	for _, tc := range []struct {
		name   string
		change func() error
	}{
		{"a child's label", func() error {
			svc, err := f.client.Resource(schema.GroupVersionResource{Version: "v1", Resource: "services"}).Namespace("shop").Get(ctx, "sessions-rw", metav1.GetOptions{})
			if err != nil {
				return err
			}
			l := svc.GetLabels()
			l[api.LabelInstance] = "someone-else"
			svc.SetLabels(l)
			svc.SetResourceVersion(svc.GetResourceVersion() + "1")
			_, err = f.client.Resource(schema.GroupVersionResource{Version: "v1", Resource: "services"}).Namespace("shop").Update(ctx, svc, metav1.UpdateOptions{})
			return err
		}},
		{"the spec", func() error {
			mc, err := f.client.Resource(api.Resource).Namespace("shop").Get(ctx, "sessions", metav1.GetOptions{})
			if err != nil {
				return err
			}
			mc.SetGeneration(mc.GetGeneration() + 1)
			_ = unstructured.SetNestedField(mc.Object, int64(2), "spec", "replicas")
			mc.SetResourceVersion(mc.GetResourceVersion() + "1")
			_, err = f.client.Resource(api.Resource).Namespace("shop").Update(ctx, mc, metav1.UpdateOptions{})
			return err
		}},
		{"a label of the cache", func() error {
			mc, err := f.client.Resource(api.Resource).Namespace("shop").Get(ctx, "sessions", metav1.GetOptions{})
			if err != nil {
				return err
			}
			mc.SetLabels(map[string]string{"team": "checkout"})
			mc.SetResourceVersion(mc.GetResourceVersion() + "1")
			_, err = f.client.Resource(api.Resource).Namespace("shop").Update(ctx, mc, metav1.UpdateOptions{})
			return err
		}},
	} {
		if err := tc.change(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		waitInformers(tc.name)
		before := f.ctrl.verifiedReconciles.Load()
		reconcileAndWait(tc.name)
		if got := f.ctrl.verifiedReconciles.Load() - before; got != 0 {
			t.Errorf("%s changed: the reconcile went by the verified pass; want a comparison", tc.name)
		}
		reconcileAndWait(tc.name + ", compared again")
		before = f.ctrl.verifiedReconciles.Load()
		reconcileAndWait(tc.name + ", nothing changed since")
		if got := f.ctrl.verifiedReconciles.Load() - before; got != 1 {
			t.Errorf("after %s changed and was compared: %d reconciles went by the verified pass, want 1", tc.name, got)
		}
	}
	svc, err := f.client.Resource(schema.GroupVersionResource{Version: "v1", Resource: "services"}).Namespace("shop").Get(ctx, "sessions-rw", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := svc.GetLabels()[api.LabelInstance]; got != "sessions" {
		t.Errorf("the changed label was not restored: %q", got)
	}
}

// Progress waits for the pace (statusProgressInterval); a write the informer cache does not
// show yet is what the next reconcile starts from.
func TestStatusWritesArePaced(t *testing.T) {
	var w statusWrites
	now := time.Now()
	if d := w.wait("a", now); d != statusProgressInterval {
		t.Errorf("progress first seen now waits %v, want %v", d, statusProgressInterval)
	}
	if d := w.wait("a", now.Add(time.Second)); d != statusProgressInterval-time.Second {
		t.Errorf("progress first seen a second ago waits %v", d)
	}
	if d := w.wait("a", now.Add(statusProgressInterval)); d != 0 {
		t.Errorf("progress first seen an interval ago waits %v", d)
	}
	w.settled("a")
	if d := w.wait("a", now.Add(time.Minute)); d != statusProgressInterval {
		t.Errorf("progress seen anew after a settled status waits %v", d)
	}
	// A write the informer cache does not show yet is what the next reconcile starts from.
	written := func(rv, degraded string) *unstructured.Unstructured {
		o := newCache("a")
		o.SetResourceVersion(rv)
		o.Object["status"] = map[string]interface{}{"conditions": []interface{}{map[string]interface{}{"type": "Degraded", "status": degraded}}}
		return o
	}
	degradedOf := func(mc *unstructured.Unstructured) string {
		if cd := status.Condition(mc, "Degraded"); cd != nil {
			return string(cd.Status)
		}
		return ""
	}
	stale := written("10", "False")
	w.wrote("a", "10", written("11", "True"))
	if got := w.overlay("a", stale); got.GetResourceVersion() != "11" || degradedOf(got) != "True" {
		t.Errorf("the cache still shows resourceVersion 10, which our write replaced with 11: reconcile from %s with Degraded %s; want 11, True",
			got.GetResourceVersion(), degradedOf(got))
	}
	if degradedOf(stale) != "False" {
		t.Error("overlay changed the informer cache's object")
	}
	// A second write over the first, the cache still at 10.
	w.wrote("a", "11", written("12", "False"))
	if got := w.overlay("a", stale); got.GetResourceVersion() != "12" || degradedOf(got) != "False" {
		t.Errorf("after a second write while the cache shows 10: reconcile from %s with Degraded %s; want 12, False",
			got.GetResourceVersion(), degradedOf(got))
	}
	w.seen("a", "11") // an intermediate version: the last write is still to come
	if got := w.overlay("a", stale); got.GetResourceVersion() != "12" {
		t.Errorf("the informer showed an older write: reconcile from %s; want 12", got.GetResourceVersion())
	}
	w.seen("a", "12")
	if got := w.overlay("a", stale); got != stale {
		t.Error("the informer showed the last write: it is forgotten; want the cache's object")
	}
	w.wrote("a", "12", written("13", "True"))
	caughtUp := written("13", "True")
	if got := w.overlay("a", caughtUp); got != caughtUp {
		t.Error("the cache caught up: reconcile from a copy; want the cache's object")
	}
	if got := w.overlay("a", stale); got != stale {
		t.Error("once caught up the write is forgotten; an older copy is the cache's own")
	}
	later := now.Add(time.Minute)
	if d := w.wait("a", later); d != statusProgressInterval {
		t.Errorf("progress first seen after a write waits %v, want %v", d, statusProgressInterval)
	}
	if d := w.wait("a", later.Add(statusProgressInterval)); d != 0 {
		t.Errorf("progress first seen an interval ago waits %v", d)
	}
	w.forget("a")
	if d := w.wait("a", later.Add(time.Hour)); d != statusProgressInterval {
		t.Errorf("a forgotten cache's first progress waits %v, want %v", d, statusProgressInterval)
	}
}

// A child's update that changed only its status or managedFields starts no reconcile; any change
// of spec (generation) or of the metadata the drift check compares does.
func TestStatusOnlyUpdate(t *testing.T) {
	base := func() *metav1.ObjectMeta {
		return &metav1.ObjectMeta{Name: "sessions", Generation: 2, Labels: map[string]string{"a": "1"},
			Annotations: map[string]string{"b": "2"}, OwnerReferences: []metav1.OwnerReference{{Name: "sessions", UID: "u"}}}
	}
	if !statusOnlyUpdate(base(), base()) {
		t.Error("same generation and metadata: want status-only")
	}
	for name, change := range map[string]func(m *metav1.ObjectMeta){
		"generation":    func(m *metav1.ObjectMeta) { m.Generation++ },
		"label":         func(m *metav1.ObjectMeta) { m.Labels["a"] = "x" },
		"annotation":    func(m *metav1.ObjectMeta) { delete(m.Annotations, "b") },
		"owner":         func(m *metav1.ObjectMeta) { m.OwnerReferences = nil },
		"finalizer":     func(m *metav1.ObjectMeta) { m.Finalizers = []string{"f"} },
		"deletion":      func(m *metav1.ObjectMeta) { now := metav1.Now(); m.DeletionTimestamp = &now },
		"no generation": func(m *metav1.ObjectMeta) { m.Generation = 0 },
	} {
		cur := base()
		change(cur)
		old := base()
		if name == "no generation" {
			old.Generation = 0
		}
		if statusOnlyUpdate(old, cur) {
			t.Errorf("%s changed: want a reconcile", name)
		}
	}
}
