// Package storage keeps a cache's volumes: owned by the cache, so that they go with it and never
// with a StatefulSet or a pod (claims.go), and grown on request (this file).
//
// A StatefulSet's volumeClaimTemplates are immutable, and its claims are not resized when the
// templates change. Growing a cache's storage therefore takes three steps, each safe to repeat:
//
//  1. expand every claim of the cache (the StorageClass must allow expansion);
//  2. replace the StatefulSet with the orphan cascade: its pods keep running, the new StatefulSet
//     (same pod template, so the same revision) adopts them, no pod restarts;
//  3. report the condition StorageResizing while a claim is still smaller than asked.
//
// A change the templates cannot take (shrinking, another StorageClass, a class that does not
// allow expansion) keeps the live templates in the applied StatefulSet, so that every other change
// (members, version, configuration) still lands, and is reported in StorageResizing and an Event.
package storage

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/record"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/informers"
	"example.com/cache-operator/engine/ssa"
)

var (
	pvcResource          = schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumeclaims"}
	storageClassResource = schema.GroupVersionResource{Group: "storage.k8s.io", Version: "v1", Resource: "storageclasses"}
)

// Outcome is what Prepare decided.
type Outcome struct {
	// Condition is the StorageResizing condition to show (nil: none).
	Condition *metav1.Condition
	// Replaced is true when the StatefulSet was just deleted (orphaning its pods) to be created
	// again with larger templates: skip it this pass.
	Replaced bool
	// RequeueAfter, when set, is when to look again: claims are not watched.
	RequeueAfter time.Duration
}

// Resizer grows caches' volumes through the API server.
type Resizer struct {
	Client   dynamic.Interface
	Recorder record.EventRecorder
}

// claimTemplate is the storage request and class of a volumeClaimTemplate.
type claimTemplate struct {
	name, class string
	size        resource.Quantity
}

func claimTemplates(sts *unstructured.Unstructured) ([]claimTemplate, error) {
	vcts, _, _ := unstructured.NestedSlice(sts.Object, "spec", "volumeClaimTemplates")
	out := make([]claimTemplate, 0, len(vcts))
	for _, v := range vcts {
		m, _ := v.(map[string]interface{})
		name, _, _ := unstructured.NestedString(m, "metadata", "name")
		class, _, _ := unstructured.NestedString(m, "spec", "storageClassName")
		size, _, _ := unstructured.NestedString(m, "spec", "resources", "requests", "storage")
		q, err := resource.ParseQuantity(size)
		if err != nil {
			return nil, ssa.Errorf(sts, "volumeClaimTemplates %s: storage %q: %w", name, size, err)
		}
		out = append(out, claimTemplate{name: name, class: class, size: q})
	}
	return out, nil
}

// keepLiveTemplates makes want's volumeClaimTemplates request what live's do, so that applying
// want changes nothing immutable.
func keepLiveTemplates(want, live *unstructured.Unstructured) error {
	liveT, err := claimTemplates(live)
	if err != nil {
		return err
	}
	vcts, _, _ := unstructured.NestedSlice(want.Object, "spec", "volumeClaimTemplates")
	for i, v := range vcts {
		m := v.(map[string]interface{})
		name, _, _ := unstructured.NestedString(m, "metadata", "name")
		for _, l := range liveT {
			if l.name != name {
				continue
			}
			if err := unstructured.SetNestedField(m, l.size.String(), "spec", "resources", "requests", "storage"); err != nil {
				return err
			}
			if l.class != "" {
				_ = unstructured.SetNestedField(m, l.class, "spec", "storageClassName")
			} else {
				unstructured.RemoveNestedField(m, "spec", "storageClassName")
			}
		}
		vcts[i] = m
	}
	return unstructured.SetNestedSlice(want.Object, vcts, "spec", "volumeClaimTemplates")
}

// Prepare compares the StatefulSet want with the live one's volume templates and grows the
// cache's volumes, replaces the StatefulSet, or keeps the live templates in want, as the package
// comment says. current is the cache's StorageResizing condition (nil: none). It makes API
// requests only when the templates differ or a resize is under way.
func (r *Resizer) Prepare(ctx context.Context, mc, want, live *unstructured.Unstructured, current *metav1.Condition) (Outcome, error) {
	if live == nil {
		return Outcome{}, nil
	}
	if live.GetDeletionTimestamp() != nil {
		// Being replaced: its deletion will enqueue the cache, which then creates the new one.
		// The resize goes on meanwhile: keep showing it.
		return Outcome{Replaced: true, Condition: current}, nil
	}
	wantT, err := claimTemplates(want)
	if err != nil {
		return Outcome{}, err
	}
	liveT, err := claimTemplates(live)
	if err != nil {
		return Outcome{}, err
	}
	grow := false
	for i := range wantT {
		if i >= len(liveT) || wantT[i].name != liveT[i].name || wantT[i].class != liveT[i].class {
			return r.refuse(mc, current, want, live, api.ReasonChangeImmutable,
				"the volume templates' names or StorageClass cannot change for existing members")
		}
		switch wantT[i].size.Cmp(liveT[i].size) {
		case -1:
			return r.refuse(mc, current, want, live, api.ReasonChangeImmutable,
				fmt.Sprintf("volumes cannot shrink from %s to %s", liveT[i].size.String(), wantT[i].size.String()))
		case 1:
			grow = true
		}
	}
	if !grow {
		return r.progress(ctx, mc, current, wantT)
	}
	allowed, class, err := r.expansionAllowed(ctx, liveT[0].class)
	if err != nil {
		return Outcome{}, err
	}
	if !allowed {
		return r.refuse(mc, current, want, live, api.ReasonExpansionNotAllowed,
			fmt.Sprintf("StorageClass %s does not allow volume expansion; the volumes stay at %s", class, liveT[0].size.String()))
	}
	claims, err := r.expandClaims(ctx, mc, wantT)
	if err != nil {
		return Outcome{}, err
	}
	// Replace the StatefulSet, orphaning its pods and claims; the precondition makes sure it is
	// the one we read.
	orphan := metav1.DeletePropagationOrphan
	uid := live.GetUID()
	if err := r.Client.Resource(informers.StatefulSets).Namespace(live.GetNamespace()).Delete(ctx, live.GetName(),
		metav1.DeleteOptions{PropagationPolicy: &orphan, Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil {
		return Outcome{}, ssa.Errorf(live, "replacing to grow its volume templates: %w", err)
	}
	r.Recorder.Eventf(mc, corev1.EventTypeNormal, api.EventStorageGrowing,
		"Expanding the volumes to %s and replacing %s without its pods (they keep running)", wantT[0].size.String(), ssa.ObjectID(live))
	return Outcome{Replaced: true, Condition: resizingCondition(mc, 0, claims, wantT[0].size)}, nil
}

func (r *Resizer) refuse(mc *unstructured.Unstructured, current *metav1.Condition, want, live *unstructured.Unstructured, reason, message string) (Outcome, error) {
	if err := keepLiveTemplates(want, live); err != nil {
		return Outcome{}, err
	}
	if cond := current; cond == nil || cond.Reason != reason || cond.Message != message {
		r.Recorder.Eventf(mc, corev1.EventTypeWarning, reason, "Storage change refused: %s", message)
	}
	return Outcome{Condition: &metav1.Condition{Type: api.ConditionStorageResizing, Status: metav1.ConditionFalse,
		Reason: reason, Message: message, ObservedGeneration: mc.GetGeneration()}}, nil
}

// expansionAllowed reads whether the StorageClass class (the default one when empty) allows
// volume expansion.
func (r *Resizer) expansionAllowed(ctx context.Context, class string) (bool, string, error) {
	if class == "" {
		list, err := r.Client.Resource(storageClassResource).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", fmt.Errorf("listing StorageClasses to find the default: %w", err)
		}
		for _, sc := range list.Items {
			if sc.GetAnnotations()["storageclass.kubernetes.io/is-default-class"] == "true" {
				allowed, _, _ := unstructured.NestedBool(sc.Object, "allowVolumeExpansion")
				return allowed, sc.GetName(), nil
			}
		}
		return false, "(default)", nil
	}
	sc, err := r.Client.Resource(storageClassResource).Get(ctx, class, metav1.GetOptions{})
	if err != nil {
		return false, class, fmt.Errorf("StorageClass/%s: %w", class, err)
	}
	allowed, _, _ := unstructured.NestedBool(sc.Object, "allowVolumeExpansion")
	return allowed, class, nil
}

// claims lists the cache's PersistentVolumeClaims (they carry its selector labels).
func (r *Resizer) claims(ctx context.Context, mc *unstructured.Unstructured) ([]unstructured.Unstructured, error) {
	list, err := r.Client.Resource(pvcResource).Namespace(mc.GetNamespace()).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(api.SelectorLabels(mc.GetName())).String()})
	if err != nil {
		return nil, ssa.Errorf(mc, "listing its PersistentVolumeClaims: %w", err)
	}
	return list.Items, nil
}

// expandClaims asks every claim of the cache that is smaller than its template for the new size.
// It returns how many claims the cache has.
func (r *Resizer) expandClaims(ctx context.Context, mc *unstructured.Unstructured, templates []claimTemplate) (int, error) {
	claims, err := r.claims(ctx, mc)
	if err != nil {
		return 0, err
	}
	total := 0
	for i := range claims {
		pvc := &claims[i]
		t, ok := templateOf(pvc, mc.GetName(), templates)
		if !ok {
			continue
		}
		total++
		cur, _, _ := unstructured.NestedString(pvc.Object, "spec", "resources", "requests", "storage")
		if q, err := resource.ParseQuantity(cur); err == nil && q.Cmp(t.size) >= 0 {
			continue
		}
		patch, _ := json.Marshal(map[string]interface{}{"spec": map[string]interface{}{"resources": map[string]interface{}{
			"requests": map[string]interface{}{"storage": t.size.String()}}}})
		if _, err := r.Client.Resource(pvcResource).Namespace(pvc.GetNamespace()).Patch(ctx, pvc.GetName(), types.MergePatchType, patch,
			metav1.PatchOptions{FieldManager: api.FieldManager}); err != nil {
			return 0, fmt.Errorf("PersistentVolumeClaim/%s/%s: expanding to %s: %w", pvc.GetNamespace(), pvc.GetName(), t.size.String(), err)
		}
	}
	return total, nil
}

// templateOf returns the template a claim was made from: <template>-<cache>-<ordinal>.
func templateOf(pvc *unstructured.Unstructured, cache string, templates []claimTemplate) (claimTemplate, bool) {
	for _, t := range templates {
		prefix := t.name + "-" + cache + "-"
		if len(pvc.GetName()) > len(prefix) && pvc.GetName()[:len(prefix)] == prefix {
			return t, true
		}
	}
	return claimTemplate{}, false
}

// resizeProgress reports StorageResizing while a claim of the cache is smaller than its template.
// It reads the claims only when the cache shows a resize under way.
func (r *Resizer) progress(ctx context.Context, mc *unstructured.Unstructured, current *metav1.Condition, templates []claimTemplate) (Outcome, error) {
	cond := current
	if cond == nil || cond.Reason != api.ReasonExpandingVolumes {
		return Outcome{}, nil
	}
	claims, err := r.claims(ctx, mc)
	if err != nil {
		return Outcome{}, err
	}
	done, total := 0, 0
	for i := range claims {
		t, ok := templateOf(&claims[i], mc.GetName(), templates)
		if !ok {
			continue
		}
		total++
		capacity, _, _ := unstructured.NestedString(claims[i].Object, "status", "capacity", "storage")
		if q, err := resource.ParseQuantity(capacity); err == nil && q.Cmp(t.size) >= 0 {
			done++
		}
	}
	if done == total {
		r.Recorder.Eventf(mc, corev1.EventTypeNormal, api.EventStorageGrown, "All %d volumes are %s", total, templates[0].size.String())
		return Outcome{}, nil
	}
	return Outcome{Condition: resizingCondition(mc, done, total, templates[0].size), RequeueAfter: resizePoll}, nil
}

// resizePoll is how often a cache is checked while its claims grow (claims are not watched).
const resizePoll = 2 * time.Second

func resizingCondition(mc *unstructured.Unstructured, done, total int, size resource.Quantity) *metav1.Condition {
	return &metav1.Condition{Type: api.ConditionStorageResizing, Status: metav1.ConditionTrue, Reason: api.ReasonExpandingVolumes,
		Message: fmt.Sprintf("%d/%d volumes expanded to %s", done, total, size.String()), ObservedGeneration: mc.GetGeneration()}
}
