package controller

import (
	"context"
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"example.com/cache-operator/engine/api"
)

// Children that the create finds already there: someone else's, or ours before the informer
// shows it.

// A child that exists and is controlled by something else is not touched: the cache reports it
// in its status and an Event.
func TestChildOwnedByOtherIsNotAdopted(t *testing.T) {
	mc := newCache("sessions")
	svc := child("v1", "Service", "sessions", nil)
	svc.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "x", Controller: ptr.To(true)}})
	f := newFixture(t, nil, mc, svc)
	if err := f.ctrl.reconcile(context.Background(), "shop/sessions"); err != nil {
		t.Logf("reconcile: %v", err)
	}
	// The informers do not show it (it lacks the operator's labels): the create finds it, and
	// nothing else is sent.
	for _, w := range f.writes() {
		if strings.Contains(w, "services") && w != "create services" {
			t.Errorf("wrote the Service it does not own: %s", w)
		}
	}
	got, err := f.client.Resource(schema.GroupVersionResource{Version: "v1", Resource: "services"}).Namespace("shop").Get(context.Background(), "sessions", metav1.GetOptions{})
	if err != nil || got.GetOwnerReferences()[0].Name != "web" || len(got.GetLabels()) != 0 {
		t.Errorf("the foreign Service changed: %v %v", got, err)
	}
	live, _ := f.client.Resource(api.Resource).Namespace("shop").Get(context.Background(), "sessions", metav1.GetOptions{})
	st := api.StatusOf(live)
	if c := meta.FindStatusCondition(st.Conditions, api.ConditionReady); c == nil || c.Reason != "ServiceFailed" ||
		!strings.Contains(c.Message, "Service/shop/sessions exists and is controlled by Deployment web") {
		t.Errorf("Ready condition %+v, want ServiceFailed naming the Deployment", c)
	}
	if !strings.Contains(drain(f.recorder), "ServiceFailed") {
		t.Error("no ServiceFailed Event")
	}
}

// A child that exists with the operator's labels but that the informer does not show yet (just
// created, seen in a leader handover) is retried quietly: no Warning Event, no failed condition.
func TestChildTheInformerHasNotSeenIsRetriedQuietly(t *testing.T) {
	mc := newCache("sessions")
	f := newFixture(t, nil, mc)
	services := schema.GroupVersionResource{Version: "v1", Resource: "services"}
	f.client.PrependReactor("create", "services", func(a clienttesting.Action) (bool, runtime.Object, error) {
		name := a.(clienttesting.CreateAction).GetObject().(*unstructured.Unstructured).GetName()
		return true, nil, apierrors.NewAlreadyExists(services.GroupResource(), name)
	})
	f.client.PrependReactor("get", "services", func(a clienttesting.Action) (bool, runtime.Object, error) {
		svc := child("v1", "Service", a.(clienttesting.GetAction).GetName(), mc)
		svc.SetLabels(api.StandardLabels("sessions"))
		return true, svc, nil
	})
	err := f.ctrl.reconcile(context.Background(), "shop/sessions")
	if err == nil || !errors.Is(err, errStaleCache) {
		t.Errorf("reconcile: %v; want a retry for the cache that is behind", err)
	}
	if ev := drain(f.recorder); strings.Contains(ev, "Warning") {
		t.Errorf("Events %q; want no Warning for a cache that is behind", ev)
	}
	live, _ := f.client.Resource(api.Resource).Namespace("shop").Get(context.Background(), "sessions", metav1.GetOptions{})
	if c := meta.FindStatusCondition(api.StatusOf(live).Conditions, api.ConditionReady); c != nil && strings.HasSuffix(c.Reason, "Failed") {
		t.Errorf("Ready condition %+v; want no failure for a cache that is behind", c)
	}
}
