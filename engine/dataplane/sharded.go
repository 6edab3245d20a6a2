package dataplane

import (
	"context"
	"sort"
	"strconv"
	"strings"
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
		m := shardpass.Member{Name: p.Name, Shard: shard, Ordinal: ordinal, Leaving: p.DeletionTimestamp != nil}
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
	pass := shardpass.Pass{
		Client:      func(m shardpass.Member) *redis.Client { return c.memberClient(pods[m.Name], cred) },
		MigrateUser: api.InternalUser, MigratePassword: cred.Internal,
		MoveFor: reshardBudget,
	}
	res, err := pass.Run(ctx, members, shards.Spec{Shards: int(spec.Shards), PerShard: int(spec.Replicas)})
	for _, s := range res.Seen {
		metrics.MemberObserved(s.Err)
	}
	metrics.Moved(res.SlotsMoved, res.KeysMoved)
	c.reportReshard(mc, key, spec, res)
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
	view := shardedView(res, err)
	view.Shards = spec.Shards
	c.keepSettings(ctx, ns, name, key, res, pods, cred, &view)
	c.publish(key, view)
	c.store.setSample(key, shardedSample(ns, name, res), true)
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

// A reshard moves slots for reshardBudget per pass, then pauses reshardPause: its passes yield
// the member worker to other caches, read the members again each time, and leave the primaries
// a tenth of the time with no MIGRATE at all.
const (
	reshardBudget = time.Second
	reshardPause  = 100 * time.Millisecond
)

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

// keepSettings gives every member that answered the Secret's credentials and the ConfigMap's
// permissions and live settings, as a primary/replica cache's pass does (no restart), and notes in
// view what each member has.
func (c *Controller) keepSettings(ctx context.Context, ns, name, key string, res shardpass.Result, pods map[string]roles.Member,
	cred credentials.Credentials, view *api.MembersView) {
	mem := c.store.mem(key)
	members := make([]roles.Member, 0, len(res.Seen))
	for _, s := range res.Seen {
		m := pods[s.Name]
		m.Observed = s.Err == nil
		members = append(members, m)
	}
	live, liveOK := c.liveSettingsOf(ns, name, mem)
	var rules credentials.Rules
	if liveOK && live.usersErr == nil {
		rules = live.users
	}
	c.applyAuth(ctx, members, mem, cred, rules)
	if liveOK && live.err == nil {
		c.applyLiveSettings(ctx, members, mem, live, cred)
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

// shardedSample is the per-member metrics' sample of a sharded pass: each member with its shard,
// a replica's lag against its shard's primary (the member it replicates, when on its history),
// and the cluster's state and the slots the primaries that answered serve.
func shardedSample(ns, name string, res shardpass.Result) metrics.CacheSample {
	c := metrics.CacheSample{Namespace: ns, Cache: name, Cluster: &metrics.ClusterSample{StateOK: len(res.Seen) > 0}}
	byID := map[string]shardpass.Seen{}
	for _, s := range res.Seen {
		if s.Err == nil {
			byID[s.View.ID] = s
		}
	}
	for _, s := range res.Seen {
		ms := metrics.MemberSample{Member: s.Name, Shard: strconv.Itoa(s.Shard), Up: s.Err == nil, Role: "unknown"}
		c.Cluster.StateOK = c.Cluster.StateOK && s.Err == nil && s.View.State == "ok"
		if s.Err == nil {
			r := s.Repl
			ms.Role = api.RoleReplica
			if s.View.Primary {
				ms.Role = api.RolePrimary
				for _, sl := range s.View.Slots {
					c.Cluster.SlotsServed += sl[1] - sl[0] + 1
				}
			}
			ms.Offset, ms.LinkUp, ms.Keys = r.Offset, r.LinkUp, r.Keys
			ms.UsedMemory, ms.MaxMemory, ms.EvictedKeys, ms.ExpiredKeys, ms.Clients = r.Stats.UsedMemory, r.Stats.MaxMemory, r.Stats.EvictedKeys, r.Stats.ExpiredKeys, r.Stats.Clients
			if s.View.Primary {
				ms.HasLag = true
			} else if p, ok := byID[s.View.PrimaryID]; ok && p.Repl.ReplID == r.ReplID {
				ms.Lag, ms.HasLag = max(0, p.Repl.Offset-r.Offset), true
			}
		}
		c.Members = append(c.Members, ms)
	}
	return c
}

// shardedView is what a pass of a sharded cache found: each member's role (primary: it serves
// slots), whether the cluster is whole, and if not, the phase it needs or what it waits for.
func shardedView(res shardpass.Result, err error) api.MembersView {
	v := api.MembersView{Observed: true, ClusterWhole: res.Serving && err == nil, SlotsToMove: int64(res.SlotsToMove),
		SlotsKnown: res.SlotsKnown, RetiredEmpty: res.RetiredEmpty}
	for _, s := range res.Seen {
		ms := api.MemberStatus{Name: s.Name, Role: api.RoleReplica}
		switch {
		case s.Err != nil:
			ms.Role = "unknown"
		case s.View.Primary:
			ms.Role = api.RolePrimary
			parts := make([]string, len(s.View.Slots))
			for i, r := range s.View.Slots {
				parts[i] = shards.Range{From: r[0], To: r[1]}.String()
			}
			ms.Slots = strings.Join(parts, ",")
		}
		v.Members = append(v.Members, ms)
	}
	sort.Slice(v.Members, func(i, j int) bool { return v.Members[i].Name < v.Members[j].Name })
	if member.IsRefused(err) {
		v.Refused = err.Error()
	}
	if v.ClusterWhole {
		return v // a reshard's moves are the Resharding condition's, not a degradation
	}
	v.Degraded = api.ReasonClusterIncomplete
	switch {
	case err != nil:
		v.DegradedMessage = err.Error()
	case len(res.Steps) > 0:
		parts := make([]string, 0, len(res.Steps))
		for _, s := range res.Steps {
			if s.Kind == shards.Wait {
				parts = append(parts, s.Why)
			} else {
				parts = append(parts, s.String())
			}
		}
		v.DegradedMessage = strings.Join(parts, "; ")
	default:
		var notOK []string
		for _, s := range res.Seen {
			if s.Err == nil && s.View.State != "ok" {
				notOK = append(notOK, s.Name)
			}
		}
		v.DegradedMessage = "cluster_state is not ok on " + strings.Join(notOK, ", ")
	}
	return v
}
