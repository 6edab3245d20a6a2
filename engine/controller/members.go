package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/redis/go-redis/v9"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/member"
	"example.com/cache-operator/engine/metrics"
)

var (
	podsGVR      = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	configMapGVK = schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
)

// ConditionDegraded is True while a cache is not whole: no primary, a failover or a roll under
// way, a member that does not answer or a replica out of sync.
const ConditionDegraded = "Degraded"

// memberView is what the last member pass of a cache found, for its status.
type memberView struct {
	// Observed: the operator reads the members' servers. False for members it may not dial
	// (outside --member-networks): their roles are the labels it set, never verified.
	Observed bool
	Primary  string
	Members  []memberStatus
	// Degraded is the Degraded condition's reason and message ("" when whole or not observed).
	Degraded, DegradedMessage string
	// Live is the revision of the cache's live settings ("": no ConfigMap yet); LiveError why
	// they cannot be applied at all (a ConfigMap that does not parse), LivePending why a member
	// could not be given them (the first such error).
	Live, LiveError, LivePending string
	// Password is the revision of the clients' password the pass gave the members (0: none);
	// PasswordPending why a member could not be given it (the first such error).
	Password        int64
	PasswordPending string
}

// memberStatus is one entry of status.members.
type memberStatus struct {
	Name           string `json:"name"`
	Role           string `json:"role"`
	LagBytes       int64  `json:"lagBytes,omitempty"`
	ConfigRevision string `json:"configRevision,omitempty"`
	// PasswordRevision is the revision of the clients' password the member accepts.
	PasswordRevision int64 `json:"passwordRevision,omitempty"`
}

// roleMemory is what a member pass keeps of a cache between passes.
type roleMemory struct {
	unhealthySince    time.Time
	lastPrimaryOffset int64
	// live is the cache's live settings as last read from its ConfigMap (at liveRV), and
	// liveChecked, per member (by pod UID), the revision last found or made current, and when.
	liveRV      string
	live        liveSettings
	liveChecked memberChecks
	// authChecked is, per member, the credentials last found or made current, and when.
	authChecked memberChecks
}

// liveSettings are the settings of a cache's ConfigMap (api.LiveConfigKey), parsed.
type liveSettings struct {
	values   map[string]string
	names    []string
	revision string // a digest of the text
	err      error  // the text does not parse
}

// memberChecks remembers, per member (by pod UID), what its server was last found with or given
// (a digest), and when.
type memberChecks map[types.UID]memberCheck

type memberCheck struct {
	key string
	at  time.Time
}

// sweep runs check, in parallel, on every member whose server answered and whose last check is
// not for key, is older than liveRecheck, or which again says must be read anyway. It then calls
// result for every member that answered, under one lock: err nil when its server is current
// (found so before, or made so now). Members gone are forgotten.
func (mc memberChecks) sweep(members []memberState, key string, again func(*memberState) bool, check func(*memberState) error, result func(*memberState, error)) {
	now := time.Now()
	present := map[types.UID]bool{}
	var stale []*memberState
	for i := range members {
		m := &members[i]
		present[m.UID] = true
		if !m.Observed {
			continue
		}
		if chk, ok := mc[m.UID]; ok && chk.key == key && now.Sub(chk.at) < liveRecheck && !again(m) {
			result(m, nil)
			continue
		}
		stale = append(stale, m)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, m := range stale {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := check(m)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				mc[m.UID] = memberCheck{key: key, at: now}
			}
			result(m, err)
		}()
	}
	wg.Wait()
	for uid := range mc {
		if !present[uid] {
			delete(mc, uid)
		}
	}
}

// liveRecheck is how often a member with current live settings is read again: a setting changed
// by hand (CONFIG SET) is put back within it.
const liveRecheck = time.Minute

// memberStore holds the member passes' views and memories, by cache key, and what the passes
// wrote to pods that the informer may not show yet (by namespace/pod).
type memberStore struct {
	mu     sync.Mutex
	views  map[string]memberView
	memory map[string]*roleMemory
	// labels are role labels set but perhaps not yet seen; deleted are pods (by UID) deleted but
	// perhaps not yet seen deleting. A pass that read the informer's older copy would undo its
	// own last step (promote the member it just demoted), so these override the informer until it
	// catches up.
	labels  map[string]labelExpectation
	deleted map[string]types.UID
}

type labelExpectation struct {
	uid   types.UID
	label string
	at    time.Time
}

// expectationTTL bounds how long a write not yet seen by the informer overrides it.
const expectationTTL = 30 * time.Second

func (s *memberStore) expectLabel(podKey string, uid types.UID, label string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.labels[podKey] = labelExpectation{uid: uid, label: label, at: time.Now()}
}

func (s *memberStore) expectDeleted(podKey string, uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deleted[podKey] = uid
}

// overlay applies the writes the informer has not caught up with to m, the pod podKey with uid.
func (s *memberStore) overlay(podKey string, uid types.UID, m *memberState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.labels[podKey]; ok {
		switch {
		case e.uid != uid || e.label == m.Label || time.Since(e.at) > expectationTTL:
			delete(s.labels, podKey)
		default:
			m.Label = e.label
		}
	}
	if d, ok := s.deleted[podKey]; ok {
		if d == uid && !m.Deleting {
			m.Deleting = true
		} else {
			delete(s.deleted, podKey)
		}
	}
}

func (s *memberStore) view(key string) (memberView, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.views[key]
	return v, ok
}

// setView stores v and reports whether it differs from what was stored.
func (s *memberStore) setView(key string, v memberView) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.views[key]
	s.views[key] = v
	return !ok || !reflect.DeepEqual(old, v)
}

func (s *memberStore) mem(key string) *roleMemory {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.memory[key]
	if m == nil {
		m = &roleMemory{}
		s.memory[key] = m
	}
	return m
}

func (s *memberStore) forget(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.views, key)
	delete(s.memory, key)
}

const instanceIndex = "instance"

// podInstance indexes a pod by namespace/<its cache>.
func podInstance(obj interface{}) ([]string, error) {
	o, ok := obj.(metav1.Object)
	if !ok {
		return nil, nil
	}
	if inst := o.GetLabels()[api.LabelInstance]; inst != "" {
		return []string{o.GetNamespace() + "/" + inst}, nil
	}
	return nil, nil
}

// enqueuePod schedules a member pass of the pod's cache.
func (c *Controller) enqueuePod(obj interface{}) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	keys, _ := podInstance(obj)
	for _, k := range keys {
		c.members.Add(k)
	}
}

// runMemberWorkers runs member passes until ctx ends.
func (c *Controller) runMemberWorkers(ctx context.Context, wg *sync.WaitGroup) {
	for i := 0; i < c.opts.MemberWorkers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c.processNextMemberItem(ctx) {
			}
		}()
	}
}

func (c *Controller) processNextMemberItem(ctx context.Context) bool {
	key, shutdown := c.members.Get()
	if shutdown {
		return false
	}
	defer c.members.Done(key)
	if ctx.Err() != nil {
		return false
	}
	next, err := c.syncMembers(ctx, key)
	if err != nil {
		klog.ErrorS(err, "Member pass failed; retrying", "managedcache", key)
		c.members.AddRateLimited(key)
		return true
	}
	c.members.Forget(key)
	if next > 0 {
		c.members.AddAfter(key, next)
	}
	return true
}

// syncMembers is one member pass of a cache: it reads the members' pods and servers, decides the
// roles (decideRoles) and carries the decision out. It returns when to look again (0: on the
// next pod or cache event only).
func (c *Controller) syncMembers(ctx context.Context, key string) (time.Duration, error) {
	mc, exists, err := c.cache(key)
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
	// idle is a return that schedules no poll: the next pod, Secret or cache event starts the
	// next pass. Logged, so that a cache whose passes stopped shows why.
	idle := func(why string) (time.Duration, error) {
		logger.V(3).Info("Member pass waits for an event", "why", why)
		return 0, nil
	}
	members := c.memberPods(ns, name)
	if len(members) == 0 {
		return idle("no member pods")
	}
	updateRevision := c.updateRevision(ns, name)
	addressed := false
	for _, m := range members {
		if m.IP != "" && !c.dialable(m.IP) {
			return 0, c.syncUnobserved(ctx, mc, key, spec, members, updateRevision)
		}
		addressed = addressed || m.IP != ""
	}
	if !addressed {
		// Nothing to read, and no telling yet whether the members can be dialled: the pod
		// events that bring their addresses start the next pass.
		return idle("no member has an IP")
	}
	secret, _ := c.child(secretGVK, ns, api.SecretName(name))
	cred, ok := credentialsOf(secret)
	if !ok {
		return idle("no credentials in the Secret yet") // the reconcile writes them, and the pods wait for them
	}
	c.observe(ctx, members, cred)

	mem := c.store.mem(key)
	c.applyAuth(ctx, members, mem, cred)
	live, liveOK := c.liveSettingsOf(ns, name, mem)
	if liveOK && live.err == nil {
		c.applyLiveSettings(ctx, members, mem, live, cred)
	}
	now := time.Now()
	if p := healthyPrimary(members); p != nil {
		mem.unhealthySince, mem.lastPrimaryOffset = time.Time{}, p.Repl.Offset
	} else if mem.unhealthySince.IsZero() {
		mem.unhealthySince = now
	}
	v := roleView{
		Now: now, Members: members, Delay: spec.FailoverDelay, UnhealthySince: mem.unhealthySince,
		SwitchoverTo: mc.GetAnnotations()[api.SwitchoverAnnotation], UpdateRevision: updateRevision,
		Replicas: int(spec.Replicas),
	}
	act := decideRoles(v, mem.lastPrimaryOffset)
	acted, err := c.act(ctx, mc, members, act, mem, cred)
	view := observedView(members, act)
	view.Password = cred.revision
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
	case !act.WaitUntil.IsZero() && act.WaitUntil.Sub(now) < c.opts.MemberPoll:
		return max(act.WaitUntil.Sub(now), 50*time.Millisecond), nil
	}
	return c.opts.MemberPoll, nil
}

// publish stores the view of a cache and, when it changed, has the cache's status rewritten.
func (c *Controller) publish(key string, v memberView) {
	if c.store.setView(key, v) {
		c.queue.Add(key)
	}
}

// memberPods returns the members of a cache from the pod informer, by ordinal.
func (c *Controller) memberPods(ns, name string) []memberState {
	objs, err := c.pods.GetIndexer().ByIndex(instanceIndex, ns+"/"+name)
	if err != nil {
		return nil
	}
	var out []memberState
	for _, o := range objs {
		p, ok := o.(*memberPod)
		if !ok {
			continue
		}
		ref := metav1.GetControllerOfNoCopy(p)
		if ref == nil || ref.Kind != "StatefulSet" || ref.Name != name {
			continue
		}
		ord, ok := ordinalOf(name, p.Name)
		if !ok {
			continue
		}
		m := memberState{
			Name: p.Name, UID: p.UID, Ordinal: ord, IP: p.ip, Label: p.Labels[api.LabelRole],
			Deleting: p.DeletionTimestamp != nil, Revision: p.Labels["controller-revision-hash"],
			Stopped: !p.running && p.ip != "", PodReady: p.ready,
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
func (c *Controller) observe(ctx context.Context, members []memberState, cred credentials) {
	var wg sync.WaitGroup
	for i := range members {
		if members[i].IP == "" {
			continue
		}
		wg.Add(1)
		go func(m *memberState) {
			defer wg.Done()
			r, err := member.ObserveWith(ctx, c.memberClient(m.IP, cred))
			if member.IsAuthError(err) && c.fallBack(m.IP, cred) {
				// A member the internal user cannot reach yet (started by an older operator):
				// as the clients' default user, until applyAuth has made the internal user.
				r, err = member.ObserveWith(ctx, c.memberClient(m.IP, cred))
			}
			metrics.MemberObserved(err)
			if err != nil {
				klog.FromContext(ctx).V(3).Info("Member does not answer", "member", m.Name, "err", err)
				return
			}
			m.Observed, m.Repl = true, r
		}(&members[i])
	}
	wg.Wait()
}

func (c *Controller) addr(ip string) string { return net.JoinHostPort(ip, strconv.Itoa(api.Port)) }

// act carries out a decision. It reports whether it changed anything.
func (c *Controller) act(ctx context.Context, mc *unstructured.Unstructured, members []memberState, act roleAction, mem *roleMemory, cred credentials) (bool, error) {
	byName := map[string]memberState{}
	for _, m := range members {
		byName[m.Name] = m
	}
	client := func(m memberState) *redis.Client { return c.memberClient(m.IP, cred) }
	logger := klog.FromContext(ctx)

	if act.SwitchTo != "" {
		return true, c.switchover(ctx, mc, byName[act.From], byName[act.SwitchTo], members, client)
	}
	acted := false
	// Fence first: every member labelled primary that is not to be the primary loses the label
	// before anyone is promoted, so the read-write Service never reaches two primaries.
	for _, name := range sortedKeys(act.Labels) {
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
			if old, ok := byName[act.From]; ok && old.isPrimary() {
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
func (c *Controller) switchover(ctx context.Context, mc *unstructured.Unstructured, from, to memberState, members []memberState, client func(memberState) *redis.Client) error {
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
func (c *Controller) setRole(ctx context.Context, ns string, m memberState, role string) error {
	patch, _ := json.Marshal(map[string]interface{}{"metadata": map[string]interface{}{
		"uid": m.UID, "labels": map[string]string{api.LabelRole: role}}})
	_, err := c.client.Resource(podsGVR).Namespace(ns).Patch(ctx, m.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: api.FieldManager})
	if err != nil {
		return fmt.Errorf("Pod/%s/%s: setting role %s: %w", ns, m.Name, role, err)
	}
	c.store.expectLabel(ns+"/"+m.Name, m.UID, role)
	klog.FromContext(ctx).V(2).Info("Role label set", "member", m.Name, "role", role)
	return nil
}

// deletePod deletes a member's pod to roll it; the StatefulSet makes it anew on the new revision.
// The UID precondition keeps a second pass from deleting the pod made anew.
func (c *Controller) deletePod(ctx context.Context, ns string, m memberState) error {
	err := c.client.Resource(podsGVR).Namespace(ns).Delete(ctx, m.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &m.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("Pod/%s/%s: deleting to roll it: %w", ns, m.Name, err)
	}
	c.store.expectDeleted(ns+"/"+m.Name, m.UID)
	return nil
}

// syncUnobserved keeps the roles of a cache whose members the operator may not dial (outside
// --member-networks): member 0 is labelled primary when none is, nothing fails over,
// and rolls go one ready member at a time, highest ordinal first.
func (c *Controller) syncUnobserved(ctx context.Context, mc *unstructured.Unstructured, key string, spec api.Spec, members []memberState, updateRevision string) error {
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
	c.publish(key, memberView{Primary: primary})
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

// observedView is the status view of a member pass.
func observedView(members []memberState, act roleAction) memberView {
	v := memberView{Observed: true, Degraded: act.Degraded, DegradedMessage: act.DegradedMessage}
	var primaryOffset int64 = -1
	var primaryID string
	for _, m := range members {
		if m.Name == act.Primary && m.isPrimary() && m.Label == api.RolePrimary {
			v.Primary = m.Name
			primaryOffset, primaryID = m.Repl.Offset, m.Repl.ReplID
		}
	}
	for _, m := range members {
		s := memberStatus{Name: m.Name, Role: "unknown", ConfigRevision: m.ConfigRevision, PasswordRevision: m.PasswordRevision}
		if m.ConfigError != "" && v.LivePending == "" {
			v.LivePending = m.Name + ": " + m.ConfigError
		}
		if m.AuthError != "" && v.PasswordPending == "" {
			v.PasswordPending = m.Name + ": " + m.AuthError
		}
		if m.Observed {
			s.Role = api.RoleReplica
			if m.Name == v.Primary {
				s.Role = api.RolePrimary
			} else if primaryOffset >= 0 && m.Repl.ReplID == primaryID {
				s.LagBytes = roundLag(primaryOffset - m.Repl.Offset)
			}
		}
		v.Members = append(v.Members, s)
	}
	return v
}

// roundLag rounds a lag down to a power of two, and to 0 below 1 MiB: status must not change
// with every write a busy cache takes.
func roundLag(lag int64) int64 {
	if lag < 1<<20 {
		return 0
	}
	p := int64(1 << 20)
	for p*2 <= lag {
		p *= 2
	}
	return p
}

// applyMemberView sets what the member pass found in s: primary, members, the read endpoint and
// the Degraded condition.
func applyMemberView(s *cacheStatus, v memberView, ok bool, generation int64) {
	if !ok {
		// No member pass has run yet (a new cache, or a new leader): what status says stands.
		return
	}
	s.Primary, s.Members = v.Primary, v.Members
	if !v.Observed {
		meta.RemoveStatusCondition(&s.Conditions, ConditionDegraded)
		return
	}
	cond := metav1.Condition{Type: ConditionDegraded, Status: metav1.ConditionFalse, Reason: ReasonHealthy,
		Message: "every member answers and every replica is in sync", ObservedGeneration: generation}
	if v.Degraded != "" {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, v.Degraded, v.DegradedMessage
	}
	meta.SetStatusCondition(&s.Conditions, cond)
	applyLiveCondition(s, v, generation)
}

// ConditionConfigApplied says whether every member runs with the cache's live settings.
const ConditionConfigApplied = "ConfigApplied"

// Reasons of the ConfigApplied condition.
const (
	ReasonLiveSettingsApplied = "LiveSettingsApplied"
	ReasonLiveSettingsPending = "LiveSettingsPending"
	ReasonLiveSettingsInvalid = "LiveSettingsInvalid"
)

// applyLiveCondition sets ConfigApplied from a member pass's view: True when every member has the
// live settings' revision, False naming those that have not and why.
func applyLiveCondition(s *cacheStatus, v memberView, generation int64) {
	if v.Live == "" {
		meta.RemoveStatusCondition(&s.Conditions, ConditionConfigApplied)
		return
	}
	cond := metav1.Condition{Type: ConditionConfigApplied, Status: metav1.ConditionTrue, Reason: ReasonLiveSettingsApplied,
		Message: "every member has the live settings of revision " + v.Live, ObservedGeneration: generation}
	var pending []string
	for _, m := range v.Members {
		if m.ConfigRevision != v.Live {
			pending = append(pending, m.Name)
		}
	}
	why := ""
	if v.LivePending != "" {
		why = " (" + v.LivePending + ")"
	}
	switch {
	case v.LiveError != "":
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, ReasonLiveSettingsInvalid, "the live settings do not parse: "+v.LiveError
	case len(pending) > 0:
		cond.Status, cond.Reason = metav1.ConditionFalse, ReasonLiveSettingsPending
		cond.Message = fmt.Sprintf("%s not yet at the live settings of revision %s%s", strings.Join(pending, ", "), v.Live, why)
	}
	meta.SetStatusCondition(&s.Conditions, cond)
}

// liveSettingsOf returns the cache's live settings from its ConfigMap in the informer cache,
// decoded and parsed once per resourceVersion (false: no ConfigMap yet).
func (c *Controller) liveSettingsOf(ns, name string, mem *roleMemory) (liveSettings, bool) {
	obj := c.packedChild(configMapGVK, ns, api.ConfigName(name))
	if obj == nil {
		return liveSettings{}, false
	}
	if obj.ResourceVersion != mem.liveRV {
		var ls liveSettings
		if u, err := c.packer.unpackObject(obj); err != nil {
			ls.err = err
		} else {
			text, _, _ := unstructured.NestedString(u.Object, "data", api.LiveConfigKey)
			ls.values, ls.names, ls.err = member.ParseSettings(text)
			h := fnv.New32a()
			_, _ = h.Write([]byte(text))
			ls.revision = fmt.Sprintf("%08x", h.Sum32())
		}
		mem.liveRV, mem.live = obj.ResourceVersion, ls
	}
	return mem.live, true
}

// applyLiveSettings brings every member whose server answered to the live settings: it reads them
// (CONFIG GET) and sets those that differ (CONFIG SET), with no restart. A member is read when the
// settings or the member (its pod UID) changed since its last check, and every liveRecheck. It
// sets each member's ConfigRevision when its server has the settings, ConfigError when it could
// not be given them.
func (c *Controller) applyLiveSettings(ctx context.Context, members []memberState, mem *roleMemory, ls liveSettings, cred credentials) {
	if mem.liveChecked == nil {
		mem.liveChecked = memberChecks{}
	}
	mem.liveChecked.sweep(members, ls.revision, func(*memberState) bool { return false },
		func(m *memberState) error { return c.syncSettings(ctx, m.Name, c.memberClient(m.IP, cred), ls) },
		func(m *memberState, err error) {
			if err != nil {
				m.ConfigError = err.Error()
				return
			}
			m.ConfigRevision = ls.revision
		})
}

// syncSettings gives one member's server the live settings it does not have.
func (c *Controller) syncSettings(ctx context.Context, pod string, client *redis.Client, ls liveSettings) error {
	have, err := member.Settings(ctx, client, ls.names)
	if err != nil {
		return err
	}
	var differ []string
	for _, n := range ls.names {
		if have[n] != ls.values[n] {
			differ = append(differ, n)
		}
	}
	if len(differ) == 0 {
		return nil
	}
	if err := member.ApplySettings(ctx, client, differ, ls.values); err != nil {
		return err
	}
	changed := make([]string, 0, len(differ))
	for _, n := range differ {
		changed = append(changed, fmt.Sprintf("%s %s (was %s)", n, ls.values[n], have[n]))
	}
	klog.FromContext(ctx).Info("Applied live settings", "member", pod, "revision", ls.revision, "settings", strings.Join(changed, ", "))
	metrics.LiveSettingsApplied(len(differ))
	return nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
