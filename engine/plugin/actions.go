package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"example.com/cache-operator/engine/api"
)

// patchCache merge-patches the cache with patch (a JSON-able map).
func (c *client) patchCache(ctx context.Context, name string, patch map[string]interface{}) error {
	b, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	if _, err := c.dyn.Resource(api.Resource).Namespace(c.ns).Patch(ctx, name, types.MergePatchType, b, metav1.PatchOptions{FieldManager: "kubectl-managedcache"}); err != nil {
		return fmt.Errorf("ManagedCache %s/%s: %w", c.ns, name, err)
	}
	return nil
}

func annotate(key, value string) map[string]interface{} {
	return map[string]interface{}{"metadata": map[string]interface{}{"annotations": map[string]interface{}{key: value}}}
}

// switchover asks the operator to hand the primary role to --to (default: the replica the
// operator reports least behind) through the switchover annotation, and waits for it.
func switchover(ctx context.Context, c *client, name string) error {
	mc, err := c.cache(ctx, name)
	if err != nil {
		return err
	}
	if shards, sharded, _ := unstructured.NestedInt64(mc.Object, "spec", "shards"); sharded {
		return c.switchoverShard(ctx, mc, shards)
	}
	from := api.PrimaryOf(mc)
	if from == "" {
		return fmt.Errorf("%s/%s has no primary now (Ready: %s); a switchover hands over from a live primary", c.ns, name, readyLine(mc))
	}
	to := c.opts.to
	if to == "" {
		if to, err = c.bestReplica(ctx, mc); err != nil {
			return err
		}
	}
	if to == from {
		fmt.Fprintf(c.out, "%s is the primary already\n", to)
		return nil
	}
	if err := c.patchCache(ctx, name, annotate(api.SwitchoverAnnotation, to)); err != nil {
		return err
	}
	fmt.Fprintf(c.out, "switching over %s/%s from %s to %s\n", c.ns, name, from, to)
	if !c.opts.wait {
		return nil
	}
	start := c.now()
	err = c.waitFor(ctx, to+" to be the primary", func() (bool, string, error) {
		mc, err := c.cache(ctx, name)
		if err != nil {
			return false, "", err
		}
		p := api.PrimaryOf(mc)
		_, pending := mc.GetAnnotations()[api.SwitchoverAnnotation]
		return p == to && !pending, fmt.Sprintf("primary %q, Ready %s", p, readyLine(mc)), nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(c.out, "%s is the primary (%.1fs)\n", to, c.now().Sub(start).Seconds())
	return nil
}

// switchoverShard asks the operator to make --to its shard's primary (a sharded cache has one
// primary per shard, so the member must be named), and waits until the operator has done it or
// refused it (the annotation gone either way; a refusal is a SwitchoverFailed Event).
func (c *client) switchoverShard(ctx context.Context, mc *unstructured.Unstructured, shards int64) error {
	name, to := mc.GetName(), c.opts.to
	if to == "" {
		return fmt.Errorf("%s/%s is a sharded cache of %d shards, each with its own primary: name the replica to hand its shard to "+
			"with --to (kubectl managedcache status %s lists the members, their shards and roles)", c.ns, name, shards, name)
	}
	if err := c.patchCache(ctx, name, annotate(api.SwitchoverAnnotation, to)); err != nil {
		return err
	}
	fmt.Fprintf(c.out, "switching %s/%s's shard of %s over to it\n", c.ns, name, to)
	if !c.opts.wait {
		return nil
	}
	start := c.now()
	refused := ""
	// The operator clears the annotation once it has handed the shard over, or refused; the
	// status that shows the new role is written after that, and a refusal is an Event.
	err := c.waitFor(ctx, "the operator to hand the shard to "+to+" or refuse", func() (bool, string, error) {
		mc, err := c.cache(ctx, name)
		if err != nil {
			return false, "", err
		}
		_, pending := mc.GetAnnotations()[api.SwitchoverAnnotation]
		role := memberRole(mc, to)
		if !pending && role != api.RolePrimary {
			refused = c.switchoverRefusal(ctx, name, to, start)
		}
		return !pending && (role == api.RolePrimary || refused != ""), fmt.Sprintf("%s is %q, Ready %s", to, role, readyLine(mc)), nil
	})
	if err != nil {
		return err
	}
	if refused != "" {
		return fmt.Errorf("the switchover to %s was not done: %s", to, refused)
	}
	fmt.Fprintf(c.out, "%s serves its shard's slots (%.1fs)\n", to, c.now().Sub(start).Seconds())
	return nil
}

// switchoverRefusal is the message of the operator's SwitchoverFailed Event about a switchover
// to member of cache name since start ("" when there is none).
func (c *client) switchoverRefusal(ctx context.Context, name, member string, start time.Time) string {
	events, err := c.kube.CoreV1().Events(c.ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=" + api.EventSwitchoverFailed})
	if err != nil {
		return ""
	}
	why, last := "", time.Time{}
	for _, e := range events.Items {
		at := e.LastTimestamp.Time
		if e.InvolvedObject.Name == name && strings.Contains(e.Message, member) && !at.Before(start.Truncate(time.Second)) && at.After(last) {
			why, last = e.Message, at
		}
	}
	return why
}

// memberRole is the role status.members gives member ("" when it lists none).
func memberRole(mc *unstructured.Unstructured, member string) string {
	members, _, _ := unstructured.NestedSlice(mc.Object, "status", "members")
	for _, m := range members {
		if mm, _ := m.(map[string]interface{}); mm["name"] == member {
			r, _ := mm["role"].(string)
			return r
		}
	}
	return ""
}

// bestReplica is the replica to hand over to: the least lag in the operator's figures (its own
// choice too), else the first replica status lists as in sync.
func (c *client) bestReplica(ctx context.Context, mc *unstructured.Unstructured) (string, error) {
	members, _, _ := unstructured.NestedSlice(mc.Object, "status", "members")
	figs, _ := c.memberFigures(ctx, mc.GetNamespace(), mc.GetName())
	best, bestLag := "", -1.0
	for _, m := range members {
		mm, _ := m.(map[string]interface{})
		n, _ := mm["name"].(string)
		if mm["role"] != api.RoleReplica {
			continue
		}
		lag, _, _ := unstructured.NestedInt64(mm, "lagBytes")
		l := float64(lag)
		if f := figs[n]; f != nil && f.hasLag {
			l = f.lag
		}
		if best == "" || l < bestLag {
			best, bestLag = n, l
		}
	}
	if best == "" {
		return "", fmt.Errorf("%s/%s has no replica to hand over to (status.members: %v)", mc.GetNamespace(), mc.GetName(), members)
	}
	return best, nil
}

// rotatePassword asks for a new clients' password (the rotate-password annotation, a new value
// each time) and waits until the operator generated it.
func rotatePassword(ctx context.Context, c *client, name string) error {
	if _, err := c.cache(ctx, name); err != nil {
		return err
	}
	token := c.now().UTC().Format("20060102T150405.000Z")
	if err := c.patchCache(ctx, name, annotate(api.RotatePasswordAnnotation, token)); err != nil {
		return err
	}
	fmt.Fprintf(c.out, "rotating the clients' password of %s/%s (%s=%s)\n", c.ns, name, api.RotatePasswordAnnotation, token)
	if !c.opts.wait {
		return nil
	}
	var revision string
	err := c.waitFor(ctx, "the new password in the Secret", func() (bool, string, error) {
		s, err := c.kube.CoreV1().Secrets(c.ns).Get(ctx, api.SecretName(name), metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		revision = s.Annotations[api.PasswordRevisionAnnotation]
		return s.Annotations[api.PasswordRotatedForAnnotation] == token, "rotated for " + s.Annotations[api.PasswordRotatedForAnnotation], nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(c.out, "new password in Secret %s/%s (revision %s); the previous one keeps working until %s's overlap ends\n",
		c.ns, api.SecretName(name), revision, api.PreviousPasswordUntilAnnotation)
	return nil
}

// backup creates a ManagedCacheBackup of the cache and waits for it to complete.
func backup(ctx context.Context, c *client, name string) error {
	mc, err := c.cache(ctx, name)
	if err != nil {
		return err
	}
	if _, ok, _ := unstructured.NestedMap(mc.Object, "spec", "backup"); !ok {
		return fmt.Errorf("%s/%s has no spec.backup: set where backups go first", c.ns, name)
	}
	b := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": api.GroupVersion.String(), "kind": api.BackupKind,
		"metadata": map[string]interface{}{"generateName": name + "-", "namespace": c.ns},
		"spec":     map[string]interface{}{"cache": name},
	}}
	created, err := c.dyn.Resource(api.BackupResource).Namespace(c.ns).Create(ctx, b, metav1.CreateOptions{FieldManager: "kubectl-managedcache"})
	if err != nil {
		return fmt.Errorf("creating a ManagedCacheBackup: %w", err)
	}
	fmt.Fprintf(c.out, "ManagedCacheBackup %s/%s created\n", c.ns, created.GetName())
	if !c.opts.wait {
		return nil
	}
	start := c.now()
	var phase, msg string
	err = c.waitFor(ctx, "the backup to complete", func() (bool, string, error) {
		got, err := c.dyn.Resource(api.BackupResource).Namespace(c.ns).Get(ctx, created.GetName(), metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		phase, _, _ = unstructured.NestedString(got.Object, "status", "phase")
		msg, _, _ = unstructured.NestedString(got.Object, "status", "message")
		return phase == api.BackupCompleted || phase == api.BackupFailed, "phase " + phase, nil
	})
	if err != nil {
		return err
	}
	if phase == api.BackupFailed {
		return fmt.Errorf("backup %s failed: %s", created.GetName(), msg)
	}
	fmt.Fprintf(c.out, "backup %s completed in %.1fs\n", created.GetName(), c.now().Sub(start).Seconds())
	return nil
}

// setHibernate sets spec.hibernate and waits until the cache is hibernated (every member
// stopped) or Ready again.
func setHibernate(ctx context.Context, c *client, name string, on bool) error {
	if _, err := c.cache(ctx, name); err != nil {
		return err
	}
	if err := c.patchCache(ctx, name, map[string]interface{}{"spec": map[string]interface{}{"hibernate": on}}); err != nil {
		return err
	}
	verb, want := "resuming", "Ready again"
	if on {
		verb, want = "hibernating", "every member stopped"
	}
	fmt.Fprintf(c.out, "%s %s/%s\n", verb, c.ns, name)
	if !c.opts.wait {
		return nil
	}
	start := c.now()
	err := c.waitFor(ctx, want, func() (bool, string, error) {
		mc, err := c.cache(ctx, name)
		if err != nil {
			return false, "", err
		}
		if on {
			s, _, _ := conditionOf(mc, "Hibernated")
			return s == "True", readyLine(mc), nil
		}
		s, _, _ := conditionOf(mc, api.ConditionReady)
		_, resuming, _ := unstructured.NestedMap(mc.Object, "status", "hibernation")
		return s == "True" && !resuming, readyLine(mc), nil
	})
	if err != nil {
		return err
	}
	mc, err := c.cache(ctx, name)
	if err != nil {
		return err
	}
	primary := api.PrimaryOf(mc)
	if on {
		fmt.Fprintf(c.out, "hibernated in %.1fs: no member runs; volumes, Secret and Services kept\n", c.now().Sub(start).Seconds())
	} else if primary == "" {
		fmt.Fprintf(c.out, "Ready in %.1fs: every slot served\n", c.now().Sub(start).Seconds())
	} else {
		fmt.Fprintf(c.out, "Ready in %.1fs with %s as primary\n", c.now().Sub(start).Seconds(), primary)
	}
	return nil
}

func readyLine(mc *unstructured.Unstructured) string {
	s, r, m := conditionOf(mc, api.ConditionReady)
	return fmt.Sprintf("%s (%s: %s)", orDash(s), orDash(r), m)
}
