package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/ssa"
)

// MigrateStorage moves every ManagedCache that the API server still stores in an older version
// to the storage version, then records in the CRD's status that only the storage version is
// stored, as kube-storage-version-migrator does. Until then, reading such an object in v2 needs
// the conversion webhook.
//
// Each cache is rewritten with an update of itself as read: the API server re-encodes it in the
// storage version, and writes only if the stored bytes change, so a cache already stored in v2
// keeps its resourceVersion. A cache that changed meanwhile was written by that change, in the
// storage version, and is skipped. It does nothing once the CRD's storedVersions is the storage
// version alone.
func (c *Controller) MigrateStorage(ctx context.Context) error {
	crd, err := c.client.Resource(api.CRDResource).Get(ctx, api.CRDName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("CustomResourceDefinition/%s: reading stored versions: %w", api.CRDName, err)
	}
	stored, _, _ := unstructured.NestedStringSlice(crd.Object, "status", "storedVersions")
	if slices.Equal(stored, []string{api.GroupVersion.Version}) {
		return nil
	}
	logger := klog.FromContext(ctx)
	logger.Info("Migrating ManagedCaches to the storage version", "storedVersions", stored, "to", api.GroupVersion.Version)
	migrated := 0
	for _, key := range c.informers.Caches.GetStore().ListKeys() {
		mc, exists, err := c.informers.Cache(key)
		if err != nil {
			return err
		}
		if !exists {
			continue
		}
		out, err := c.client.Resource(api.Resource).Namespace(mc.GetNamespace()).Update(ctx, mc, metav1.UpdateOptions{FieldManager: api.FieldManager})
		switch {
		case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
			continue
		case err != nil:
			return ssa.Errorf(mc, "migrating to the storage version: %w", err)
		}
		if out.GetResourceVersion() != mc.GetResourceVersion() {
			migrated++
		}
	}
	patch, err := json.Marshal(map[string]interface{}{"status": map[string]interface{}{"storedVersions": []string{api.GroupVersion.Version}}})
	if err != nil {
		return err
	}
	if _, err := c.client.Resource(api.CRDResource).Patch(ctx, api.CRDName, types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: api.FieldManager}, "status"); err != nil {
		return fmt.Errorf("CustomResourceDefinition/%s: recording stored versions: %w", api.CRDName, err)
	}
	logger.Info("Migrated ManagedCaches to the storage version", "rewritten", migrated, "of", len(c.informers.Caches.GetStore().List()))
	return nil
}
