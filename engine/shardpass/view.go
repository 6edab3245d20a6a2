package shardpass

import (
	"sort"
	"strconv"
	"strings"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/member"
	"example.com/cache-operator/engine/metrics"
	"example.com/cache-operator/engine/shards"
)

// Sample is the per-member metrics' sample of the pass: each member with its shard,
// a replica's lag against its shard's primary (the member it replicates, when on its history),
// and the cluster's state and the slots the primaries that answered serve.
func (res Result) Sample(ns, name string) metrics.CacheSample {
	c := metrics.CacheSample{Namespace: ns, Cache: name, Cluster: &metrics.ClusterSample{StateOK: len(res.Seen) > 0}}
	byID := map[string]Seen{}
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

// View is what the pass found, for the cache's status (err: the pass's error): each member's role (primary: it serves
// slots; a replica's lag behind its primary, as a primary/replica cache's status rounds it), whether the cluster is
// whole, and if not, the phase it needs or what it waits for.
func (res Result) View(err error) api.MembersView {
	v := api.MembersView{Observed: true, ClusterWhole: res.Serving && err == nil, SlotsToMove: int64(res.SlotsToMove),
		SlotsKnown: res.SlotsKnown, RetiredEmpty: res.RetiredEmpty}
	byID := map[string]Seen{}
	for _, s := range res.Seen {
		if s.Err == nil {
			byID[s.View.ID] = s
		}
	}
	for _, s := range res.Seen {
		ms := api.MemberStatus{Name: s.Name, Role: api.RoleReplica}
		if s.Err == nil && s.Repl.AOFOff && v.AOFOff == "" {
			v.AOFOff = s.Name
		}
		switch {
		case s.Err != nil:
			ms.Role = "unknown"
		case !s.View.Primary:
			if p, ok := byID[s.View.PrimaryID]; ok && p.Repl.ReplID == s.Repl.ReplID {
				ms.LagBytes = api.RoundLag(p.Repl.Offset - s.Repl.Offset)
			}
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
