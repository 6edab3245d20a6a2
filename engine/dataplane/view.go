package dataplane

import (
	"time"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/metrics"
	"example.com/cache-operator/engine/roles"
)

// observedView is the status view of a member pass.
func observedView(members []roles.Member, act roles.Action) api.MembersView {
	v := api.MembersView{Observed: true, Degraded: act.Degraded, DegradedMessage: act.DegradedMessage}
	var primaryOffset int64 = -1
	var primaryID string
	for _, m := range members {
		if m.Name == act.Primary && m.IsPrimary() && m.Label == api.RolePrimary {
			v.Primary = m.Name
			primaryOffset, primaryID = m.Repl.Offset, m.Repl.ReplID
		}
	}
	for _, m := range members {
		s := api.MemberStatus{Name: m.Name, Role: "unknown", ConfigRevision: m.ConfigRevision, PasswordRevision: m.PasswordRevision}
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
				s.LagBytes = api.RoundLag(primaryOffset - m.Repl.Offset)
			}
		}
		v.Members = append(v.Members, s)
	}
	return v
}

// sampleOf is the per-member metrics' sample of a member pass: v is its view (whose Primary is
// the member serving as primary, "" when none does).
func sampleOf(ns, name string, members []roles.Member, v api.MembersView, last *api.FailoverStatus) metrics.CacheSample {
	c := metrics.CacheSample{Namespace: ns, Cache: name}
	if last != nil {
		if t, err := time.Parse(time.RFC3339, last.Time); err == nil {
			c.LastFailover, c.LastFailoverTo, c.LastFailoverKind = t, last.To, last.Kind
		}
	}
	var primary *roles.Member
	for i := range members {
		if members[i].Name == v.Primary {
			primary = &members[i]
		}
	}
	for i, m := range members {
		s := metrics.MemberSample{Member: m.Name, Up: m.Observed, Role: v.Members[i].Role}
		if m.Observed {
			r := m.Repl
			s.Offset, s.LinkUp, s.Keys = r.Offset, r.LinkUp, r.Keys
			s.UsedMemory, s.MaxMemory, s.EvictedKeys, s.ExpiredKeys, s.Clients = r.Stats.UsedMemory, r.Stats.MaxMemory, r.Stats.EvictedKeys, r.Stats.ExpiredKeys, r.Stats.Clients
			if primary != nil && r.ReplID == primary.Repl.ReplID {
				s.Lag, s.HasLag = max(0, primary.Repl.Offset-r.Offset), true
			}
		}
		c.Members = append(c.Members, s)
	}
	return c
}
