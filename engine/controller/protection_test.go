package controller

import (
	"context"
	"sync"
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

// A cache that is gone is forgotten by one call: the reconcile of a deleted cache forgets it in
// the work loop, whose hooks drop what the controller remembers of it (the refused password, the
// restore outcome, the kept and last Secrets, the verified pass) and its members' view.
func TestDeletedCacheIsForgottenEverywhere(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	for _, key := range []string{"shop/gone", "shop/kept"} {
		f.ctrl.rejectedPasswords.Store(key, "hash")
		f.ctrl.restoreOutcomes.Store(key, "outcome")
		f.ctrl.keptSecrets.Store(key, "uid")
		f.ctrl.lastSecrets.Store(key, "secret")
		f.ctrl.verified.set(key, verifiedPass{})
	}
	// shop/gone is not in the informer: its reconcile finds it deleted.
	if err := f.ctrl.reconcile(ctx, "shop/gone"); err != nil {
		t.Fatal(err)
	}
	for name, m := range map[string]*sync.Map{"rejectedPasswords": &f.ctrl.rejectedPasswords, "restoreOutcomes": &f.ctrl.restoreOutcomes,
		"keptSecrets": &f.ctrl.keptSecrets, "lastSecrets": &f.ctrl.lastSecrets} {
		if _, ok := m.Load("shop/gone"); ok {
			t.Errorf("%s still holds the deleted cache", name)
		}
		if _, ok := m.Load("shop/kept"); !ok {
			t.Errorf("%s lost the other cache", name)
		}
	}
	if _, ok := f.ctrl.verified.get("shop/gone"); ok {
		t.Error("the verified pass of the deleted cache is still kept")
	}
	if _, ok := f.ctrl.verified.get("shop/kept"); !ok {
		t.Error("the other cache's verified pass was dropped")
	}
}
