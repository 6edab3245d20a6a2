package controller

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"example.com/cache-operator/engine/api"
)

// A cache's password Secret keeps its finalizer while the cache lives, and loses it (one JSON patch
// that tests the entry) once the cache is gone or being deleted; another finalizer stays.
func TestPasswordSecretReleasedWithTheCache(t *testing.T) {
	ctx := context.Background()
	secrets := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	for _, tc := range []struct {
		name     string
		deleting bool
	}{{"cache gone", false}, {"cache being deleted", true}} {
		t.Run(tc.name, func(t *testing.T) {
			mc := newCache("sessions")
			secret := child("v1", "Secret", "sessions-auth", mc)
			secret.SetLabels(api.StandardLabels("sessions"))
			secret.SetFinalizers([]string{"example.com/other", api.SecretFinalizer})
			objs := []*unstructured.Unstructured{secret}
			if tc.deleting {
				now := metav1.Now()
				mc.SetDeletionTimestamp(&now)
				mc.SetFinalizers([]string{"example.com/keep"})
				objs = append(objs, mc)
			}
			f := newFixture(t, nil, objs...)
			if err := f.ctrl.reconcile(ctx, "shop/sessions"); err != nil {
				t.Fatal(err)
			}
			got, err := f.client.Resource(secrets).Namespace("shop").Get(ctx, "sessions-auth", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if fin := got.GetFinalizers(); len(fin) != 1 || fin[0] != "example.com/other" {
				t.Errorf("finalizers %v; want only the other one", fin)
			}
		})
	}
	t.Run("cache alive: kept", func(t *testing.T) {
		mc := newCache("sessions")
		secret := child("v1", "Secret", "sessions-auth", mc)
		secret.SetLabels(api.StandardLabels("sessions"))
		secret.SetFinalizers([]string{api.SecretFinalizer})
		f := newFixture(t, nil, mc, secret)
		if err := f.ctrl.releaseSecret(ctx, "shop", "sessions", "another-uid"); err != nil {
			t.Fatal(err)
		}
		got, err := f.client.Resource(secrets).Namespace("shop").Get(ctx, "sessions-auth", metav1.GetOptions{})
		if err != nil || len(got.GetFinalizers()) != 1 {
			t.Errorf("a Secret controlled by another cache of that name: finalizers %v (%v); want kept", got.GetFinalizers(), err)
		}
	})
}
