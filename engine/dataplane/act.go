package dataplane

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/credentials"
	"example.com/cache-operator/engine/informers"
	"example.com/cache-operator/engine/member"
	"example.com/cache-operator/engine/metrics"
	"example.com/cache-operator/engine/roles"
)

// act carries out a decision. It reports whether it changed anything.
func (c *Controller) act(ctx context.Context, mc *unstructured.Unstructured, members []roles.Member, act roles.Action, mem *roleMemory, cred credentials.Credentials) (bool, error) {
	byName := map[string]roles.Member{}
	for _, m := range members {
		byName[m.Name] = m
	}
	client := func(m roles.Member) *redis.Client { return c.memberClient(m.IP, cred) }
	logger := klog.FromContext(ctx)

	if act.SwitchTo != "" {
		return true, c.switchover(ctx, mc, byName[act.From], byName[act.SwitchTo], members, client)
	}
	acted := false
	// Fence first: every member labelled primary that is not to be the primary loses the label
	// before anyone is promoted, so the read-write Service never reaches two primaries.
	for _, name := range slices.Sorted(maps.Keys(act.Labels)) {
		if act.Labels[name] == api.RoleReplica {
			if err := c.setRole(ctx, mc.GetNamespace(), byName[name], api.RoleReplica); err != nil {
				return acted, err
			}
			acted = true
		}
	}
	p := byName[act.Primary]
	if act.Promote {
		start := mem.unhealthySince
		if act.From != "" {
			if act.From == act.Primary {
				c.recorder.Eventf(mc, corev1.EventTypeWarning, "FailoverStarted",
					"Primary %s restarted and no other member can take over; promoting it again", act.From)
			} else {
				c.recorder.Eventf(mc, corev1.EventTypeWarning, "FailoverStarted",
					"Primary %s is gone; promoting %s (the member with the most data), losing %d bytes of replication lag", act.From, act.Primary, act.LostBytes)
			}
			logger.Info("Failover", "from", act.From, "to", act.Primary, "lostBytes", act.LostBytes)
			// A former primary that still answers as master is paused before the promotion: the
			// writes it would take through old connections could not reach the new primary.
			if old, ok := byName[act.From]; ok && old.IsPrimary() {
				if err := member.PauseWrites(ctx, client(old), 10*time.Second); err != nil {
					logger.Info("Could not pause the old primary", "member", old.Name, "err", err)
				}
			}
		} else {
			logger.Info("Electing a primary", "member", act.Primary, "keys", p.Repl.Keys, "offset", p.Repl.Offset)
		}
		if err := member.Promote(ctx, client(p)); err != nil {
			return acted, err
		}
		acted = true
		if act.From != "" {
			metrics.Failover("failover", time.Since(start))
			defer func() {
				c.recorder.Eventf(mc, corev1.EventTypeNormal, "FailoverCompleted",
					"%s is the primary instead of %s, %.1fs after the primary was first seen gone; %d bytes of lag lost",
					act.Primary, act.From, time.Since(start).Seconds(), act.LostBytes)
			}()
		}
	}
	if l, ok := act.Labels[act.Primary]; ok && l == api.RolePrimary {
		if err := c.setRole(ctx, mc.GetNamespace(), p, api.RolePrimary); err != nil {
			return acted, err
		}
		acted = true
	}
	for _, name := range act.Follow {
		m := byName[name]
		if err := member.Follow(ctx, client(m), p.IP, api.Port); err != nil {
			logger.Info("Could not point a member at the primary; retrying", "member", name, "err", err)
			continue
		}
		acted = true
	}
	if act.Delete != "" {
		m := byName[act.Delete]
		logger.Info("Restarting a member on the new revision", "member", m.Name)
		if err := c.deletePod(ctx, mc.GetNamespace(), m); err != nil {
			return acted, err
		}
		acted = true
	}
	return acted, nil
}

// switchover hands the primary role from a live primary to target: the old primary leaves the
// read-write Service, then FAILOVER TO pauses its writes until target has all of them and swaps
// the roles; then target joins the Service and the others follow it.
func (c *Controller) switchover(ctx context.Context, mc *unstructured.Unstructured, from, to roles.Member, members []roles.Member, client func(roles.Member) *redis.Client) error {
	logger := klog.FromContext(ctx)
	start := time.Now()
	c.recorder.Eventf(mc, corev1.EventTypeNormal, "SwitchoverStarted", "Handing the primary role from %s to %s", from.Name, to.Name)
	ns := mc.GetNamespace()
	if err := c.setRole(ctx, ns, from, api.RoleReplica); err != nil {
		return err
	}
	restore := func(cause error) error {
		_ = member.AbortFailover(ctx, client(from))
		c.recorder.Eventf(mc, corev1.EventTypeWarning, "SwitchoverFailed", "Handing over from %s to %s failed: %v", from.Name, to.Name, cause)
		return fmt.Errorf("switchover from %s to %s: %w", from.Name, to.Name, cause)
	}
	if err := member.Failover(ctx, client(from), to.IP, api.Port, 5*time.Second); err != nil {
		return restore(err)
	}
	deadline := time.Now().Add(6 * time.Second)
	for {
		r, err := member.ObserveWith(ctx, client(to))
		if err == nil && r.Role == member.Primary {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return restore(fmt.Errorf("%s did not become primary within 6s (last: %+v, %v)", to.Name, r, err))
		}
		select { // polling the handover, bounded by the deadline above
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err := c.setRole(ctx, ns, to, api.RolePrimary); err != nil {
		return err
	}
	for _, m := range members {
		if m.Name != to.Name && m.Name != from.Name && m.IP != "" {
			if err := member.Follow(ctx, client(m), to.IP, api.Port); err != nil {
				logger.Info("Could not point a member at the new primary; retrying", "member", m.Name, "err", err)
			}
		}
	}
	took := time.Since(start)
	metrics.Failover("switchover", took)
	c.recorder.Eventf(mc, corev1.EventTypeNormal, "SwitchoverCompleted", "%s is the primary instead of %s (%.2fs)", to.Name, from.Name, took.Seconds())
	logger.Info("Switchover", "from", from.Name, "to", to.Name, "took", took)
	if mc.GetAnnotations()[api.SwitchoverAnnotation] != "" {
		return c.clearSwitchover(ctx, mc)
	}
	return nil
}

// clearSwitchover removes the switchover annotation once it is done (only if it still names the
// same member).
func (c *Controller) clearSwitchover(ctx context.Context, mc *unstructured.Unstructured) error {
	path := "/metadata/annotations/" + strings.ReplaceAll(strings.ReplaceAll(api.SwitchoverAnnotation, "~", "~0"), "/", "~1")
	patch, _ := json.Marshal([]map[string]interface{}{
		{"op": "test", "path": path, "value": mc.GetAnnotations()[api.SwitchoverAnnotation]},
		{"op": "remove", "path": path},
	})
	_, err := c.client.Resource(api.Resource).Namespace(mc.GetNamespace()).Patch(ctx, mc.GetName(), types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: api.FieldManager})
	if apierrors.IsInvalid(err) || apierrors.IsNotFound(err) {
		return nil // changed meanwhile: the next pass reads the new value
	}
	return err
}

// setRole sets a member's role label (on that very pod: the patch carries its UID).
func (c *Controller) setRole(ctx context.Context, ns string, m roles.Member, role string) error {
	patch, _ := json.Marshal(map[string]interface{}{"metadata": map[string]interface{}{
		"uid": m.UID, "labels": map[string]string{api.LabelRole: role}}})
	_, err := c.client.Resource(informers.Pods).Namespace(ns).Patch(ctx, m.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: api.FieldManager})
	if err != nil {
		return fmt.Errorf("Pod/%s/%s: setting role %s: %w", ns, m.Name, role, err)
	}
	c.store.expectLabel(ns+"/"+m.Name, m.UID, role)
	klog.FromContext(ctx).V(2).Info("Role label set", "member", m.Name, "role", role)
	return nil
}

// deletePod deletes a member's pod to roll it; the StatefulSet makes it anew on the new revision.
// The UID precondition keeps a second pass from deleting the pod made anew.
func (c *Controller) deletePod(ctx context.Context, ns string, m roles.Member) error {
	err := c.client.Resource(informers.Pods).Namespace(ns).Delete(ctx, m.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &m.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("Pod/%s/%s: deleting to roll it: %w", ns, m.Name, err)
	}
	c.store.expectDeleted(ns+"/"+m.Name, m.UID)
	return nil
}
