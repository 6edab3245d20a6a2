package plugin

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"example.com/cache-operator/engine/api"
)

// status prints one screen: the cache, each member (role, readiness, lag, memory, keys, clients,
// node), the last failover, the backups, the conditions and the Warning Events of the last hour.
func status(ctx context.Context, c *client, name string) error {
	mc, err := c.cache(ctx, name)
	if err != nil {
		return err
	}
	ns := mc.GetNamespace()
	spec, _ := mc.Object["spec"].(map[string]interface{})
	engine, _, _ := unstructured.NestedString(spec, "engine", "name")
	version, _, _ := unstructured.NestedString(spec, "engine", "version")
	replicas, _, _ := unstructured.NestedInt64(spec, "replicas")
	hibernate, _, _ := unstructured.NestedBool(spec, "hibernate")
	shardCount, sharded, _ := unstructured.NestedInt64(spec, "shards")
	readyStatus, readyReason, readyMessage := conditionOf(mc, api.ConditionReady)
	w := c.out
	if sharded {
		fmt.Fprintf(w, "ManagedCache %s/%s: %s %s, %d shards of %d members", ns, name, orDash(engine), orDash(version), shardCount, replicas)
	} else {
		fmt.Fprintf(w, "ManagedCache %s/%s: %s %s, %d replicas", ns, name, orDash(engine), orDash(version), replicas)
	}
	if hibernate {
		fmt.Fprint(w, ", hibernate: true")
	}
	fmt.Fprintf(w, "\nReady: %s (%s: %s)\n", orDash(readyStatus), orDash(readyReason), readyMessage)
	if ep, _, _ := unstructured.NestedString(mc.Object, "status", "endpoint"); ep != "" {
		ro, _, _ := unstructured.NestedString(mc.Object, "status", "readEndpoint")
		fmt.Fprintf(w, "Endpoint: %s (writes), %s (reads)\n", ep, ro)
	}

	// Members: the pods, status.members and the operator's per-member series.
	pods, err := c.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(api.SelectorLabels(name)).String()})
	if err != nil {
		return err
	}
	roles, slots := map[string]string{}, map[string]string{}
	lagRounded := map[string]int64{}
	members, _, _ := unstructured.NestedSlice(mc.Object, "status", "members")
	for _, m := range members {
		mm, _ := m.(map[string]interface{})
		n, _ := mm["name"].(string)
		roles[n], _ = mm["role"].(string)
		slots[n], _ = mm["slots"].(string)
		lagRounded[n], _, _ = unstructured.NestedInt64(mm, "lagBytes")
	}
	figs, where := c.memberFigures(ctx, ns, name)
	sort.Slice(pods.Items, func(i, j int) bool {
		if sharded { // by shard, then ordinal
			si, oi, _ := api.ShardMemberOf(name, pods.Items[i].Name)
			sj, oj, _ := api.ShardMemberOf(name, pods.Items[j].Name)
			return si < sj || si == sj && oi < oj
		}
		return ordinal(pods.Items[i].Name) < ordinal(pods.Items[j].Name)
	})
	if r := api.ReshardOf(mc); r != nil {
		fmt.Fprintf(w, "Reshard: to %d shards since %s: %d slots moved, %d to move\n", r.Shards, r.Since, r.SlotsMoved, r.SlotsToMove)
	}
	fmt.Fprintln(w)
	if len(pods.Items) == 0 {
		fmt.Fprintln(w, "Members: none running")
	} else {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		shardCols := func(string) string { return "" }
		if sharded {
			fmt.Fprint(tw, "SHARD\tSLOTS\t")
			shardCols = func(pod string) string {
				shard, _, _ := api.ShardMemberOf(name, pod)
				return fmt.Sprintf("%d\t%s\t", shard, orDash(slots[pod]))
			}
		}
		fmt.Fprintln(tw, "MEMBER\tROLE\tREADY\tLAG\tMEMORY (USED/MAX)\tKEYS\tCLIENTS\tRESTARTS\tNODE")
		for _, p := range pods.Items {
			role := roles[p.Name]
			if role == "" {
				role = p.Labels[api.LabelRole]
			}
			if p.DeletionTimestamp != nil {
				role += " (deleting)"
			}
			lag, memory, keys, clients := "-", "-", "-", "-"
			if f := figs[p.Name]; f != nil {
				switch {
				case !f.up:
					role += " (not answering)"
				case f.hasLag:
					lag = bytesIEC(f.lag)
				}
				if f.hasLink && f.linkUp == 0 {
					lag += " (link down)"
				}
				if f.up {
					memory = bytesIEC(f.used) + " / " + maxMemory(f.max)
					keys, clients = strconv.FormatFloat(f.keys, 'f', 0, 64), strconv.FormatFloat(f.clients, 'f', 0, 64)
				}
			} else if r, ok := lagRounded[p.Name]; ok && role == api.RoleReplica {
				lag = "< " + bytesIEC(float64(max(r*2, 1<<20)))
			}
			var restarts int32
			for _, cs := range p.Status.ContainerStatuses {
				restarts += cs.RestartCount
			}
			fmt.Fprintf(tw, "%s%s\t%s\t%v\t%s\t%s\t%s\t%s\t%d\t%s\n", shardCols(p.Name), p.Name, orDash(role), podReady(&p), lag, memory, keys, clients, restarts, orDash(p.Spec.NodeName))
		}
		_ = tw.Flush()
		fmt.Fprintf(w, "(figures from %s)\n", where)
	}

	fmt.Fprintln(w)
	if f := api.LastFailoverOf(mc); f != nil {
		when := f.Time
		if t, err := time.Parse(time.RFC3339, f.Time); err == nil {
			when = fmt.Sprintf("%s (%s ago)", f.Time, ago(c.now().Sub(t)))
		}
		fmt.Fprintf(w, "Last failover: %s from %s to %s at %s\n", f.Kind, orDash(f.From), f.To, when)
	} else {
		fmt.Fprintln(w, "Last failover: none recorded")
	}
	if h := api.HibernationOf(mc); h != nil {
		fmt.Fprintf(w, "Hibernation: since %s, primary %s\n", h.Since, orDash(h.Primary))
	}
	c.printBackups(ctx, mc)

	fmt.Fprintln(w, "\nConditions:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	conds, _, _ := unstructured.NestedSlice(mc.Object, "status", "conditions")
	for _, cond := range conds {
		m, _ := cond.(map[string]interface{})
		fmt.Fprintf(tw, "  %v\t%v\t%v\t%v\n", m["type"], m["status"], m["reason"], m["message"])
	}
	_ = tw.Flush()

	events, err := c.kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "type=Warning"})
	if err != nil {
		return err
	}
	var recent []corev1.Event
	for _, e := range events.Items {
		obj := e.InvolvedObject.Name
		if ownsName(name, obj) && c.now().Sub(eventTime(e)) < time.Hour {
			recent = append(recent, e)
		}
	}
	sort.Slice(recent, func(i, j int) bool { return eventTime(recent[i]).Before(eventTime(recent[j])) })
	if len(recent) > 10 {
		recent = recent[len(recent)-10:]
	}
	fmt.Fprintln(w, "\nWarning Events (last hour):")
	if len(recent) == 0 {
		fmt.Fprintln(w, "  none")
	}
	for _, e := range recent {
		msg, _, _ := strings.Cut(e.Message, "\n")
		if len(msg) > 160 {
			msg = msg[:157] + "..."
		}
		count := ""
		if e.Count > 1 {
			count = fmt.Sprintf(" (x%d)", e.Count)
		}
		fmt.Fprintf(w, "  %s ago\t%s/%s\t%s%s: %s\n", ago(c.now().Sub(eventTime(e))), e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, count, msg)
	}
	return nil
}

// printBackups prints the cache's backup settings and its latest ManagedCacheBackups.
func (c *client) printBackups(ctx context.Context, mc *unstructured.Unstructured) {
	w := c.out
	if _, ok, _ := unstructured.NestedMap(mc.Object, "spec", "backup"); !ok {
		fmt.Fprintln(w, "Backups: not configured (spec.backup)")
		return
	}
	schedule, _, _ := unstructured.NestedString(mc.Object, "spec", "backup", "schedule")
	last, _, _ := unstructured.NestedString(mc.Object, "status", "backup", "lastBackupTime")
	next, _, _ := unstructured.NestedString(mc.Object, "status", "backup", "nextScheduleTime")
	fmt.Fprintf(w, "Backups: schedule %q, last completed %s, next %s\n", schedule, orDash(last), orDash(next))
	list, err := c.dyn.Resource(api.BackupResource).Namespace(mc.GetNamespace()).List(ctx, metav1.ListOptions{LabelSelector: api.LabelBackupCache + "=" + mc.GetName()})
	if err != nil {
		fmt.Fprintf(w, "  (ManagedCacheBackups: %v)\n", err)
		return
	}
	items := list.Items
	sort.Slice(items, func(i, j int) bool {
		return items[i].GetCreationTimestamp().Time.Before(items[j].GetCreationTimestamp().Time)
	})
	if len(items) > 3 {
		items = items[len(items)-3:]
	}
	for _, b := range items {
		phase, _, _ := unstructured.NestedString(b.Object, "status", "phase")
		msg, _, _ := unstructured.NestedString(b.Object, "status", "message")
		fmt.Fprintf(w, "  %s\t%s\t%s %s\n", b.GetName(), b.GetCreationTimestamp().UTC().Format(time.RFC3339), orDash(phase), msg)
	}
}

func eventTime(e corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func ordinal(pod string) int {
	i := strings.LastIndexByte(pod, '-')
	n, _ := strconv.Atoi(pod[i+1:])
	return n
}

func maxMemory(n float64) string {
	if n == 0 {
		return "no limit"
	}
	return bytesIEC(n)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
