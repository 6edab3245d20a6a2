package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/credentials"
	"example.com/cache-operator/engine/informers"
	"example.com/cache-operator/engine/member"
	"example.com/cache-operator/engine/metrics"
	"example.com/cache-operator/engine/roles"
	"example.com/cache-operator/engine/support"
)

// syncMembers is one member pass of a cache: it reads the members' pods and servers, decides the
// roles (roles.Decide) and carries the decision out. It returns when to look again (0: on the
// next pod or cache event only).
func (c *Controller) syncMembers(ctx context.Context, key string) (time.Duration, error) {
	mc, exists, err := c.informers.Cache(key)
	if err != nil {
		return 0, err
	}
	if !exists {
		c.store.forget(key)
		return 0, nil
	}
	if mc.GetDeletionTimestamp() != nil {
		return 0, nil
	}
	spec, err := api.SpecFrom(mc)
	if err != nil {
		return 0, nil // the reconcile reports it
	}
	ns, name := mc.GetNamespace(), mc.GetName()
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "managedcache", klog.KRef(ns, name))
	ctx = klog.NewContext(ctx, logger)
	if spec.Hibernate {
		// Its members are being stopped, all at once: nothing fails over, rolls or is
		// relabelled, and no view stands for members that do not run (status.hibernation keeps
		// the primary, which the pass elects again on resume).
		c.store.setSample(key, metrics.CacheSample{}, false)
		c.publish(key, api.MembersView{})
		mem := c.store.mem(key)
		mem.unhealthySince, mem.lastPrimary = time.Time{}, ""
		logger.V(3).Info("Member pass waits for an event", "why", "hibernating")
		return 0, nil
	}
	if spec.Sharded() {
		return c.syncShards(ctx, mc, key, spec)
	}
	// idle is a return that schedules no poll: the next pod, Secret or cache event starts the
	// next pass. Logged, so that a cache whose passes stopped shows why.
	idle := func(why string) (time.Duration, error) {
		logger.V(3).Info("Member pass waits for an event", "why", why)
		return 0, nil
	}
	members := c.memberPods(ns, name)
	if len(members) == 0 {
		c.store.setSample(key, metrics.CacheSample{}, false)
		return idle("no member pods")
	}
	updateRevision := c.informers.UpdateRevision(ns, name)
	if stuck := roles.Stuck(members, updateRevision); len(stuck) > 0 {
		// Before anything else: they need neither an address nor the credentials.
		if err := c.replaceStuck(ctx, mc, stuck, updateRevision); err != nil {
			return 0, err
		}
		return 200 * time.Millisecond, nil
	}
	addressed := false
	for _, m := range members {
		if m.IP != "" && !c.dialable(m.IP) {
			c.store.setSample(key, metrics.CacheSample{}, false)
			return 0, c.syncUnobserved(ctx, mc, key, spec, members, updateRevision)
		}
		addressed = addressed || m.IP != ""
	}
	if !addressed {
		// Nothing to read, and no telling yet whether the members can be dialled: the pod
		// events that bring their addresses start the next pass.
		return idle("no member has an IP")
	}
	secret, _ := c.informers.Child(informers.Secret, ns, api.SecretName(name))
	cred, ok := credentials.Of(secret)
	if !ok {
		return idle("no credentials in the Secret yet") // the reconcile writes them, and the pods wait for them
	}
	mem := c.store.mem(key)
	if !mem.failoverRead {
		// A process that just took over continues the record its predecessor kept in status,
		// and starts from the primary status names: one whose pod was replaced before this
		// process saw it healthy (while no operator ran) is failed over from, not forgotten.
		// Not while a cache resumes or restores: those elect their primary.
		mem.lastFailover, mem.failoverRead = api.LastFailoverOf(mc), true
		if mem.lastPrimary == "" && api.HibernationOf(mc) == nil && !restoring(mc, spec) {
			mem.lastPrimary = api.PrimaryOf(mc)
		}
	}
	tlsMaterial, tlsOK := c.tlsOf(ns, name, mem)
	if tlsOK {
		cred = withTLS(cred, tlsMaterial)
	}
	mem.refused = ""
	c.observe(ctx, members, cred)
	c.enableAOF(ctx, members, cred)

	live, liveOK := c.liveSettingsOf(ns, name, mem)
	var rules credentials.Rules
	if liveOK && live.usersErr == nil {
		rules = live.users
	} else if liveOK {
		logger.Info("The ConfigMap's users do not parse; permissions left as they are", "err", live.usersErr)
	}
	c.applyAuth(ctx, members, mem, cred, rules)
	if tlsOK {
		c.applyCertificates(ctx, members, mem, cred, tlsMaterial)
		c.applyReplicationMode(ctx, members, mem, cred)
	}
	if liveOK && live.err == nil {
		c.applyLiveSettings(ctx, members, mem, live, cred)
	}
	c.checkDataLoss(ctx, mc, members, &mem.data)
	now := time.Now()
	for _, m := range members {
		if m.Label == api.RolePrimary && m.Deleting && m.IsPrimary() {
			mem.primaryStopping = m.Name // a graceful stop: what it acknowledged is on its volume
		}
	}
	if p := roles.HealthyPrimary(members); p != nil {
		mem.primaryStopping = ""
		mem.unhealthySince, mem.lastPrimaryOffset, mem.lastPrimaryHistory, mem.lastPrimary = time.Time{}, p.Repl.Offset, p.Repl.ReplID, p.Name
	} else if mem.unhealthySince.IsZero() {
		mem.unhealthySince = now
		// A leader that just took over continues its predecessor's wait, from the cache's status:
		// a failover cut short by the operator's death does not wait the whole delay again.
		if since, ok := unreachableSince(mc); ok && since.Before(now) {
			mem.unhealthySince = since
			logger.V(2).Info("Primary unreachable since before this process led", "since", since)
		}
	}
	v := roles.View{
		Now: now, Members: members, Delay: spec.FailoverDelay, UnhealthySince: mem.unhealthySince,
		SwitchoverTo: mc.GetAnnotations()[api.SwitchoverAnnotation], UpdateRevision: updateRevision,
		Replicas: int(spec.Replicas), History: mem.lastPrimaryHistory, LastPrimary: mem.lastPrimary,
		LastPrimaryStopped: mem.primaryStopping != "" && mem.primaryStopping == mem.lastPrimary,
	}
	if restoring(mc, spec) {
		v.RestoreFrom = api.RestoreMember(mc.GetName())
	}
	if h := api.HibernationOf(mc); h != nil {
		v.Prefer = h.Primary // resuming: the primary it had, when it answers with its data
	}
	if mc.GetAnnotations()[api.AllowDataLossAnnotation] == "true" {
		v.Reset = resetReason(members, updateRevision, spec)
	}
	act := roles.Decide(v, mem.lastPrimaryOffset)
	logger.V(3).Info("Member pass decided", "primary", act.Primary, "degraded", act.Degraded, "why", act.DegradedMessage,
		"promote", act.Promote, "switchTo", act.SwitchTo, "follow", act.Follow, "labels", act.Labels, "delete", act.Delete)
	var acted bool
	var wait time.Duration
	if act.SwitchTo != "" {
		wait = c.store.settleLeft(key, c.opts.ServiceSettle, now)
	}
	if wait > 0 {
		logger.V(2).Info("Switchover waits for the Services to settle", "to", act.SwitchTo, "wait", wait)
		act.WaitUntil = now.Add(wait)
	} else {
		acted, err = c.act(ctx, mc, members, act, mem, cred)
	}
	if member.IsRefused(err) && mem.refused == "" {
		mem.refused = fmt.Sprintf("%s: %v", actionOf(act), err)
	}
	for _, m := range members {
		if mem.refused == "" && m.AuthError != "" && member.IsRefused(errors.New(m.AuthError)) {
			mem.refused = fmt.Sprintf("%s: %s", m.Name, m.AuthError)
		}
	}
	if member.IsRefused(err) {
		err = nil // reported in the view and an Event; looked at again at the next poll, not in a loop
	}
	c.reportRefused(mc, mem)
	view := observedView(members, act)
	view.Refused = mem.refused
	view.Password, view.LastFailover, view.DataLost = cred.Revision, mem.lastFailover, mem.data.message
	c.store.setSample(key, sampleOf(ns, name, members, view, mem.lastFailover), true)
	if liveOK {
		view.Live = live.revision
		if live.err != nil {
			view.LiveError = live.err.Error()
		}
	}
	c.publish(key, view)
	if err != nil {
		return 0, err
	}
	switch {
	case acted:
		return 200 * time.Millisecond, nil // verify what was done
	case !act.WaitUntil.IsZero() && act.WaitUntil.Sub(now) < c.opts.Poll:
		return max(act.WaitUntil.Sub(now), 50*time.Millisecond), nil
	}
	return c.opts.Poll, nil
}

// actionOf names what a decision was doing, for the message of a command refused.
func actionOf(act roles.Action) string {
	switch {
	case act.SwitchTo != "":
		return fmt.Sprintf("handing the primary over from %s to %s", act.From, act.SwitchTo)
	case act.Promote:
		return "promoting " + act.Primary
	case act.Delete != "" || len(act.DeleteAll) > 0:
		return "restarting members"
	}
	return "setting the members' roles"
}

// reportRefused emits a Warning Event, once per message, for a command the members refused the
// operator in this pass.
func (c *Controller) reportRefused(mc *unstructured.Unstructured, mem *roleMemory) {
	if mem.refused == "" || mem.refused == mem.refusedReported {
		mem.refusedReported = mem.refused
		return
	}
	mem.refusedReported = mem.refused
	c.recorder.Eventf(mc, corev1.EventTypeWarning, api.ReasonOperatorRefused,
		"The members refuse the operator's command (%s): the operator cannot act on them until they accept its credentials", mem.refused)
}

// publish stores the view of a cache and, when it changed, has the cache's status rewritten.
func (c *Controller) publish(key string, v api.MembersView) {
	if c.store.setView(key, v) && c.reconciles != nil {
		c.reconciles.Add(key)
	}
}

// memberPods returns the members of a cache from the pod informer, by ordinal.
func (c *Controller) memberPods(ns, name string) []roles.Member {
	var out []roles.Member
	for _, p := range c.informers.MemberPods(ns, name) {
		ord, ok := roles.OrdinalOf(name, p.Name)
		if !ok {
			continue
		}
		m := roles.Member{
			Name: p.Name, UID: p.UID, Ordinal: ord, IP: p.IP, Label: p.Labels[api.LabelRole], ReadWrite: p.Labels[api.LabelReadWrite] == "true",
			TLS:      p.Labels[api.LabelTLS] == "true",
			Deleting: p.DeletionTimestamp != nil, Revision: p.Labels["controller-revision-hash"], Server: p.Labels[api.LabelServer],
			Stopped: !p.Running && p.IP != "", PodReady: p.Ready, Stuck: p.Stuck,
		}
		c.store.overlay(ns+"/"+m.Name, m.UID, &m)
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Ordinal < out[j].Ordinal })
	return out
}

// dialable reports whether the operator may connect to ip (--member-networks; none: any).
func (c *Controller) dialable(ip string) bool {
	if len(c.opts.MemberNetworks) == 0 {
		return true
	}
	addr := net.ParseIP(ip)
	for _, n := range c.opts.MemberNetworks {
		if addr != nil && n.Contains(addr) {
			return true
		}
	}
	return false
}

// observe reads every member's server at once, each call bounded by member.Timeout.
func (c *Controller) observe(ctx context.Context, members []roles.Member, cred credentials.Credentials) {
	var wg sync.WaitGroup
	for i := range members {
		if members[i].IP == "" {
			continue
		}
		wg.Add(1)
		go func(m *roles.Member) {
			defer wg.Done()
			r, err := member.ObserveWith(ctx, c.memberClient(*m, cred))
			for member.IsAuthError(err) && c.fallBack(m.IP, cred) {
				// A member the current internal password cannot reach yet (an internal
				// rotation, or a member an older operator started): with the previous one, or
				// as the clients' default user, until applyAuth has given it the credentials.
				r, err = member.ObserveWith(ctx, c.memberClient(*m, cred))
			}
			metrics.MemberObserved(err)
			if err != nil {
				if member.IsRefused(err) {
					// It answers, and refuses every credential the operator has: say so.
					m.AuthError = "reading it: " + err.Error()
				}
				klog.FromContext(ctx).V(3).Info("Member does not answer", "member", m.Name, "err", err)
				return
			}
			m.Observed, m.Repl = true, r
		}(&members[i])
	}
	wg.Wait()
}

func (c *Controller) addr(ip string) string { return net.JoinHostPort(ip, strconv.Itoa(api.Port)) }

// syncUnobserved keeps the roles of a cache whose members the operator may not dial (outside
// --member-networks): member 0 is labelled primary when none is, nothing fails over,
// and rolls go one ready member at a time, highest ordinal first.
func (c *Controller) syncUnobserved(ctx context.Context, mc *unstructured.Unstructured, key string, spec api.Spec, members []roles.Member, updateRevision string) error {
	primary := ""
	// Whole: every wanted member has a pod (one deleted to roll it and not yet made anew does
	// not count as ready) and every pod is ready.
	allReady := len(members) >= int(spec.Replicas)
	for _, m := range members {
		if m.Label == api.RolePrimary && !m.Deleting {
			primary = m.Name
		}
		allReady = allReady && m.PodReady && !m.Deleting
	}
	if first := members[0]; primary == "" && first.Ordinal == 0 && !first.Deleting {
		if err := c.setRole(ctx, mc.GetNamespace(), first, api.RolePrimary); err != nil {
			return err
		}
		primary = first.Name
	}
	c.publish(key, api.MembersView{Primary: primary})
	if !allReady || updateRevision == "" {
		return nil
	}
	for i := len(members) - 1; i >= 0; i-- {
		if members[i].Revision != updateRevision {
			return c.deletePod(ctx, mc.GetNamespace(), members[i])
		}
	}
	return nil
}

// unreachableSince reads, from the cache's status, since when its primary has been found
// unreachable (Degraded True as PrimaryUnreachable or FailingOver): the condition's transition
// time, which the API stores in whole seconds, rounded up so that the delay is never shortened.
func unreachableSince(mc *unstructured.Unstructured) (time.Time, bool) {
	conds, _, _ := unstructured.NestedSlice(mc.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]interface{})
		if m["type"] != api.ConditionDegraded || m["status"] != string(metav1.ConditionTrue) ||
			(m["reason"] != api.ReasonPrimaryUnreachable && m["reason"] != api.ReasonFailingOver) {
			continue
		}
		s, _ := m["lastTransitionTime"].(string)
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return time.Time{}, false
		}
		return t.Add(time.Second), true
	}
	return time.Time{}, false
}

// resetReason says why the members on another revision than the update's hold data the spec's
// server cannot load (the support matrix), or "": a roll that cannot keep the data.
func resetReason(members []roles.Member, updateRevision string, spec api.Spec) string {
	for _, m := range members {
		if m.Revision == updateRevision || m.Server == "" {
			continue
		}
		engine, version, ok := api.ParseServerLabel(m.Server)
		if !ok {
			continue
		}
		if why := support.ChangeRefusal(engine, version, spec.Engine.Name, spec.Engine.Version); why != "" {
			return fmt.Sprintf("%s %s to %s %s: %s", engine, version, spec.Engine.Name, spec.Engine.Version, why)
		}
	}
	return ""
}

// restoring says whether a cache's spec.restore is still to complete (its restored member is
// to become the primary).
func restoring(mc *unstructured.Unstructured, spec api.Spec) bool {
	rs := api.RestoreStatusOf(mc)
	return spec.Restore != nil && (rs == nil || rs.Phase != api.RestoreCompleted)
}
