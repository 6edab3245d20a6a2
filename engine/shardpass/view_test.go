package shardpass

import (
	"errors"
	"strings"
	"testing"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/member"
	"example.com/cache-operator/engine/shards"
)

// What a sharded cache's pass publishes: each member's role (unknown when it does not answer),
// whole only when the pass found nothing to do but a reshard's moves and no error, and otherwise the phase it carried
// out, what it waits for, the error, or the members whose cluster is not ok.
func TestShardedView(t *testing.T) {
	seen := func(name string, primary bool, state string, err error) Seen {
		return Seen{Member: Member{Name: name}, View: member.ClusterView{Primary: primary, State: state}, Err: err}
	}
	ok := []Seen{seen("c-s1-0", true, "ok", nil), seen("c-s0-1", false, "ok", nil), seen("c-s0-0", true, "ok", nil)}
	for _, tc := range []struct {
		name    string
		res     Result
		err     error
		whole   bool
		message string
		roles   string
	}{
		{"whole", Result{Seen: ok, Whole: true, Serving: true}, nil, true, "", "c-s0-0=primary c-s0-1=replica c-s1-0=primary"},
		{"a reshard's moves: whole but for its layout, not degraded", Result{Seen: ok, Serving: true, SlotsToMove: 100, SlotsKnown: true,
			Steps: []shards.Step{{Kind: shards.Move, Member: "c-s0-0", Target: "c-s1-0", Reshard: true}}}, nil, true, "", ""},
		{"a member down", Result{Seen: []Seen{seen("c-s0-0", true, "ok", nil), seen("c-s0-1", false, "", errors.New("i/o timeout"))},
			Steps: []shards.Step{{Kind: shards.Wait, Why: "waiting for c-s0-1 to answer"}}}, nil, false, "waiting for c-s0-1 to answer", "c-s0-0=primary c-s0-1=unknown"},
		{"a phase carried out", Result{Seen: ok, Steps: []shards.Step{{Kind: shards.Replicate, Member: "c-s0-1", Target: "c-s0-0"}}}, nil, false,
			"Replicate c-s0-1 → c-s0-0", ""},
		{"a step failed", Result{Seen: ok, Whole: true, Serving: true}, errors.New("CLUSTER MEET: connection refused"), false, "CLUSTER MEET: connection refused", ""},
		{"nothing to do, a member not ok", Result{Seen: []Seen{seen("c-s0-0", true, "fail", nil)}}, nil, false, "cluster_state is not ok on c-s0-0", ""},
	} {
		v := tc.res.View(tc.err)
		if v.ClusterWhole != tc.whole || !v.Observed {
			t.Errorf("%s: whole %v, observed %v; want whole %v", tc.name, v.ClusterWhole, v.Observed, tc.whole)
		}
		if tc.whole && v.Degraded != "" || !tc.whole && (v.Degraded != api.ReasonClusterIncomplete || !strings.Contains(v.DegradedMessage, tc.message)) {
			t.Errorf("%s: degraded %q %q; want %q", tc.name, v.Degraded, v.DegradedMessage, tc.message)
		}
		if tc.roles != "" {
			var got []string
			for _, m := range v.Members {
				got = append(got, m.Name+"="+m.Role)
			}
			if strings.Join(got, " ") != tc.roles {
				t.Errorf("%s: roles %v; want %s", tc.name, got, tc.roles)
			}
		}
	}
}
