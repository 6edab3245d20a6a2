package dataplane

import (
	"testing"
	"time"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/member"
	"example.com/cache-operator/engine/roles"
)

func TestRoundLag(t *testing.T) {
	for lag, want := range map[int64]int64{-5: 0, 0: 0, 1<<20 - 1: 0, 1 << 20: 1 << 20, 3 << 20: 2 << 20, 5 << 30: 4 << 30} {
		if got := api.RoundLag(lag); got != want {
			t.Errorf("RoundLag(%d) = %d; want %d", lag, got, want)
		}
	}
}

// The metrics' sample of a pass: exact lag on the primary's history only, figures of the members
// read, the last failover from the record.
func TestSampleOf(t *testing.T) {
	stats := member.Stats{UsedMemory: 10, MaxMemory: 20, EvictedKeys: 1, ExpiredKeys: 2, Clients: 3}
	members := []roles.Member{
		{Name: "c-0", Ordinal: 0, Label: api.RolePrimary, Observed: true, Repl: member.Replication{Role: member.Primary, Offset: 5000, ReplID: "h1", Keys: 7, Stats: stats}},
		{Name: "c-1", Ordinal: 1, Label: api.RoleReplica, Observed: true, Repl: member.Replication{Role: member.Replica, Offset: 4990, ReplID: "h1", LinkUp: true, Keys: 7}},
		{Name: "c-2", Ordinal: 2, Label: api.RoleReplica, Observed: true, Repl: member.Replication{Role: member.Replica, Offset: 9999, ReplID: "h0"}},
		{Name: "c-3", Ordinal: 3, Label: api.RoleReplica},
	}
	v := observedView(members, roles.Action{Primary: "c-0"})
	last := &api.FailoverStatus{Time: "2026-12-03T10:00:00Z", Kind: "failover", From: "c-1", To: "c-0"}
	s := sampleOf("ns", "c", members, v, last)
	if s.Namespace != "ns" || s.Cache != "c" || s.LastFailoverTo != "c-0" || s.LastFailoverKind != "failover" || !s.LastFailover.Equal(time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)) {
		t.Errorf("sample %+v; want ns/c, the last failover to c-0 at 10:00", s)
	}
	want := []struct {
		role         string
		up, hasLag   bool
		lag, offset  int64
		used, evicts int64
	}{
		{"primary", true, true, 0, 5000, 10, 1},
		{"replica", true, true, 10, 4990, 0, 0},
		{"replica", true, false, 0, 9999, 0, 0}, // on another history: no lag to tell
		{"unknown", false, false, 0, 0, 0, 0},
	}
	for i, w := range want {
		m := s.Members[i]
		if m.Role != w.role || m.Up != w.up || m.HasLag != w.hasLag || m.Lag != w.lag || m.Offset != w.offset || m.UsedMemory != w.used || m.EvictedKeys != w.evicts {
			t.Errorf("member %d: %+v; want %+v", i, m, w)
		}
	}
	if !s.Members[1].LinkUp || s.Members[0].Keys != 7 || s.Members[0].Clients != 3 {
		t.Errorf("link, keys or clients not carried: %+v", s.Members)
	}
	if s := sampleOf("ns", "c", members, v, nil); !s.LastFailover.IsZero() {
		t.Errorf("no record, yet a last failover at %v", s.LastFailover)
	}
}
