package dataplane

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/credentials"
	"example.com/cache-operator/engine/informers"
	"example.com/cache-operator/engine/member"
	"example.com/cache-operator/engine/metrics"
	"example.com/cache-operator/engine/roles"
	"example.com/cache-operator/engine/shardpass"
	"example.com/cache-operator/engine/shards"
)

// syncShards is the member pass of a sharded cache. shardpass reads every member's view of the
// cluster and carries out the phase shards.Decide gives (introductions, the first slots, replicas
// attached to their shard's primary, members gone forgotten, slots left open closed); this pass
// labels each member with the role its server reports (the read-only Service and the plugin
// follow the label) and publishes what it saw. The cluster fails a primary over by itself: no
// pass here promotes or fences.
func (c *Controller) syncShards(ctx context.Context, mc *unstructured.Unstructured, key string, spec api.Spec) (time.Duration, error) {
	ns, name := mc.GetNamespace(), mc.GetName()
	logger := klog.FromContext(ctx)
	c.store.setSample(key, metrics.CacheSample{}, false)
	pods := map[string]roles.Member{}
	var members []shardpass.Member
	for _, p := range c.informers.MemberPods(ns, name) {
		shard, ordinal, ok := api.ShardMemberOf(name, p.Name)
		if !ok {
			continue
		}
		m := shardpass.Member{Name: p.Name, Shard: shard, Ordinal: ordinal, Host: p.Node, Leaving: p.DeletionTimestamp != nil}
		if m.Leaving && shard >= int(spec.Shards) {
			if sts, _ := c.informers.Child(informers.StatefulSet, ns, api.ShardSetName(name, shard)); sts == nil {
				continue // a removed shard's member stopping (removed once it held nothing): not waited for
			}
		}
		if p.IP != "" {
			if !c.dialable(p.IP) {
				return 0, nil // outside --member-networks: nothing to read, nothing to form
			}
			m.Addr = c.addr(p.IP)
		}
		members = append(members, m)
		pods[p.Name] = roles.Member{Name: p.Name, UID: p.UID, IP: p.IP, Label: p.Labels[api.LabelRole], TLS: p.Labels[api.LabelTLS] == "true"}
	}
	if len(members) == 0 {
		logger.V(3).Info("Member pass waits for an event", "why", "no member pods")
		return 0, nil
	}
	secret, _ := c.informers.Child(informers.Secret, ns, api.SecretName(name))
	cred, ok := credentials.Of(secret)
	if !ok {
		logger.V(3).Info("Member pass waits for an event", "why", "no credentials in the Secret yet")
		return 0, nil
	}
	mem := c.store.mem(key)
	if m, ok := c.tlsOf(ns, name, mem); ok {
		cred = withTLS(cred, m) // the members of a TLS cache are dialled over TLS (their pods' label)
	}
	pass := shardpass.Pass{
		Client:      func(m shardpass.Member) *redis.Client { return c.memberClient(pods[m.Name], cred) },
		MigrateUser: api.InternalUser, MigratePassword: cred.Internal,
		MoveFor: reshardBudget, MoveShare: reshardShare, MigrateFor: reshardMigrateFor,
	}
	switchTo := mc.GetAnnotations()[api.SwitchoverAnnotation]
	res, err := pass.Run(ctx, members, shards.Spec{Shards: int(spec.Shards), PerShard: int(spec.Replicas), SwitchTo: switchTo,
		Restored: restoredRanges(mc, spec)})
	for _, s := range res.Seen {
		metrics.MemberObserved(s.Err)
	}
	metrics.Moved(res.SlotsMoved, res.KeysMoved)
	c.reportReshard(mc, key, spec, res)
	for _, s := range res.Steps {
		if s.Kind == shards.Flush && err == nil {
			c.recorder.Eventf(mc, corev1.EventTypeWarning, api.EventFormerPrimaryEmptied, "%s", s.Why)
		}
	}
	if rerr := c.restartStuck(ctx, mc, mem, res.Steps, pods); rerr != nil {
		return 0, rerr
	}
	if !mem.failoverRead {
		mem.lastFailover, mem.failoverRead = api.LastFailoverOf(mc), true
	}
	changes, discards := mem.shards.Observe(res, time.Now())
	c.reportShardChanges(mc, mem, changes, discards)
	if switchTo != "" && (res.SwitchDone || res.SwitchRefused != "") {
		if res.SwitchRefused != "" && mem.switchRefused != mc.GetResourceVersion() {
			// Once per version of the cache: a pass on a copy the informer has not updated yet
			// since the annotation went sees it again.
			mem.switchRefused = mc.GetResourceVersion()
			c.recorder.Eventf(mc, corev1.EventTypeWarning, api.EventSwitchoverFailed, "Switchover to %s refused: %s", switchTo, res.SwitchRefused)
		}
		if cerr := c.clearSwitchover(ctx, mc); cerr != nil {
			logger.Error(cerr, "Clearing the switchover annotation")
		}
	}
	logger.V(3).Info("Sharded member pass", "steps", res.Steps, "whole", res.Whole, "err", err)
	for _, s := range res.Seen {
		if s.Err != nil {
			continue
		}
		role := api.RoleReplica
		if s.View.Primary {
			role = api.RolePrimary
		}
		if m := pods[s.Name]; m.Label != role {
			if lerr := c.setRole(ctx, ns, m, role); lerr != nil {
				logger.Error(lerr, "Labelling a member's role", "member", s.Name)
			}
		}
	}
	view := res.View(err)
	view.Shards, view.LastFailover = spec.Shards, mem.lastFailover
	c.keepSettings(ctx, ns, name, key, res, pods, cred, &view)
	c.publish(key, view)
	c.store.setSample(key, res.Sample(ns, name), true)
	if member.IsRefused(err) {
		return c.opts.Poll, nil // reported in the view; looked at again at the next poll
	}
	if err != nil {
		return 0, err
	}
	switch {
	case res.Whole:
		return c.opts.Poll, nil
	case res.Paced:
		return reshardPause, nil // the moves go on after a pause
	case len(res.Steps) > 0 && res.Steps[0].Kind != shards.Wait:
		return 200 * time.Millisecond, nil // verify what was done, once gossip has spread it
	}
	return min(c.opts.Poll, 500*time.Millisecond), nil // gossip, or a member coming up
}

// stuckFor is how long a member is seen in a state only a restart leaves before its pod is
// deleted: a pass reads a member's cluster flags and its replication one after the other, and a
// role switch between the two reads looks like that state for one pass.
const stuckFor = 5 * time.Second

// restartStuck deletes, once per pod, the pod of each member the planner says only a restart
// frees (shards.Restart) that has been in that state for stuckFor, with a Warning Event that says
// why; the StatefulSet starts it again on the same volume. Members no longer in it are forgotten.
func (c *Controller) restartStuck(ctx context.Context, mc *unstructured.Unstructured, mem *roleMemory, steps []shards.Step, pods map[string]roles.Member) error {
	seen := map[string]stuckMember{}
	for _, s := range steps {
		m, ok := pods[s.Member]
		if s.Kind != shards.Restart || !ok {
			continue
		}
		st, was := mem.stuck[s.Member]
		if !was || st.uid != m.UID {
			st = stuckMember{uid: m.UID, since: time.Now()}
		}
		if !st.restarted && time.Since(st.since) >= stuckFor {
			klog.FromContext(ctx).Info("Restarting a member in a state only a restart leaves", "member", m.Name, "why", s.Why)
			c.recorder.Eventf(mc, corev1.EventTypeWarning, api.EventRestartingMember, "%s (so for %.0fs): deleting its pod, its volume stays", s.Why, time.Since(st.since).Seconds())
			if err := c.deletePodWithin(ctx, mc.GetNamespace(), m, -1); err != nil {
				return err
			}
			st.restarted = true
		}
		seen[s.Member] = st
	}
	mem.stuck = seen
	return nil
}

// restoredRanges is, while a restore from a sharded backup runs, the slots each shard served in
// the backup (status.restore.shards); nil otherwise.
func restoredRanges(mc *unstructured.Unstructured, spec api.Spec) [][]shards.Range {
	rs := api.RestoreStatusOf(mc)
	if spec.Restore == nil || rs == nil || rs.Phase == api.RestoreCompleted || len(rs.Shards) == 0 {
		return nil
	}
	out := make([][]shards.Range, spec.Shards)
	for _, s := range rs.Shards {
		r, err := shards.ParseRanges(s.Slots)
		if err != nil || s.Shard < 0 || s.Shard >= spec.Shards {
			return nil // the restore's resolution refuses such a backup
		}
		out[s.Shard] = r
	}
	return out
}

// A reshard moves slots for reshardBudget per pass, then pauses reshardPause: its passes yield
// the member worker to other caches and read the members again each time. Within a pass its
// MIGRATEs take at most reshardShare of the primaries' time (a wait as long as each MIGRATE
// after it), so that their clients' writes are not held behind one move after another, and each
// MIGRATE carries as many keys as it can move in about reshardMigrateFor (a client's command waits
// for one MIGRATE at most: with a fixed 100 keys of 1 KiB that was the writes' p99 during a move).
const (
	reshardBudget     = time.Second
	reshardPause      = 100 * time.Millisecond
	reshardShare      = 0.5
	reshardMigrateFor = time.Millisecond
)

// reportShardChanges reports the shards whose primary changed and the writes former primaries
// took that their successors never had (shardpass.Watch): the cluster's failovers in a Warning
// Event, the operator's handovers in a Normal one, each counted and kept in status.lastFailover;
// discarded writes in WritesDiscarded and cache_operator_writes_discarded_bytes_total.
func (c *Controller) reportShardChanges(mc *unstructured.Unstructured, mem *roleMemory, changes []shardpass.Change, discards []shardpass.Discard) {
	for _, ch := range changes {
		if ch.Planned {
			metrics.Failover("switchover", ch.Since)
			mem.lastFailover = failoverRecord("switchover", ch.From, ch.To)
			c.recorder.Eventf(mc, corev1.EventTypeNormal, api.EventSwitchoverCompleted,
				"Shard %d's primary handed over from %s to %s (CLUSTER FAILOVER: %s caught up first)", ch.Shard, ch.From, ch.To, ch.To)
			continue
		}
		metrics.Failover("failover", ch.Since)
		mem.lastFailover = failoverRecord("failover", ch.From, ch.To)
		behind := "an unknown number of"
		if ch.Behind >= 0 {
			behind = fmt.Sprint(ch.Behind)
		}
		c.recorder.Eventf(mc, corev1.EventTypeWarning, api.EventShardFailedOver,
			"The cluster elected %s in place of shard %d's primary %s, last read serving %.1fs before; %s was %s bytes behind it then: writes %s acknowledged after that and had not replicated are lost and cannot be counted, unless a pass reads %s before it syncs from %s (then WritesDiscarded counts them)",
			ch.To, ch.Shard, ch.From, ch.Since.Seconds(), ch.To, behind, ch.From, ch.From, ch.To)
	}
	for _, d := range discards {
		metrics.WritesDiscarded(d.Bytes)
		how := "read before it synced from " + d.Primary
		if d.Synced {
			how = "at least: what the last pass that read it on its own history saw; it had synced from " + d.Primary + " since"
		}
		c.recorder.Eventf(mc, corev1.EventTypeWarning, api.EventWritesDiscarded,
			"%s acknowledged %d bytes of writes after %s took its slots over (its offset %d, the fork at %d; %s); they are discarded",
			d.Member, d.Bytes, d.Primary, d.Offset, d.Fork, how)
	}
}

// reportReshard emits the Events of a reshard: when its first pass finds slots to move (or, for a
// reshard the status already shows, when this process takes it over), and when none is left.
func (c *Controller) reportReshard(mc *unstructured.Unstructured, key string, spec api.Spec, res shardpass.Result) {
	mem := c.store.mem(key)
	mem.reshard.slots += res.SlotsMoved
	mem.reshard.keys += res.KeysMoved
	if !res.SlotsKnown {
		return
	}
	switch {
	case !mem.reshard.running && res.SlotsToMove+res.SlotsMoved > 0:
		mem.reshard = reshardMemory{running: true, since: time.Now(), slots: res.SlotsMoved, keys: res.KeysMoved}
		if r := api.ReshardOf(mc); r != nil && r.Shards == spec.Shards {
			c.recorder.Eventf(mc, corev1.EventTypeNormal, api.EventReshardStarted,
				"Going on with the reshard to %d shards after a restart of the operator: %d slots to move (%d moved before)",
				spec.Shards, res.SlotsToMove+res.SlotsMoved, r.SlotsMoved)
			return
		}
		c.recorder.Eventf(mc, corev1.EventTypeNormal, api.EventReshardStarted, "Moving %d slots with their keys to reach %d shards",
			res.SlotsToMove+res.SlotsMoved, spec.Shards)
	case mem.reshard.running && res.SlotsToMove == 0:
		took := time.Since(mem.reshard.since)
		c.recorder.Eventf(mc, corev1.EventTypeNormal, api.EventReshardCompleted,
			"Every shard of %d serves its share of the slots: %d slots and %d keys moved in %.1fs", spec.Shards,
			mem.reshard.slots, mem.reshard.keys, took.Seconds())
		mem.reshard = reshardMemory{}
	}
}

// keepSettings gives every member that answered the Secret's credentials, the ConfigMap's
// permissions and live settings and, in a TLS cache, the TLS Secret's certificate, as a
// primary/replica cache's pass does (no restart), and notes in view what each member has.
func (c *Controller) keepSettings(ctx context.Context, ns, name, key string, res shardpass.Result, pods map[string]roles.Member,
	cred credentials.Credentials, view *api.MembersView) {
	mem := c.store.mem(key)
	members := make([]roles.Member, 0, len(res.Seen))
	for _, s := range res.Seen {
		m := pods[s.Name]
		m.Observed, m.Repl = s.Err == nil, s.Repl
		members = append(members, m)
	}
	c.enableAOF(ctx, members, cred) // a restored shard's first member loaded its object with the AOF off
	live, liveOK := c.liveSettingsOf(ns, name, mem)
	var rules credentials.Rules
	if liveOK && live.usersErr == nil {
		rules = live.users
	}
	c.applyAuth(ctx, members, mem, cred, rules)
	if liveOK && live.err == nil {
		c.applyLiveSettings(ctx, members, mem, live, cred)
	}
	if m, ok := c.tlsOf(ns, name, mem); ok {
		c.applyCertificates(ctx, members, mem, cred, m)
	}
	byName := map[string]roles.Member{}
	for _, m := range members {
		byName[m.Name] = m
		if m.ConfigError != "" && view.LivePending == "" {
			view.LivePending = m.Name + ": " + m.ConfigError
		}
		if m.AuthError != "" && view.PasswordPending == "" {
			view.PasswordPending = m.Name + ": " + m.AuthError
		}
	}
	for i := range view.Members {
		m := byName[view.Members[i].Name]
		view.Members[i].ConfigRevision, view.Members[i].PasswordRevision = m.ConfigRevision, m.PasswordRevision
	}
	view.Password = cred.Revision
	if liveOK {
		view.Live = live.revision
		if live.err != nil {
			view.LiveError = live.err.Error()
		}
	}
}
