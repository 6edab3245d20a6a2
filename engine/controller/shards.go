package controller

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/informers"
)

var (
	pdbGVK    = schema.GroupVersionKind{Group: "policy", Version: "v1", Kind: "PodDisruptionBudget"}
	pdbGVR    = schema.GroupVersionResource{Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"}
	claimsGVR = informers.Claims
)

// shardSets returns how many shard StatefulSets a sharded cache keeps rendered: spec.shards, and
// every shard past it up to the last that still has a StatefulSet, a pod or a claim, until the
// member pass finds them empty (api.MembersView.RetiredEmpty: no slot served but by the shards
// below, no key held past them) judging this very spec.shards (a view from before a scale-in
// found nothing past the old count, and removed the shard it was to empty: seen on the real
// nodes), and api.RetireGrace has passed since the status recorded every slot placed
// (status.reshard.placed), for clients with an old map of the slots. A shard being emptied keeps
// its children whole meanwhile (a StatefulSet deleted by hand comes back with its claims, as any
// child does); removeDrainedShards removes the rest.
func (c *Controller) shardSets(mc *unstructured.Unstructured, spec api.Spec, view api.MembersView) int {
	keep := int(spec.Shards)
	if view.Observed && view.Shards == spec.Shards && view.RetiredEmpty {
		r := api.ReshardOf(mc)
		placed, err := time.Parse(time.RFC3339, func() string {
			if r == nil {
				return ""
			}
			return r.Placed
		}())
		switch {
		case r == nil:
			return keep // no reshard: nothing past spec.shards but leftovers with no slot
		case err == nil && time.Since(placed) >= api.RetireGrace:
			return keep
		case err == nil:
			c.queue.AddAfter(mc.GetNamespace()+"/"+mc.GetName(), api.RetireGrace-time.Since(placed)+100*time.Millisecond)
		}
	}
	ns, name := mc.GetNamespace(), mc.GetName()
	for i := keep; i < api.MaxShards; i++ {
		if sts, _ := c.child(informers.StatefulSet, ns, api.ShardSetName(name, i)); sts != nil {
			keep = i + 1
		}
	}
	for _, p := range c.informers.MemberPods(ns, name) {
		if shard, _, ok := api.ShardMemberOf(name, p.Name); ok && shard >= keep {
			keep = shard + 1
		}
	}
	for _, claim := range c.informers.CacheClaims(ns, name) {
		if shard, err := strconv.Atoi(claim.Labels[api.LabelShard]); err == nil && shard >= keep && shard < api.MaxShards {
			keep = shard + 1
		}
	}
	return keep
}

// removeDrainedShards deletes the children of the shards at keep and past it (empty: see
// shardSets): the StatefulSet and the disruption budget first, then, once no pod of the shard is
// left, its volume claims, which hold no key. The cluster then forgets the shard's nodes (the
// member pass's forget phase).
func (c *Controller) removeDrainedShards(ctx context.Context, mc *unstructured.Unstructured, keep int) error {
	ns, name := mc.GetNamespace(), mc.GetName()
	pods := map[int]int{}
	for _, p := range c.informers.MemberPods(ns, name) {
		if shard, _, ok := api.ShardMemberOf(name, p.Name); ok {
			pods[shard]++
		}
	}
	var errs []error
	for i := keep; i < api.MaxShards; i++ {
		set := api.ShardSetName(name, i)
		for _, k := range []struct {
			gvk schema.GroupVersionKind
			gvr schema.GroupVersionResource
		}{{informers.StatefulSet, informers.StatefulSets}, {pdbGVK, pdbGVR}} {
			obj, _ := c.child(k.gvk, ns, set)
			if obj == nil || !metav1.IsControlledBy(obj, mc) {
				continue
			}
			uid := obj.GetUID()
			err := c.client.Resource(k.gvr).Namespace(ns).Delete(ctx, set, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
			if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
				continue // gone already (the informer has not seen it yet), or made anew
			}
			if err != nil {
				errs = append(errs, err)
				continue
			}
			klog.FromContext(ctx).Info("Removed a drained shard's child", "kind", k.gvk.Kind, "name", set)
			if k.gvk == informers.StatefulSet {
				c.recorder.Eventf(mc, corev1.EventTypeNormal, api.EventShardRemoved,
					"Shard %d serves no slot and holds no key: its StatefulSet %s and disruption budget are deleted, its claims follow once its pods are gone", i, set)
			}
		}
		for _, claim := range c.informers.CacheClaims(ns, name) {
			if claim.Labels[api.LabelShard] != strconv.Itoa(i) || claim.DeletionTimestamp != nil {
				continue
			}
			if sts, _ := c.child(informers.StatefulSet, ns, set); sts != nil || pods[i] > 0 {
				// Its pods are still stopping (no event of theirs reaches this loop): look again.
				c.queue.AddAfter(ns+"/"+name, 2*time.Second)
				break
			}
			uid := claim.UID
			err := c.client.Resource(claimsGVR).Namespace(ns).Delete(ctx, claim.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
			if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
				continue
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("deleting the claim %s of the removed shard %d: %w", claim.Name, i, err))
				continue
			}
			klog.FromContext(ctx).Info("Deleted a removed shard's volume claim", "claim", claim.Name)
		}
	}
	return errors.Join(errs...)
}
