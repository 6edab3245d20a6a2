package ssa

import (
	"context"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/csaupgrade"
)

// Outcome is what applying one child did.
type Outcome string

// Outcomes of applying a child.
const (
	Created    Outcome = "created"
	Configured Outcome = "configured"
	Unchanged  Outcome = "unchanged"
	Failed     Outcome = "failed"
)

// Applier writes children with server-side apply under one field manager, forcing ownership of
// the fields it sets.
type Applier struct {
	client  dynamic.Interface
	mapper  meta.RESTMapper
	manager string
}

// NewApplier returns an Applier that writes as field manager manager.
func NewApplier(client dynamic.Interface, mapper meta.RESTMapper, manager string) *Applier {
	return &Applier{client: client, mapper: mapper, manager: manager}
}

func (a *Applier) resource(obj *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvr, err := ResourceFor(a.mapper, obj.GroupVersionKind())
	if err != nil {
		return nil, Errorf(obj, "%w", err)
	}
	return a.client.Resource(gvr).Namespace(obj.GetNamespace()), nil
}

// Apply server-side applies obj. live, when given, is the current object (a cached copy will do):
// if this manager once created it with a plain create (an "Update" entry in managedFields), its
// fields are first moved to the apply entry, so that a field later dropped from a template really
// is removed. That move rewrites the whole managedFields list, so a cached live must then hold
// every manager's entries (a cache that trims them must keep them while this manager's Update
// entry is there).
func (a *Applier) Apply(ctx context.Context, obj, live *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	ri, err := a.resource(obj)
	if err != nil {
		return nil, err
	}
	if live != nil && hasUpdateEntry(live, a.manager) {
		rv, err := a.upgradeManagedFields(ctx, ri, obj, live)
		if err != nil {
			return nil, err
		}
		if obj.GetResourceVersion() != "" && obj.GetResourceVersion() == live.GetResourceVersion() && rv != "" {
			// obj is to be written only over the version it was made from. The upgrade wrote
			// over that very version (rv is its result, not a later one), so nothing else came
			// between: the apply follows the upgrade.
			obj = obj.DeepCopy()
			obj.SetResourceVersion(rv)
		}
	}
	out, err := ri.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: a.manager, Force: true})
	if err != nil {
		return nil, Errorf(obj, "%w", err)
	}
	return out, nil
}

// upgradeManagedFields moves the fields this manager owns through an update (a plain create) to
// its apply entry. The patch replaces the whole managedFields list, guarded by the
// resourceVersion: it is computed first from cur (the caller's copy, often an informer's, which
// costs no read) and, if that copy was behind (a conflict), from the object as the API server has
// it now. It returns the resourceVersion its patch made when that patch was computed from cur
// as given ("" otherwise: the object had changed since cur, or needed no upgrade).
func (a *Applier) upgradeManagedFields(ctx context.Context, ri dynamic.ResourceInterface, obj, cur *unstructured.Unstructured) (string, error) {
	var err error
	var out *unstructured.Unstructured
	for attempt := 0; attempt < 5; attempt++ {
		if attempt > 0 {
			if cur, err = ri.Get(ctx, obj.GetName(), metav1.GetOptions{}); err != nil {
				return "", Errorf(obj, "upgrading managed fields: %w", err)
			}
		}
		patch, perr := csaupgrade.UpgradeManagedFieldsPatch(cur, sets.New(a.manager), a.manager)
		if perr != nil {
			return "", Errorf(obj, "upgrading managed fields: %w", perr)
		}
		if patch == nil {
			return "", nil
		}
		out, err = ri.Patch(ctx, obj.GetName(), types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: a.manager})
		if err == nil && attempt == 0 {
			return out.GetResourceVersion(), nil
		}
		if !apierrors.IsConflict(err) {
			break
		}
	}
	if err != nil {
		return "", Errorf(obj, "upgrading managed fields: %w", err)
	}
	return "", nil
}

// Create creates obj, failing if it exists: for an object whose content must be written exactly
// once (a generated password) even when the caller's cache is behind.
func (a *Applier) Create(ctx context.Context, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	ri, err := a.resource(obj)
	if err != nil {
		return nil, err
	}
	out, err := ri.Create(ctx, obj, metav1.CreateOptions{FieldManager: a.manager})
	if err != nil {
		return nil, Errorf(obj, "%w", err)
	}
	return out, nil
}

// Get reads obj from the API server, bypassing any cache (for error paths).
func (a *Applier) Get(ctx context.Context, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	ri, err := a.resource(obj)
	if err != nil {
		return nil, err
	}
	out, err := ri.Get(ctx, obj.GetName(), metav1.GetOptions{})
	if err != nil {
		return nil, Errorf(obj, "%w", err)
	}
	return out, nil
}

// IsPermanent reports whether an apply error will not go away by retrying the same request: the
// object is invalid, or an immutable field would change. Such errors become a condition and an
// Event; the cache is retried when it or a child changes, not in a hot loop.
func IsPermanent(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) ||
		(apierrors.IsForbidden(err) && strings.Contains(err.Error(), "Forbidden: updates to"))
}
