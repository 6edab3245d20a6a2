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
	client := func(m roles.Member) *redis.Client { return c.memberClient(m, cred) }
	logger := klog.FromContext(ctx)

	if act.SwitchTo != "" {
		err := c.switchover(ctx, mc, byName[act.From], byName[act.SwitchTo], members, client, cred)
		if err == nil {
			mem.lastFailover = failoverRecord("switchover", act.From, act.SwitchTo)
		}
		return true, err
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
				c.recorder.Eventf(mc, corev1.EventTypeWarning, api.EventFailoverStarted,
					"Primary %s restarted and no other member can take over; promoting it again", act.From)
			} else {
				c.recorder.Eventf(mc, corev1.EventTypeWarning, api.EventFailoverStarted,
					"Primary %s is gone; promoting %s (the most caught-up member), which was %d bytes behind it at the last poll; writes %s acknowledged after that poll and had not replicated are lost and cannot be counted, unless it comes back as master (then WritesDiscarded counts them)",
					act.From, act.Primary, act.LostBytes, act.From)
			}
			logger.Info("Failover", "from", act.From, "to", act.Primary, "lagAtLastPoll", act.LostBytes)
		} else {
			logger.Info("Electing a primary", "member", act.Primary, "keys", p.Repl.Keys, "offset", p.Repl.Offset)
		}
		// Every other member that still answers as master is paused first: the writes it would
		// take through old connections could not reach the new primary.
		for _, m := range members {
			if m.Name != act.Primary && m.IsPrimary() {
				if err := member.PauseWrites(ctx, client(m), 10*time.Second); err != nil {
					logger.Info("Could not pause a member that says master", "member", m.Name, "err", err)
				}
			}
		}
		if err := member.Promote(ctx, client(p)); err != nil {
			return acted, err
		}
		acted = true
		if act.From != "" {
			metrics.Failover("failover", time.Since(start))
			mem.lastFailover = failoverRecord("failover", act.From, act.Primary)
			defer func() {
				c.recorder.Eventf(mc, corev1.EventTypeNormal, api.EventFailoverCompleted,
					"%s is the primary instead of %s, %.1fs after the primary was first seen gone; it was %d bytes behind at the last poll",
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
	// The read-write label follows the role label wherever it does not (a handover cut short, or
	// a member labelled by an operator that had no such label).
	for _, m := range members {
		if _, moved := act.Labels[m.Name]; moved || m.Label == "" || m.ReadWrite == (m.Label == api.RolePrimary) {
			continue
		}
		if err := c.setRole(ctx, mc.GetNamespace(), m, m.Label); err != nil {
			return acted, err
		}
		acted = true
	}
	for _, name := range act.Follow {
		m := byName[name]
		if m.IsPrimary() {
			// A deposed primary (cut off, or restarted on its own): what it took that the
			// primary never had is counted and reported before it joins and drops it. Right
			// after a promotion (it was paused first) the next pass does it, once the new
			// primary's history records where it forked.
			if act.Promote {
				continue
			}
			c.depose(ctx, mc, m, p, client(m), mem)
		}
		if err := c.follow(ctx, client(m), p, cred); err != nil {
			if member.IsRefused(err) && mem.refused == "" {
				mem.refused = fmt.Sprintf("pointing %s at the primary %s: %v", name, p.Name, err)
			}
			logger.Info("Could not point a member at the primary; retrying", "member", name, "err", err)
			continue
		}
		acted = true
	}
	if len(act.DeleteAll) > 0 {
		var keys int64
		for _, m := range members {
			if m.Observed {
				keys = max(keys, m.Repl.Keys)
			}
		}
		if mem.reset != act.DegradedMessage {
			mem.reset = act.DegradedMessage
			c.recorder.Eventf(mc, corev1.EventTypeWarning, api.EventDataDiscarded,
				"%s (the annotation %s allows the loss): %v deleted at once, with no handover; they start empty on the new version. %d keys at the last poll are discarded",
				act.DegradedMessage, api.AllowDataLossAnnotation, act.DeleteAll, keys)
			metrics.DataReset(keys)
		}
		logger.Info("Restarting every member at once: the data cannot survive the version change", "members", act.DeleteAll, "keys", keys, "why", act.DegradedMessage)
		mem.lastPrimary = "" // the new members elect a primary: no failover
		for _, name := range act.DeleteAll {
			if err := c.deletePodWithin(ctx, mc.GetNamespace(), byName[name], 1); err != nil {
				return acted, err
			}
		}
		return true, nil
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

// replaceStuck deletes the pods of members that cannot start on an outdated revision
// (roles.Stuck), each with a Warning Event that says why: the StatefulSet makes each anew from the
// current template, on the same volume.
func (c *Controller) replaceStuck(ctx context.Context, mc *unstructured.Unstructured, stuck []roles.Member, updateRevision string) error {
	for _, m := range stuck {
		klog.FromContext(ctx).Info("Replacing a member that cannot start on an outdated revision", "member", m.Name, "why", m.Stuck,
			"revision", m.Revision, "updateRevision", updateRevision)
		c.recorder.Eventf(mc, corev1.EventTypeWarning, api.EventReplacingMember,
			"%s cannot start (%s) and was made from revision %s, not the StatefulSet's current %s: deleting its pod so that it is made anew from the current template, on the same volume",
			m.Name, m.Stuck, m.Revision, updateRevision)
		if err := c.deletePodWithin(ctx, mc.GetNamespace(), m, 1); err != nil {
			return err
		}
	}
	return nil
}

// failoverRecord is status.lastFailover for a primary that changed from from to to just now.
func failoverRecord(kind, from, to string) *api.FailoverStatus {
	return &api.FailoverStatus{Time: time.Now().UTC().Format(time.RFC3339), Kind: kind, From: from, To: to}
}

// depose readies a member that says master but is not the primary to follow p: it counts the
// writes it took past the point where p's history forked from its own (roles.Discarded) and
// reports them, in a Warning Event and cache_operator_writes_discarded_bytes_total, never as
// nothing when it cannot tell; then it disconnects the member's clients, so that they reconnect
// through the read-write Service instead of meeting READONLY on their old connection.
func (c *Controller) depose(ctx context.Context, mc *unstructured.Unstructured, m, p roles.Member, cl *redis.Client, mem *roleMemory) {
	logger := klog.FromContext(ctx)
	bytes, known := roles.Discarded(p.Repl, m.Repl)
	if mem.deposed == nil {
		mem.deposed = map[string]string{}
	}
	seen := fmt.Sprintf("%s:%s:%d", m.UID, m.Repl.ReplID, m.Repl.Offset)
	reported := mem.deposed[m.Name] == seen
	mem.deposed[m.Name] = seen
	switch {
	case reported:
		// The same stream as the last pass (its REPLICAOF failed): counted then.
	case !known:
		metrics.WritesDiscardedUnmeasured()
		c.recorder.Eventf(mc, corev1.EventTypeWarning, api.EventWritesDiscarded,
			"%s said master on a replication history %s does not continue (offset %d); it rejoins as a replica, and what it acknowledged apart from %s cannot be measured",
			m.Name, p.Name, m.Repl.Offset, p.Name)
	case bytes > 0:
		metrics.WritesDiscarded(bytes)
		c.recorder.Eventf(mc, corev1.EventTypeWarning, api.EventWritesDiscarded,
			"%s acknowledged %d bytes of writes after %s took over from it (its offset %d, the fork at %d); it rejoins as a replica of %s and they are discarded",
			m.Name, bytes, p.Name, m.Repl.Offset, p.Repl.SecondOffset-1, p.Name)
	}
	logger.Info("Deposing a member that says master", "member", m.Name, "primary", p.Name, "discardedBytes", bytes, "measured", known)
	if n, err := member.DisconnectClients(ctx, cl); err != nil {
		logger.Info("Could not disconnect the clients of a deposed primary", "member", m.Name, "err", err)
	} else if n > 0 {
		logger.Info("Disconnected the clients of a deposed primary", "member", m.Name, "clients", n)
	}
}

// switchover hands the primary role from a live primary to target (member.Handover): the old
// primary's writes are held while target catches up and the roles swap. Then target gets the
// read-write label, alone, so that the first change kube-proxy sees is the read-write Service's
// (see api.LabelReadWrite); then the role labels move and the old primary loses the read-write
// label; then the old primary lets its held writes go (they fail READONLY, and their clients
// reconnect through the Service), and the others follow target. Until the labels move, new
// connections through the Service wait on the paused primary rather than find no endpoint.
//
// A roll that turns TLS on or off ends with a handover between a member that serves TLS and one
// that does not, which cannot reach each other as primary and replica: target promotes itself
// instead (member.Handover with promote), and every other member is told the new primary's mode.
func (c *Controller) switchover(ctx context.Context, mc *unstructured.Unstructured, from, to roles.Member, members []roles.Member, client func(roles.Member) *redis.Client, cred credentials.Credentials) error {
	logger := klog.FromContext(ctx)
	start := time.Now()
	c.recorder.Eventf(mc, corev1.EventTypeNormal, api.EventSwitchoverStarted, "Handing the primary role from %s to %s", from.Name, to.Name)
	logger.Info("Switchover started", "from", from.Name, "to", to.Name)
	ns := mc.GetNamespace()
	times, err := member.Handover(ctx, client(from), client(to), to.IP, api.Port, 3*time.Second, 8*time.Second, from.TLS != to.TLS)
	if err != nil {
		c.recorder.Eventf(mc, corev1.EventTypeWarning, api.EventSwitchoverFailed, "Handing over from %s to %s failed: %v", from.Name, to.Name, err)
		return fmt.Errorf("switchover from %s to %s: %w", from.Name, to.Name, err)
	}
	// The held writes go once the labels moved, or at once when they cannot be moved (the pause
	// would otherwise hold them until it ends).
	defer func() {
		if err := member.Unpause(ctx, client(from)); err != nil {
			logger.Info("Could not end the old primary's pause; it ends by itself", "member", from.Name, "err", err)
		}
	}()
	// The read-write Service's change comes first and alone (see api.LabelReadWrite): for a moment
	// it leads to both, the old primary answering READONLY, so clients retry.
	if err := c.leadWrites(ctx, ns, to); err != nil {
		return err
	}
	if err := c.setRole(ctx, ns, from, api.RoleReplica); err != nil {
		return err
	}
	if err := c.setRole(ctx, ns, to, api.RolePrimary); err != nil {
		return err
	}
	for _, m := range members {
		if m.Name != to.Name && m.Name != from.Name && m.IP != "" {
			if err := c.follow(ctx, client(m), to, cred); err != nil {
				logger.Info("Could not point a member at the new primary; retrying", "member", m.Name, "err", err)
			}
		}
	}
	took := time.Since(start)
	metrics.Failover("switchover", took)
	c.recorder.Eventf(mc, corev1.EventTypeNormal, api.EventSwitchoverCompleted, "%s is the primary instead of %s (%.2fs)", to.Name, from.Name, took.Seconds())
	logger.Info("Switchover", "from", from.Name, "to", to.Name, "took", took, "caughtUp", times.CaughtUp, "promoted", times.Promoted)
	if mc.GetAnnotations()[api.SwitchoverAnnotation] != "" {
		return c.clearSwitchover(ctx, mc)
	}
	return nil
}

// follow makes a member a replica of p; in a cache with TLS material, over TLS exactly when p
// serves TLS (member.ReplicateOverTLS) first.
func (c *Controller) follow(ctx context.Context, cl *redis.Client, p roles.Member, cred credentials.Credentials) error {
	if cred.TLS != nil {
		if _, err := member.ReplicateOverTLS(ctx, cl, p.TLS); err != nil {
			return err
		}
	}
	return member.Follow(ctx, cl, p.IP, api.Port)
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

// setRole sets a member's role label, and its read-write label to match (on the primary only),
// on that very pod: the patch carries its UID.
func (c *Controller) setRole(ctx context.Context, ns string, m roles.Member, role string) error {
	var rw interface{} // null: removed
	if role == api.RolePrimary {
		rw = "true"
	}
	if err := c.patchLabels(ctx, ns, m, map[string]interface{}{api.LabelRole: role, api.LabelReadWrite: rw}); err != nil {
		return fmt.Errorf("Pod/%s/%s: setting role %s: %w", ns, m.Name, role, err)
	}
	c.store.expectLabel(ns+"/"+m.Name, m.UID, role)
	klog.FromContext(ctx).V(2).Info("Role label set", "member", m.Name, "role", role)
	return nil
}

// leadWrites puts the read-write label on a member, so that the read-write Service leads to it,
// and leaves its role label as it is.
func (c *Controller) leadWrites(ctx context.Context, ns string, m roles.Member) error {
	if err := c.patchLabels(ctx, ns, m, map[string]interface{}{api.LabelReadWrite: "true"}); err != nil {
		return fmt.Errorf("Pod/%s/%s: setting the read-write label: %w", ns, m.Name, err)
	}
	klog.FromContext(ctx).V(2).Info("Read-write label set", "member", m.Name)
	return nil
}

func (c *Controller) patchLabels(ctx context.Context, ns string, m roles.Member, labels map[string]interface{}) error {
	patch, _ := json.Marshal(map[string]interface{}{"metadata": map[string]interface{}{"uid": m.UID, "labels": labels}})
	_, err := c.client.Resource(informers.Pods).Namespace(ns).Patch(ctx, m.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: api.FieldManager})
	return err
}

// deletePod deletes a member's pod to roll it; the StatefulSet makes it anew on the new revision.
// The UID precondition keeps a second pass from deleting the pod made anew.
func (c *Controller) deletePod(ctx context.Context, ns string, m roles.Member) error {
	return c.deletePodWithin(ctx, ns, m, -1)
}

// deletePodWithin is deletePod with a grace period of grace seconds (-1: the pod's own): a reset
// gives the members 1 s, since their data is discarded and no handover is waited for.
func (c *Controller) deletePodWithin(ctx context.Context, ns string, m roles.Member, grace int64) error {
	opts := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &m.UID}}
	if grace >= 0 {
		opts.GracePeriodSeconds = &grace
	}
	err := c.client.Resource(informers.Pods).Namespace(ns).Delete(ctx, m.Name, opts)
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("Pod/%s/%s: deleting to roll it: %w", ns, m.Name, err)
	}
	c.store.expectDeleted(ns+"/"+m.Name, m.UID)
	return nil
}
