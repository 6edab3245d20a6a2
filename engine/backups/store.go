package backups

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/minio/minio-go/v7"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/objectstore"
)

// storeClient reads the store's Secret and returns the store and a client of it. The last store read
// for each Secret is remembered (see cacheState.store).
func (c *Controller) storeClient(ctx context.Context, namespace, secret string) (objectstore.Store, *minio.Client, error) {
	store, err := c.storeOf(ctx, namespace, secret)
	if err != nil {
		return store, nil, err
	}
	cl, err := store.Client()
	if err != nil {
		return store, nil, fmt.Errorf("Secret %s/%s: %w", namespace, secret, err)
	}
	return store, cl, nil
}

func (c *Controller) storeOf(ctx context.Context, namespace, secret string) (objectstore.Store, error) {
	store, _, err := c.storeSecret(ctx, namespace, secret)
	return store, err
}

// storeSecret reads the store's Secret: the store, and the Secret itself.
func (c *Controller) storeSecret(ctx context.Context, namespace, secret string) (objectstore.Store, *corev1.Secret, error) {
	sec, err := c.kube.CoreV1().Secrets(namespace).Get(ctx, secret, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return objectstore.Store{}, nil, fmt.Errorf("Secret %s/%s (the backup store) does not exist", namespace, secret)
	}
	if err != nil {
		return objectstore.Store{}, nil, fmt.Errorf("reading Secret %s/%s: %w", namespace, secret, err)
	}
	store, err := objectstore.FromSecret(sec.Data)
	if err != nil {
		return store, sec, fmt.Errorf("Secret %s/%s: %w", namespace, secret, err)
	}
	c.mu.Lock()
	c.stores[namespace+"/"+secret] = store
	c.mu.Unlock()
	return store, sec, nil
}

// rememberedStore is the store last read from that Secret, if any.
func (c *Controller) rememberedStore(namespace, secret string) (objectstore.Store, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.stores[namespace+"/"+secret]
	return s, ok
}

// StoreFinalizer is set on a store's Secret (with the label LabelHeldStore) while a cache that
// deletes its backups with it (spec.backup.onDelete: Delete) uses it: deleting the namespace, or
// the Secret, then waits until those caches' backups are deleted from the bucket, which needs it.
const (
	StoreFinalizer = "cache.example.com/backup-store"
	LabelHeldStore = "cache.example.com/backup-store"
)

// holdStore sets StoreFinalizer and LabelHeldStore on the Secret if it lacks them (a merge patch
// over the version read: a concurrent change of its finalizers is retried, never overwritten).
func (c *Controller) holdStore(ctx context.Context, sec *corev1.Secret) error {
	if hasFinalizer(sec) {
		return nil
	}
	return c.patchStore(ctx, sec, append(append([]string{}, sec.Finalizers...), StoreFinalizer), "true")
}

func hasFinalizer(sec *corev1.Secret) bool {
	for _, f := range sec.Finalizers {
		if f == StoreFinalizer {
			return true
		}
	}
	return false
}

func (c *Controller) patchStore(ctx context.Context, sec *corev1.Secret, finalizers []string, label interface{}) error {
	if finalizers == nil {
		finalizers = []string{}
	}
	patch, err := json.Marshal(map[string]interface{}{"metadata": map[string]interface{}{
		"resourceVersion": sec.ResourceVersion, "finalizers": finalizers, "labels": map[string]interface{}{LabelHeldStore: label}}})
	if err != nil {
		return err
	}
	if _, err := c.kube.CoreV1().Secrets(sec.Namespace).Patch(ctx, sec.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: api.FieldManager}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("Secret %s/%s: the finalizer %s: %w", sec.Namespace, sec.Name, StoreFinalizer, err)
	}
	return nil
}

// releaseStores removes StoreFinalizer from every Secret of the namespace that holds it and that
// no cache other than except deletes its backups through any more.
func (c *Controller) releaseStores(ctx context.Context, namespace, except string) error {
	needed := map[string]bool{}
	for _, obj := range c.caches.Caches.GetIndexer().List() {
		key, _ := cache.MetaNamespaceKeyFunc(obj)
		if !strings.HasPrefix(key, namespace+"/") || key == namespace+"/"+except {
			continue
		}
		mc, ok, err := c.caches.Cache(key)
		if err != nil || !ok {
			continue
		}
		spec, err := api.SpecFrom(mc)
		if err != nil || spec.Backup == nil || spec.Backup.OnDelete != api.BackupDelete {
			continue
		}
		if mc.GetDeletionTimestamp() != nil {
			// Being deleted: it needs the Secret only while it still waits for its cleanup.
			if waiting, err := c.awaitsCleanup(ctx, namespace, mc.GetName()); err != nil || !waiting {
				if err != nil {
					return err
				}
				continue
			}
		}
		needed[spec.Backup.StoreSecret] = true
	}
	held, err := c.kube.CoreV1().Secrets(namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelHeldStore})
	if err != nil {
		return fmt.Errorf("listing the held store Secrets of %s: %w", namespace, err)
	}
	for i := range held.Items {
		sec := &held.Items[i]
		if needed[sec.Name] {
			continue
		}
		var rest []string
		for _, f := range sec.Finalizers {
			if f != StoreFinalizer {
				rest = append(rest, f)
			}
		}
		if err := c.patchStore(ctx, sec, rest, nil); err != nil {
			return err
		}
		klog.FromContext(ctx).Info("Released a store's Secret: no cache deletes its backups through it any more", "secret", klog.KObj(sec))
	}
	return nil
}

// awaitsCleanup reads the cache live (the informer may not show yet that it is gone, or that
// someone released it with the escape hatch): it still exists with the operator's finalizer.
func (c *Controller) awaitsCleanup(ctx context.Context, namespace, name string) (bool, error) {
	live, err := c.client.Resource(api.Resource).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, f := range live.GetFinalizers() {
		if f == api.Finalizer {
			return true, nil
		}
	}
	return false, nil
}
