package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/informers"
	"example.com/cache-operator/engine/ssa"
	"example.com/cache-operator/engine/storage"
)

var secretsResource = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}

// What a `kubectl delete` of a child must never cost: the data on the members' volumes, and the
// passwords in force (the clients' and the operator's own hold on its members).
//
//   - The claims carry an owner reference to the cache (ownClaims; package storage), so the
//     garbage collector deletes them with the cache and never with a StatefulSet or a pod.
//   - The password Secret carries api.SecretFinalizer (templates/secret.yaml): deleted while the
//     cache lives, it stays (Terminating) with its passwords, which stay in force, and the cache
//     says so (api.EventCredentialsKept, once per deletion). The finalizer is removed when the cache
//     is deleted (releaseSecret), also by an operator that was not running then.
//   - Should the Secret go all the same (its finalizer removed by hand) while this process runs,
//     the last copy the informer held is written back (lastSecrets): the same passwords.

// ownClaims gives every claim of the cache its owner reference (storage.ClaimsToOwn); it makes
// requests only for the claims that lack it. A claim made anew meanwhile is left to its own event.
func (c *Controller) ownClaims(ctx context.Context, mc *unstructured.Unstructured) error {
	todo := storage.ClaimsToOwn(mc, c.informers.CacheClaims(mc.GetNamespace(), mc.GetName()))
	if len(todo) == 0 {
		return nil
	}
	r := storage.Resizer{Client: c.client, Recorder: c.recorder}
	var errs error
	var owned []string
	for _, claim := range todo {
		if err := r.OwnClaim(ctx, mc, claim); err != nil {
			if !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				errs = errors.Join(errs, err)
			}
			continue
		}
		owned = append(owned, claim.Name)
	}
	if len(owned) > 0 {
		klog.FromContext(ctx).Info("Volume claims owned by the cache", "claims", owned)
		c.recorder.Eventf(mc, corev1.EventTypeNormal, api.EventClaimOwned,
			"%v now belong to the cache: deleted with it, never with its StatefulSet or pods", owned)
	}
	return errs
}

// claimChanged routes a claim's event to its cache.
func (c *Controller) claimChanged(obj interface{}) {
	if key, ok := informers.PodCache(obj); ok {
		c.queue.Add(key)
	}
}

// releaseSecret removes api.SecretFinalizer from the password Secret of the cache ns/name, which
// is gone (uid empty) or being deleted (uid its UID): the Secret then goes with it. A Secret
// that belongs to another cache of that name (made anew) keeps it.
func (c *Controller) releaseSecret(ctx context.Context, ns, name string, uid types.UID) error {
	secret, err := c.child(informers.Secret, ns, api.SecretName(name))
	if err != nil || secret == nil {
		return err
	}
	i := -1
	for j, f := range secret.GetFinalizers() {
		if f == api.SecretFinalizer {
			i = j
		}
	}
	if i < 0 {
		return nil
	}
	if ref := metav1.GetControllerOfNoCopy(secret); ref != nil && uid != "" && ref.UID != uid {
		return nil
	}
	at := fmt.Sprintf("/metadata/finalizers/%d", i)
	patch, err := json.Marshal([]jsonPatchOp{{Op: "test", Path: at, Value: api.SecretFinalizer}, {Op: "remove", Path: at}})
	if err != nil {
		return err
	}
	_, err = c.client.Resource(secretsResource).Namespace(ns).Patch(ctx, secret.GetName(), types.JSONPatchType, patch,
		metav1.PatchOptions{FieldManager: api.FieldManager})
	if apierrors.IsNotFound(err) {
		return nil // gone
	}
	if apierrors.IsInvalid(err) {
		// The finalizers changed since the informer's copy (the test failed): its event brings
		// the cache back.
		klog.FromContext(ctx).Info("Password Secret's finalizers changed meanwhile; releasing it again on its next event", "secret", klog.KObj(secret), "err", err.Error())
		return nil
	}
	if err != nil {
		return ssa.Errorf(secret, "releasing the password Secret: %w", err)
	}
	{
		klog.FromContext(ctx).Info("Password Secret released: it goes with the cache", "secret", klog.KObj(secret))
	}
	return nil
}

// secretKept reports, once per deletion, a password Secret deleted while the cache uses it.
func (c *Controller) secretKept(mc, secret *unstructured.Unstructured) {
	if secret == nil || secret.GetDeletionTimestamp() == nil {
		return
	}
	key := mc.GetNamespace() + "/" + mc.GetName()
	if prev, _ := c.keptSecrets.Swap(key, secret.GetUID()); prev == secret.GetUID() {
		return
	}
	klog.InfoS("Password Secret deleted while the cache uses it; kept", "managedcache", klog.KObj(mc), "secret", klog.KObj(secret))
	c.recorder.Eventf(mc, corev1.EventTypeWarning, api.EventCredentialsKept,
		"Secret %s was deleted while the cache uses it: it is kept (finalizer %s) with its passwords in force, and goes with the cache. To change the passwords, annotate the cache with %s or %s",
		secret.GetName(), api.SecretFinalizer, api.RotatePasswordAnnotation, api.RotateInternalPasswordAnnotation)
}

// secretDeleted keeps the last copy of a cache's password Secret that left the informer, for
// lastSecret.
func (c *Controller) secretDeleted(obj interface{}) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	o, ok := obj.(metav1.Object)
	if !ok {
		return
	}
	inst := o.GetLabels()[api.LabelInstance]
	ref := metav1.GetControllerOfNoCopy(o)
	if inst == "" || ref == nil || o.GetName() != api.SecretName(inst) {
		return
	}
	secret, err := c.informers.Packer.Unpack(obj)
	if err != nil {
		return
	}
	c.lastSecrets.Store(o.GetNamespace()+"/"+inst, secret)
}

// lastSecret returns the last copy of mc's password Secret that left the informer, if it was
// mc's: its credentials are the ones in force.
func (c *Controller) lastSecret(mc *unstructured.Unstructured) *unstructured.Unstructured {
	v, ok := c.lastSecrets.Load(mc.GetNamespace() + "/" + mc.GetName())
	if !ok {
		return nil
	}
	secret := v.(*unstructured.Unstructured)
	if ref := metav1.GetControllerOfNoCopy(secret); ref == nil || ref.UID != mc.GetUID() {
		return nil
	}
	return secret
}

// forgetProtections drops what the protections remember of a deleted cache.
func (c *Controller) forgetProtections(key string) {
	c.keptSecrets.Delete(key)
	c.lastSecrets.Delete(key)
}
