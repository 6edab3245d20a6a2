package roles

import (
	"reflect"
	"slices"
	"strings"

	"testing"
	"time"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/member"
)

// m builds a member: ordinal i, its label, and what its server says (nil: it does not answer).
func m(i int, label string, repl *member.Replication) Member {
	s := Member{Name: "c-" + string(rune('0'+i)), Ordinal: i, IP: "198.18.0." + string(rune('1'+i)), Label: label, PodReady: true, Revision: "r1"}
	if repl != nil {
		s.Observed, s.Repl = true, *repl
	}
	return s
}

func primaryRepl(offset, keys int64) *member.Replication {
	return &member.Replication{Role: member.Primary, Offset: offset, Keys: keys, ReplID: "h1"}
}

func replicaOf(ip string, offset, keys int64, up bool) *member.Replication {
	return &member.Replication{Role: member.Replica, PrimaryHost: ip, PrimaryPort: api.Port, Offset: offset, Keys: keys, LinkUp: up, ReplID: "h1"}
}

func TestDecideRoles(t *testing.T) {
	now := time.Unix(1000, 0)
	delay := 3 * time.Second
	p0 := "198.18.0.1"
	rw := "c-rw.ns.svc.cluster.local"
	cases := []struct {
		name      string
		members   []Member
		since     time.Time
		switchTo  string
		revision  string
		replicas  int
		lastOff   int64
		wantPrim  string
		promote   bool
		switchTo2 string
		follow    []string
		labels    map[string]string
		del       string
		degraded  string
		lostBytes int64
	}{
		{name: "healthy: nothing to do",
			members:  []Member{m(0, "primary", primaryRepl(100, 5)), m(1, "replica", replicaOf(p0, 100, 5, true)), m(2, "replica", replicaOf(p0, 90, 5, true))},
			wantPrim: "c-0", labels: map[string]string{}},
		{name: "new cache: every member a replica of the Service, nothing labelled: the lowest ordinal is elected",
			members:  []Member{m(0, "replica", replicaOf(rw, 0, 0, false)), m(1, "replica", replicaOf(rw, 0, 0, false)), m(2, "replica", replicaOf(rw, 0, 0, false))},
			since:    now,
			wantPrim: "c-0", promote: true, follow: []string{"c-1", "c-2"}, labels: map[string]string{"c-0": "primary"}, degraded: api.ReasonNoPrimary},
		{name: "new cache: a member does not answer yet: wait",
			members: []Member{m(0, "replica", nil), m(1, "replica", replicaOf(rw, 0, 0, false))},
			since:   now, labels: map[string]string{}, degraded: api.ReasonNoPrimary},
		{name: "made before roles: member 0 already serves as primary with the data; it is kept and labelled, replicas repointed to its address",
			members:  []Member{m(0, "", primaryRepl(100, 5)), m(1, "", replicaOf("c-0.c.ns.svc.cluster.local", 100, 5, true))},
			since:    now,
			wantPrim: "c-0", follow: []string{"c-1"}, labels: map[string]string{"c-0": "primary", "c-1": "replica"}, degraded: api.ReasonNoPrimary},
		{name: "primary restarted (answers as a replica): replaced at once by the replica with the highest offset",
			members: []Member{m(0, "primary", replicaOf(rw, 0, 5, false)), m(1, "replica", replicaOf(p0, 90, 5, false)), m(2, "replica", replicaOf(p0, 100, 5, false))},
			since:   now, lastOff: 120,
			wantPrim: "c-2", promote: true, follow: []string{"c-0", "c-1"}, labels: map[string]string{"c-0": "replica", "c-2": "primary"},
			degraded: api.ReasonFailingOver, lostBytes: 20},
		{name: "a handover finished but the labels did not move: the member the old primary follows is the primary, not promoted again",
			members: []Member{m(0, "primary", replicaOf("198.18.0.3", 100, 5, true)), m(1, "replica", replicaOf(p0, 100, 5, true)), m(2, "replica", primaryRepl(100, 5))},
			since:   now, lastOff: 100,
			wantPrim: "c-2", follow: []string{"c-1"}, labels: map[string]string{"c-0": "replica", "c-2": "primary"}, degraded: api.ReasonHandingOver},
		{name: "primary restarted empty, replicas hold data: an empty member never wins",
			members:  []Member{m(0, "primary", replicaOf(rw, 0, 0, false)), m(1, "replica", replicaOf(p0, 50, 7, false))},
			since:    now,
			wantPrim: "c-1", promote: true, follow: []string{"c-0"}, labels: map[string]string{"c-0": "replica", "c-1": "primary"}, degraded: api.ReasonFailingOver},
		{name: "a replica that restarted empty (a history of its own) and has the highest offset loses to one on the old history",
			members: func() []Member {
				r := replicaOf(rw, 500, 0, false)
				r.ReplID = "h9"
				return []Member{m(0, "primary", nil), m(1, "replica", r), m(2, "replica", replicaOf(p0, 40, 3, false))}
			}(),
			since:    now.Add(-4 * time.Second),
			wantPrim: "c-2", promote: true, follow: []string{"c-1"}, labels: map[string]string{"c-0": "replica", "c-2": "primary"}, degraded: api.ReasonFailingOver},
		{name: "primary's container stopped (not yet restarted): replaced at once",
			members: func() []Member {
				a := m(0, "primary", nil)
				a.Stopped = true
				return []Member{a, m(1, "replica", replicaOf(p0, 90, 5, false))}
			}(),
			since:    now,
			wantPrim: "c-1", promote: true, labels: map[string]string{"c-0": "replica", "c-1": "primary"}, degraded: api.ReasonFailingOver},
		{name: "primary answering but its pod not ready: it stays (the operator's own reading decides)",
			members: func() []Member {
				a := m(0, "primary", primaryRepl(100, 5))
				a.PodReady = false
				return []Member{a, m(1, "replica", replicaOf(p0, 100, 5, true))}
			}(),
			since:    now.Add(-time.Minute),
			wantPrim: "c-0", labels: map[string]string{}},
		{name: "primary unreachable within the delay: wait",
			members: []Member{m(0, "primary", nil), m(1, "replica", replicaOf(p0, 90, 5, false))},
			since:   now.Add(-time.Second), labels: map[string]string{}, degraded: api.ReasonPrimaryUnreachable},
		{name: "primary unreachable past the delay: fail over; its label goes even though it cannot be told",
			members:  []Member{m(0, "primary", nil), m(1, "replica", replicaOf(p0, 90, 5, false))},
			since:    now.Add(-3 * time.Second),
			wantPrim: "c-1", promote: true, labels: map[string]string{"c-0": "replica", "c-1": "primary"}, degraded: api.ReasonFailingOver},
		{name: "a cache of one whose member restarted: it is promoted again",
			members:  []Member{m(0, "primary", replicaOf(rw, 0, 5, false))},
			since:    now,
			wantPrim: "c-0", promote: true, labels: map[string]string{}, degraded: api.ReasonFailingOver},
		{name: "a stray master is demoted to follow the primary",
			members:  []Member{m(0, "primary", primaryRepl(100, 5)), m(1, "replica", primaryRepl(3, 0))},
			wantPrim: "c-0", follow: []string{"c-1"}, labels: map[string]string{}, degraded: api.ReasonReplicaNotInSync},
		{name: "switchover asked for a replica in sync",
			members:  []Member{m(0, "primary", primaryRepl(100, 5)), m(1, "replica", replicaOf(p0, 100, 5, true))},
			switchTo: "c-1", wantPrim: "c-0", switchTo2: "c-1", labels: map[string]string{}},
		{name: "roll: the replica with the highest ordinal first",
			members:  []Member{m(0, "primary", primaryRepl(100, 5)), m(1, "replica", replicaOf(p0, 100, 5, true)), m(2, "replica", replicaOf(p0, 100, 5, true))},
			revision: "r2", wantPrim: "c-0", del: "c-2", labels: map[string]string{}, degraded: api.ReasonRolling},
		{name: "roll waits while a replica's pod is missing (deleted to roll it, not made anew yet)",
			members:  []Member{m(0, "primary", primaryRepl(100, 5)), m(1, "replica", replicaOf(p0, 100, 5, true))},
			replicas: 3, revision: "r2", wantPrim: "c-0", labels: map[string]string{}, degraded: api.ReasonMemberUnreachable},
		{name: "roll waits while a replica's pod is being deleted",
			members: func() []Member {
				ms := []Member{m(0, "primary", primaryRepl(100, 5)), m(1, "replica", replicaOf(p0, 100, 5, true)), m(2, "replica", replicaOf(p0, 100, 5, true))}
				ms[2].Deleting = true
				return ms
			}(),
			revision: "r2", wantPrim: "c-0", labels: map[string]string{}, degraded: api.ReasonMemberUnreachable},
		{name: "roll waits while a replica is out of sync",
			members:  []Member{m(0, "primary", primaryRepl(100, 5)), m(1, "replica", replicaOf(p0, 100, 5, true)), m(2, "replica", replicaOf(p0, 0, 0, false))},
			revision: "r2", wantPrim: "c-0", labels: map[string]string{}, degraded: api.ReasonReplicaNotInSync},
		{name: "roll: the old primary, out of sync in the other TLS mode, is rolled without waiting",
			members: func() []Member {
				a, b, c := m(0, "primary", primaryRepl(100, 5)), m(1, "replica", replicaOf(p0, 100, 5, true)), m(2, "replica", replicaOf(p0, 0, 0, false))
				a.TLS, b.TLS, a.Revision, b.Revision = true, true, "r2", "r2"
				return []Member{a, b, c}
			}(),
			revision: "r2", wantPrim: "c-0", del: "c-2", labels: map[string]string{}, degraded: api.ReasonReplicaNotInSync},
		{name: "roll: only the primary left: hand over to an updated replica",
			members: func() []Member {
				a, b := m(0, "primary", primaryRepl(100, 5)), m(1, "replica", replicaOf(p0, 100, 5, true))
				b.Revision = "r2"
				return []Member{a, b}
			}(),
			revision: "r2", wantPrim: "c-0", switchTo2: "c-1", labels: map[string]string{}, degraded: api.ReasonRolling},
		{name: "roll a cache of one: the pod is deleted",
			members:  []Member{m(0, "primary", primaryRepl(100, 5))},
			revision: "r2", wantPrim: "c-0", del: "c-0", labels: map[string]string{}, degraded: api.ReasonRolling},
		{name: "election by history: the highest offset on the old primary's history wins, keys only break ties",
			members: func() []Member {
				a, b := replicaOf(p0, 90, 5, false), replicaOf(p0, 100, 4, false)
				return []Member{m(0, "primary", nil), m(1, "replica", a), m(2, "replica", b)}
			}(),
			since: now.Add(-4 * time.Second), lastOff: 100,
			wantPrim: "c-2", promote: true, follow: []string{"c-1"}, labels: map[string]string{"c-0": "replica", "c-2": "primary"}, degraded: api.ReasonFailingOver},
		{name: "election by history: a member holding more keys on another history loses",
			members: func() []Member {
				other := replicaOf(p0, 900, 50, false)
				other.ReplID = "h7"
				return []Member{m(0, "primary", nil), m(1, "replica", other), m(2, "replica", replicaOf(p0, 80, 5, false))}
			}(),
			since: now.Add(-4 * time.Second), lastOff: 100,
			wantPrim: "c-2", promote: true, follow: []string{"c-1"}, labels: map[string]string{"c-0": "replica", "c-2": "primary"}, degraded: api.ReasonFailingOver, lostBytes: 20},
		{name: "the primary's pod is being deleted while its server runs: hand over to the most caught-up replica in sync",
			members: func() []Member {
				a := m(0, "primary", primaryRepl(100, 5))
				a.Deleting = true
				return []Member{a, m(1, "replica", replicaOf(p0, 90, 5, true)), m(2, "replica", replicaOf(p0, 95, 5, true))}
			}(),
			wantPrim: "c-0", switchTo2: "c-2", labels: map[string]string{}, degraded: api.ReasonHandingOver},
		{name: "the primary's pod is being deleted and no replica is in sync with it: a failover",
			members: func() []Member {
				a := m(0, "primary", primaryRepl(100, 5))
				a.Deleting = true
				return []Member{a, m(1, "replica", replicaOf(p0, 90, 5, false))}
			}(),
			since:    now,
			wantPrim: "c-1", promote: true, labels: map[string]string{"c-0": "replica", "c-1": "primary"}, degraded: api.ReasonFailingOver, lostBytes: 0},
		{name: "the primary's pod is being deleted and its server stopped: a failover",
			members: func() []Member {
				a := m(0, "primary", nil)
				a.Deleting, a.Stopped = true, true
				return []Member{a, m(1, "replica", replicaOf(p0, 90, 5, false))}
			}(),
			since:    now,
			wantPrim: "c-1", promote: true, labels: map[string]string{"c-0": "replica", "c-1": "primary"}, degraded: api.ReasonFailingOver},
		{name: "scale-down removes the primary's ordinal: hand over first",
			members:  []Member{m(0, "replica", replicaOf("198.18.0.3", 100, 5, true)), m(1, "replica", replicaOf("198.18.0.3", 100, 5, true)), m(2, "primary", primaryRepl(100, 5))},
			replicas: 2, wantPrim: "c-2", switchTo2: "c-0", labels: map[string]string{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			replicas := tc.replicas
			if replicas == 0 {
				replicas = len(tc.members)
			}
			rev := tc.revision
			if rev == "" {
				rev = "r1"
			}
			got := Decide(View{Now: now, Members: tc.members, Delay: delay, UnhealthySince: tc.since,
				SwitchoverTo: tc.switchTo, UpdateRevision: rev, Replicas: replicas, History: "h1"}, tc.lastOff)
			if got.Primary != tc.wantPrim || got.Promote != tc.promote || got.SwitchTo != tc.switchTo2 || got.Delete != tc.del ||
				!reflect.DeepEqual(got.Follow, tc.follow) || !reflect.DeepEqual(got.Labels, tc.labels) ||
				got.Degraded != tc.degraded || got.LostBytes != tc.lostBytes {
				t.Errorf("got primary %q promote %v switchTo %q delete %q follow %v labels %v degraded %q lost %d\n"+
					"want primary %q promote %v switchTo %q delete %q follow %v labels %v degraded %q lost %d",
					got.Primary, got.Promote, got.SwitchTo, got.Delete, got.Follow, got.Labels, got.Degraded, got.LostBytes,
					tc.wantPrim, tc.promote, tc.switchTo2, tc.del, tc.follow, tc.labels, tc.degraded, tc.lostBytes)
			}
		})
	}
}

// Without a remembered history (the operator started after the primary was lost), the history
// most members holding data share stands in for it.
func TestCommonHistory(t *testing.T) {
	a, b, c := replicaOf("x", 10, 5, false), replicaOf("x", 12, 5, false), replicaOf("x", 900, 5, false)
	c.ReplID = "h2"
	empty := replicaOf("x", 5000, 0, false)
	empty.ReplID = "h3"
	members := []Member{m(0, "replica", a), m(1, "replica", b), m(2, "replica", c), m(3, "replica", empty), m(4, "replica", nil)}
	if got := commonHistory(members); got != "h1" {
		t.Errorf("commonHistory = %q; want h1 (two members with keys)", got)
	}
	if got := commonHistory([]Member{m(0, "replica", empty)}); got != "" {
		t.Errorf("commonHistory of an empty member = %q; want none", got)
	}
	best, _ := bestCandidate(members, "", commonHistory(members))
	if best.Name != "c-1" {
		t.Errorf("best without a remembered history: %s; want c-1 (highest offset on h1)", best.Name)
	}
}

// Discarded measures what a deposed primary took past the fork of the new primary's history.
func TestDiscarded(t *testing.T) {
	promoted := member.Replication{Role: member.Primary, ReplID: "h2", ReplID2: "h1", SecondOffset: 1001, Offset: 5000}
	for _, tc := range []struct {
		name    string
		deposed member.Replication
		bytes   int64
		known   bool
	}{
		{"took 500 bytes after the fork", member.Replication{Role: member.Primary, ReplID: "h1", Offset: 1500}, 500, true},
		{"took nothing after the fork", member.Replication{Role: member.Primary, ReplID: "h1", Offset: 1000}, 0, true},
		{"behind the fork", member.Replication{Role: member.Primary, ReplID: "h1", Offset: 900}, 0, true},
		{"already on the primary's history", member.Replication{Role: member.Primary, ReplID: "h2", Offset: 4000}, 0, true},
		{"a history of its own (restarted)", member.Replication{Role: member.Primary, ReplID: "h9", Offset: 70}, 0, false},
		{"a stray that left the primary's history at 4500 and took 300 bytes", member.Replication{Role: member.Primary, ReplID: "h5", ReplID2: "h2", SecondOffset: 4501, Offset: 4800}, 300, true},
	} {
		b, k := Discarded(promoted, tc.deposed)
		if b != tc.bytes || k != tc.known {
			t.Errorf("%s: %d bytes, known %v; want %d, %v", tc.name, b, k, tc.bytes, tc.known)
		}
	}
}

// A new cache restoring a backup: the restored member (c-0) is the first primary, never an empty
// member that answered first, even once the failover delay has passed.
func TestRestoredMemberIsTheFirstPrimary(t *testing.T) {
	now := time.Unix(1000, 0)
	rw := "c-rw.ns.svc.cluster.local"
	restoring := []Member{m(0, "replica", nil), m(1, "replica", replicaOf(rw, 0, 0, false)), m(2, "replica", replicaOf(rw, 0, 0, false))}
	v := View{Now: now, Members: restoring, Delay: 3 * time.Second, UnhealthySince: now.Add(-time.Hour), UpdateRevision: "r1", Replicas: 3, RestoreFrom: "c-0"}
	if got := Decide(v, 0); got.Primary != "" || got.Promote || len(got.Labels) != 0 || got.Degraded != api.ReasonNoPrimary {
		t.Errorf("while c-0 restores: primary %q promote %v labels %v degraded %q; want no primary, waiting", got.Primary, got.Promote, got.Labels, got.Degraded)
	}
	// Without the guard, an empty member would have been elected by now.
	v.RestoreFrom = ""
	if got := Decide(v, 0); got.Primary == "" {
		t.Fatalf("without RestoreFrom no member was elected: the case does not test the guard")
	}
	v.RestoreFrom = "c-0"
	v.Members[0] = m(0, "replica", replicaOf(rw, 0, 1000, false))
	got := Decide(v, 0)
	if got.Primary != "c-0" || !got.Promote || got.Labels["c-0"] != "primary" || !reflect.DeepEqual(got.Follow, []string{"c-1", "c-2"}) {
		t.Errorf("once c-0 answers: primary %q promote %v labels %v follow %v; want c-0 promoted, the others following", got.Primary, got.Promote, got.Labels, got.Follow)
	}
	// Every member restored the snapshot; c-0 started as a primary with its AOF off. It is elected
	// only once it loaded and its AOF is on (the base being written in the background is no
	// reason to wait), and then not promoted again (it keeps the snapshot's history for the
	// others' partial resyncs).
	restored := func(loading, off, rewriting bool) *member.Replication {
		r := primaryRepl(1000, 1)
		r.Loading, r.AOFOff, r.AOFRewriting = loading, off, rewriting
		return r
	}
	for _, tc := range []struct {
		name                    string
		loading, off, rewriting bool
	}{{"loading", true, true, false}, {"loaded, its AOF off", false, true, false}} {
		v.Members[0] = m(0, "replica", restored(tc.loading, tc.off, tc.rewriting))
		if got := Decide(v, 0); got.Primary != "" || got.Promote || len(got.Labels) != 0 || got.Degraded != api.ReasonNoPrimary || got.WaitUntil.IsZero() {
			t.Errorf("c-0 %s: primary %q promote %v labels %v degraded %q wait %v; want no primary yet, a wait", tc.name, got.Primary, got.Promote, got.Labels, got.Degraded, got.WaitUntil)
		}
	}
	// Loaded with its AOF on, but a member does not answer yet (its restore may not have begun):
	// wait for it until RestoreWait (longer than the delay) has passed since the cache was first
	// seen without a primary.
	v.Members[0] = m(0, "replica", restored(false, false, true))
	silent := v.Members[2]
	v.Members[2] = m(2, "replica", nil)
	v.UnhealthySince = now.Add(-10 * time.Second)
	if got := Decide(v, 0); got.Primary != "" || len(got.Labels) != 0 || !got.WaitUntil.Equal(now.Add(RestoreWait-10*time.Second)) {
		t.Errorf("c-2 silent for 10 s: primary %q labels %v wait %v; want no primary until %v", got.Primary, got.Labels, got.WaitUntil, now.Add(RestoreWait-10*time.Second))
	}
	v.UnhealthySince = now.Add(-time.Hour)
	if got := Decide(v, 0); got.Primary != "c-0" {
		t.Errorf("c-2 silent past the delay: primary %q; want c-0 elected", got.Primary)
	}
	v.Members[2] = silent
	got = Decide(v, 0)
	if got.Primary != "c-0" || got.Promote || got.Labels["c-0"] != "primary" || !reflect.DeepEqual(got.Follow, []string{"c-1", "c-2"}) {
		t.Errorf("c-0 with its AOF on: primary %q promote %v labels %v follow %v; want c-0 labelled, not promoted, the others following", got.Primary, got.Promote, got.Labels, got.Follow)
	}
}

// A reset (a version change the data cannot survive, allowed by the cache) deletes every member
// on the old revision at once, the primary with them, and does nothing else until they are all on
// the new revision; then the cache elects as a new one does.
func TestResetDeletesEveryOldMemberAtOnce(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	p := m(0, api.RolePrimary, primaryRepl(500, 10))
	r1 := m(1, api.RoleReplica, replicaOf(p.IP, 500, 10, true))
	r2 := m(2, api.RoleReplica, replicaOf(p.IP, 500, 10, true))
	v := View{Now: now, Members: []Member{p, r1, r2}, Delay: 5 * time.Second, UpdateRevision: "r2", Replicas: 3,
		Reset: "redis 8.0 to redis 7.0: it reads formats up to 10"}
	act := Decide(v, 500)
	if !slices.Equal(act.DeleteAll, []string{"c-0", "c-1", "c-2"}) || act.Delete != "" || act.SwitchTo != "" || act.Promote ||
		act.Degraded != api.ReasonRolling || !strings.Contains(act.DegradedMessage, "redis 8.0 to redis 7.0") {
		t.Errorf("first pass: %+v", act)
	}
	// Deleting: nothing is asked of them again, and no handover from the deleting primary.
	for i := range v.Members {
		v.Members[i].Deleting = true
	}
	if act := Decide(v, 500); len(act.DeleteAll) != 0 || act.SwitchTo != "" || act.Promote || act.Primary != "" {
		t.Errorf("while they go: %+v", act)
	}
	// All back on the new revision, empty, as replicas: one is elected, as in a new cache.
	var fresh []Member
	for i := 0; i < 3; i++ {
		n := m(i, api.RoleReplica, replicaOf("", 0, 0, false))
		n.Revision = "r2"
		fresh = append(fresh, n)
	}
	v.Members, v.UnhealthySince = fresh, now.Add(-10*time.Second)
	if act := Decide(v, 500); len(act.DeleteAll) != 0 || !act.Promote || act.Primary == "" {
		t.Errorf("after the reset: %+v", act)
	}
	// Without a reset the same view rolls one replica at a time.
	v.Members, v.Reset = []Member{p, r1, r2}, ""
	if act := Decide(v, 500); len(act.DeleteAll) != 0 || act.Delete != "c-2" {
		t.Errorf("a roll without a reset: %+v", act)
	}
}

// A resumed cache elects the primary it had before it hibernated, though a replica reports a
// higher offset on the old history (members restart as replicas, on histories of their own), once
// it answers with its data; it waits for it up to RestoreWait, then elects without it.
func TestResumeElectsThePrimaryBeforeHibernation(t *testing.T) {
	now := time.Unix(1000, 0)
	rw := "c-rw.ns.svc.cluster.local"
	onHistory := func(offset, keys int64, id string) *member.Replication {
		r := replicaOf(rw, offset, keys, false)
		r.ReplID = id
		return r
	}
	v := View{Now: now, Delay: 3 * time.Second, UnhealthySince: now.Add(-5 * time.Second), UpdateRevision: "r1", Replicas: 3, History: "h1",
		Members: []Member{m(0, "", onHistory(900, 100, "h1")), m(1, "", onHistory(0, 100, "h9")), m(2, "", onHistory(900, 99, "h1"))}}
	if got := Decide(v, 0); got.Primary != "c-0" {
		t.Fatalf("without a preference: primary %q; want c-0 (the case must not elect c-1 by itself)", got.Primary)
	}
	v.Prefer = "c-1"
	got := Decide(v, 0)
	if got.Primary != "c-1" || !got.Promote || got.Labels["c-1"] != "primary" || !reflect.DeepEqual(got.Follow, []string{"c-0", "c-2"}) {
		t.Errorf("resuming with c-1 preferred: primary %q promote %v labels %v follow %v; want c-1 promoted, the others following", got.Primary, got.Promote, got.Labels, got.Follow)
	}
	// Not answering yet, or loading: wait, a second at a time, until RestoreWait.
	for _, pref := range []Member{m(1, "", nil), m(1, "", &member.Replication{Role: member.Replica, Loading: true, ReplID: "h9"})} {
		v.Members[1] = pref
		if got := Decide(v, 0); got.Primary != "" || len(got.Labels) != 0 || !got.WaitUntil.Equal(now.Add(time.Second)) || !strings.Contains(got.DegradedMessage, "c-1") {
			t.Errorf("c-1 observed %v loading %v: primary %q labels %v wait %v (%s); want a wait of a second for c-1", pref.Observed, pref.Repl.Loading, got.Primary, got.Labels, got.WaitUntil, got.DegradedMessage)
		}
	}
	v.UnhealthySince = now.Add(-RestoreWait)
	if got := Decide(v, 0); got.Primary != "c-0" {
		t.Errorf("c-1 still loading after RestoreWait: primary %q; want the election without it (c-0)", got.Primary)
	}
	// Answering empty while others hold keys (its volume lost): not preferred.
	v.UnhealthySince = now.Add(-5 * time.Second)
	v.Members[1] = m(1, "", onHistory(0, 0, "h9"))
	if got := Decide(v, 0); got.Primary != "c-0" {
		t.Errorf("c-1 empty: primary %q; want c-0", got.Primary)
	}
}

// A primary whose pod was deleted and made anew has lost its label: with the last healthy primary
// known, replacing it is a failover from it (reported and counted as one), after the delay while
// its new pod does not answer, at once when it answers as a replica or is gone.
func TestPrimaryReplacedWithoutItsLabelIsAFailover(t *testing.T) {
	now := time.Unix(1000, 0)
	ip0 := "198.18.0.1"
	members := []Member{m(0, "replica", replicaOf(ip0, 900, 10, false)), m(1, "replica", replicaOf(ip0, 1000, 10, false)), m(2, "", nil)}
	v := View{Now: now, Members: members, Delay: 3 * time.Second, UnhealthySince: now.Add(-time.Second), UpdateRevision: "r1", Replicas: 3, History: "h1"}
	if got := Decide(v, 1000); got.From != "" {
		t.Fatalf("without LastPrimary: from %q; want a plain election (the case must tell the difference)", got.From)
	}
	v.LastPrimary = "c-2"
	got := Decide(v, 1000)
	if got.Primary != "" || got.Degraded != api.ReasonPrimaryUnreachable || !got.WaitUntil.Equal(now.Add(2*time.Second)) {
		t.Errorf("c-2's new pod silent for 1 s: primary %q degraded %q wait %v; want the delay waited out", got.Primary, got.Degraded, got.WaitUntil)
	}
	v.UnhealthySince = now.Add(-5 * time.Second)
	got = Decide(v, 1000)
	if got.Primary != "c-1" || got.From != "c-2" || !got.Promote || got.Degraded != api.ReasonFailingOver {
		t.Errorf("after the delay: primary %q from %q promote %v degraded %q; want a failover from c-2 to c-1", got.Primary, got.From, got.Promote, got.Degraded)
	}
	// Its pod gone from the informer altogether: at once.
	v.UnhealthySince, v.Members = now.Add(-time.Second), members[:2]
	if got := Decide(v, 1000); got.Primary != "c-1" || got.From != "c-2" {
		t.Errorf("c-2's pod gone: primary %q from %q; want a failover from c-2 to c-1 at once", got.Primary, got.From)
	}
}

// Every member restarted at once (all pods deleted, a StatefulSet with them): none replicated
// anything since, so no offset proves what it holds, and the lost primary, back on its volume,
// holds every write it acknowledged. It is waited for (up to RestoreWait) and elected again,
// even where another member holds more keys; a replica that carries the stream wins as before.
func TestEveryMemberRestartedElectsTheLastPrimary(t *testing.T) {
	now := time.Unix(1000, 0)
	rw := "c-rw.ns.svc.cluster.local"
	fresh := func(id string, keys int64) *member.Replication {
		return &member.Replication{Role: member.Replica, PrimaryHost: rw, PrimaryPort: api.Port, Keys: keys, ReplID: id}
	}
	v := View{Now: now, Delay: 3 * time.Second, UnhealthySince: now.Add(-5 * time.Second), UpdateRevision: "r1", Replicas: 3,
		History: "h1", LastPrimary: "c-0",
		Members: []Member{m(0, "replica", nil), m(1, "replica", fresh("a", 900)), m(2, "replica", fresh("b", 950))}}
	got := Decide(v, 1000)
	if got.Primary != "" || got.Degraded != api.ReasonNoPrimary || got.WaitUntil.IsZero() || !strings.Contains(got.DegradedMessage, "c-0") {
		t.Fatalf("c-0 not back yet: primary %q degraded %q (%s) wait %v; want c-0 waited for", got.Primary, got.Degraded, got.DegradedMessage, got.WaitUntil)
	}
	v.Members[0] = m(0, "replica", fresh("c", 940))
	got = Decide(v, 1000)
	if got.Primary != "c-0" || got.From != "c-0" || !got.Promote || got.Degraded != api.ReasonFailingOver {
		t.Errorf("c-0 back with its data: primary %q from %q promote %v degraded %q; want c-0 promoted again", got.Primary, got.From, got.Promote, got.Degraded)
	}
	// Loading its data: still waited for.
	v.Members[0].Repl.Loading = true
	if got := Decide(v, 1000); got.Primary != "" {
		t.Errorf("c-0 loading: primary %q; want it waited for", got.Primary)
	}
	// Back empty (its volume lost): the member with the most keys.
	v.Members[0] = m(0, "replica", fresh("c", 0))
	if got := Decide(v, 1000); got.Primary != "c-2" {
		t.Errorf("c-0 back empty: primary %q; want c-2, the most keys", got.Primary)
	}
	// Never back within RestoreWait: the election goes on without it.
	v.Members[0] = m(0, "replica", nil)
	v.UnhealthySince = now.Add(-RestoreWait - time.Second)
	if got := Decide(v, 1000); got.Primary != "c-2" {
		t.Errorf("c-0 silent past RestoreWait: primary %q; want c-2", got.Primary)
	}
	// A replica that carries the lost primary's stream (it has replicated): a failover as before.
	v.UnhealthySince = now.Add(-5 * time.Second)
	v.Members = []Member{m(0, "replica", fresh("c", 940)), m(1, "replica", replicaOf("198.18.0.1", 990, 900, false)), m(2, "replica", fresh("b", 950))}
	if got := Decide(v, 1000); got.Primary != "c-1" {
		t.Errorf("c-1 carries the stream: primary %q; want c-1", got.Primary)
	}
	// ... unless the lost primary stopped on purpose (its pod deleted, no handover): then it is
	// waited for, and elected again, since a replica may lack what it acknowledged last.
	v.LastPrimaryStopped = true
	v.Members[0] = m(0, "replica", nil)
	if got := Decide(v, 1000); got.Primary != "" || got.Degraded != api.ReasonNoPrimary {
		t.Errorf("c-0 stopped on purpose, not back: primary %q degraded %q; want it waited for", got.Primary, got.Degraded)
	}
	v.Members[0] = m(0, "replica", fresh("c", 940))
	if got := Decide(v, 1000); got.Primary != "c-0" || !got.Promote {
		t.Errorf("c-0 stopped on purpose, back: primary %q promote %v; want c-0 again", got.Primary, got.Promote)
	}
	// A replica that never synced since it started reports offset 1: it carries nothing.
	v.LastPrimaryStopped = false
	v.Members = []Member{m(0, "replica", fresh("c", 940)), m(1, "replica", fresh("a", 900)), m(2, "replica", fresh("b", 950))}
	v.Members[1].Repl.Offset, v.Members[2].Repl.Offset = 1, 1
	if got := Decide(v, 1000); got.Primary != "c-0" {
		t.Errorf("replicas at offset 1 (never synced): primary %q; want c-0, the primary before", got.Primary)
	}
}
