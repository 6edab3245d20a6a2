package shards

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// cluster builds the members of a cache of shards × per members, named c-<shard>-<ordinal>, every
// one answering, every one knowing every other at its address, shard i's first member serving
// Even(shards)[i] and the others replicating it: a whole cluster, which tests then change.
func cluster(shards, per int) []Node {
	var nodes []Node
	even := Even(shards)
	for s := 0; s < shards; s++ {
		for o := 0; o < per; o++ {
			n := Node{Member: fmt.Sprintf("c-%d-%d", s, o), Shard: s, Ordinal: o, Addr: fmt.Sprintf("10.0.%d.%d:6379", s, o),
				Observed: true, ID: fmt.Sprintf("id-%d-%d", s, o), OK: true}
			if o == 0 {
				n.Primary, n.Slots = true, []Range{even[s]}
			} else {
				n.PrimaryID = fmt.Sprintf("id-%d-0", s)
			}
			nodes = append(nodes, n)
		}
	}
	for i := range nodes {
		nodes[i].Known, nodes[i].Serving = map[string]string{}, map[string]bool{}
		for _, o := range nodes {
			if o.ID != nodes[i].ID {
				nodes[i].Known[o.ID] = o.Addr
				nodes[i].Serving[o.ID] = len(o.Slots) > 0
			}
		}
	}
	return nodes
}

// fresh is cluster with every member just started: a master that serves nothing and knows no one.
func fresh(shards, per int) []Node {
	nodes := cluster(shards, per)
	for i := range nodes {
		nodes[i].Primary, nodes[i].PrimaryID, nodes[i].Slots, nodes[i].OK = true, "", nil, false
		nodes[i].Known, nodes[i].Serving = nil, nil
	}
	return nodes
}

func member(nodes []Node, name string) *Node {
	for i := range nodes {
		if nodes[i].Member == name {
			return &nodes[i]
		}
	}
	panic("no member " + name)
}

func strs(steps []Step) []string {
	out := make([]string, len(steps))
	for i, s := range steps {
		out[i] = s.String()
	}
	return out
}

func TestEven(t *testing.T) {
	for _, n := range []int{1, 3, 4, 6, 7, 100} {
		r := Even(n)
		if len(r) != n || r[0].From != 0 || r[n-1].To != Slots-1 {
			t.Fatalf("Even(%d) = %v: want %d ranges from 0 to %d", n, r, n, Slots-1)
		}
		lo, hi := Slots, 0
		for i, x := range r {
			if i > 0 && x.From != r[i-1].To+1 {
				t.Fatalf("Even(%d): %v does not follow %v", n, x, r[i-1])
			}
			lo, hi = min(lo, x.To-x.From+1), max(hi, x.To-x.From+1)
		}
		if hi-lo > 1 {
			t.Errorf("Even(%d): sizes from %d to %d; want within one", n, lo, hi)
		}
	}
	if got := Even(3); !reflect.DeepEqual(got, []Range{{0, 5460}, {5461, 10921}, {10922, 16383}}) {
		t.Errorf("Even(3) = %v", got)
	}
}

func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		name   string
		nodes  func() []Node
		spec   Spec
		want   []string
		whyHas string // a part of the first step's Why
	}{
		{name: "a whole cluster needs nothing", nodes: func() []Node { return cluster(3, 2) }, spec: Spec{Shards: 3, PerShard: 2}},
		{name: "a leaving primary hands its slots to its replica that stays", spec: Spec{Shards: 3, PerShard: 3},
			nodes: func() []Node {
				n := cluster(3, 3)
				member(n, "c-1-0").Leaving = true
				member(n, "c-1-1").Leaving = true // itself on its way out: not the one
				return n
			},
			want: []string{"Failover c-1-2 → c-1-0"}, whyHas: "c-1-0, shard 1's primary, is leaving"},
		{name: "a leaving replica, or a leaving primary without a replica, needs no handover", spec: Spec{Shards: 3, PerShard: 1},
			nodes: func() []Node {
				n := cluster(3, 1)
				member(n, "c-0-0").Leaving = true
				return n
			}},
		{name: "a member that does not answer is waited for", spec: Spec{Shards: 3, PerShard: 2},
			nodes: func() []Node { n := cluster(3, 2); member(n, "c-1-1").Observed = false; return n },
			want:  []string{"Wait "}, whyHas: "c-1-1"},
		{name: "new members are introduced to the first", spec: Spec{Shards: 3, PerShard: 2},
			nodes: func() []Node { return fresh(3, 2) },
			want:  []string{"Meet c-0-0 → c-0-1", "Meet c-0-0 → c-1-0", "Meet c-0-0 → c-1-1", "Meet c-0-0 → c-2-0", "Meet c-0-0 → c-2-1"}},
		{name: "introduced to the first, not to each other (a peer's old address kept): they meet directly", spec: Spec{Shards: 2, PerShard: 2},
			nodes: func() []Node {
				n := cluster(2, 2)
				delete(member(n, "c-1-1").Known, "id-1-0")
				member(n, "c-0-1").Known["id-1-1"] = "10.0.9.9:6379"
				return n
			},
			want: []string{"Meet c-0-1 → c-1-1", "Meet c-1-1 → c-1-0"}, whyHas: "c-0-1 does not know c-1-1 at 10.0.1.1:6379"},
		{name: "a new cluster, introduced: each shard's first member takes its even part", spec: Spec{Shards: 3, PerShard: 2},
			nodes: func() []Node {
				n := cluster(3, 2)
				for i := range n {
					n[i].Primary, n[i].PrimaryID, n[i].Slots = true, "", nil
					for id := range n[i].Serving {
						n[i].Serving[id] = false
					}
				}
				return n
			},
			want: []string{"AddSlots c-0-0 [0-5460]", "AddSlots c-1-0 [5461-10921]", "AddSlots c-2-0 [10922-16383]"}},
		{name: "slots assigned: the others replicate their shard's primary", spec: Spec{Shards: 3, PerShard: 2},
			nodes: func() []Node {
				n := cluster(3, 2)
				for i := range n {
					if n[i].Ordinal > 0 {
						n[i].Primary, n[i].PrimaryID = true, ""
					}
				}
				member(n, "c-2-1").PrimaryID, member(n, "c-2-1").Primary = "id-0-0", false // following another shard
				return n
			},
			want: []string{"Replicate c-0-1 → c-0-0", "Replicate c-1-1 → c-1-0", "Replicate c-2-1 → c-2-0"}},
		{name: "after the cluster's own failover the promoted replica is the shard's primary", spec: Spec{Shards: 3, PerShard: 2},
			nodes: func() []Node {
				n := cluster(3, 2)
				old, promoted := member(n, "c-1-0"), member(n, "c-1-1")
				promoted.Primary, promoted.PrimaryID, promoted.Slots = true, "", old.Slots
				old.Primary, old.Slots = true, nil // back, still a master of nothing
				return n
			},
			want: []string{"Replicate c-1-0 → c-1-1"}},
		{name: "a former primary left a master with keys and no slots is emptied first", spec: Spec{Shards: 2, PerShard: 2},
			nodes: func() []Node {
				n := cluster(2, 2)
				m := member(n, "c-1-1")
				m.Primary, m.PrimaryID, m.Keys = true, "", 42
				return n
			},
			want: []string{"Flush c-1-1 → c-1-0"}, whyHas: "holds 42 keys that no client reaches"},
		{name: "a member with keys the cluster calls master while its replication follows a primary is restarted, not emptied", spec: Spec{Shards: 2, PerShard: 2},
			nodes: func() []Node {
				n := cluster(2, 2)
				m := member(n, "c-1-1")
				m.Primary, m.PrimaryID, m.Keys, m.Follows = true, "", 42, "10.0.1.0:6379"
				return n
			},
			want: []string{"Restart c-1-1 → c-1-0"}, whyHas: "no command leaves that state"},
		{name: "the same without keys is attached as it is", spec: Spec{Shards: 2, PerShard: 2},
			nodes: func() []Node {
				n := cluster(2, 2)
				m := member(n, "c-1-1")
				m.Primary, m.PrimaryID, m.Follows = true, "", "10.0.1.0:6379"
				return n
			},
			want: []string{"Replicate c-1-1 → c-1-0"}},
		{name: "emptied, it follows its shard's primary", spec: Spec{Shards: 2, PerShard: 2},
			nodes: func() []Node {
				n := cluster(2, 2)
				m := member(n, "c-1-1")
				m.Primary, m.PrimaryID = true, ""
				return n
			},
			want: []string{"Replicate c-1-1 → c-1-0"}},
		{name: "a master with keys and no slots waits while a restore runs", spec: Spec{Shards: 2, PerShard: 2, Restored: [][]Range{{Even(2)[0]}, {Even(2)[1]}}},
			nodes: func() []Node {
				n := cluster(2, 2)
				m := member(n, "c-1-1")
				m.Primary, m.PrimaryID, m.Keys = true, "", 42
				return n
			},
			want: []string{"Wait c-1-1"}, whyHas: "emptied once every slot is served"},
		{name: "a replica that took its primary's new address from gossip is pointed at it again", spec: Spec{Shards: 2, PerShard: 2},
			nodes: func() []Node {
				n := cluster(2, 2)
				member(n, "c-1-1").Follows = "10.9.1.0:6379" // the address c-1-0 had before the restart
				// c-0-0's old address is c-1-0's now: c-0-1 synced shard 1's keys from it.
				member(n, "c-0-1").Follows, member(n, "c-0-1").InSync = "10.0.1.0:6379", true
				return n
			},
			want: []string{"Replicate c-0-1 → c-0-0", "Replicate c-1-1 → c-1-0"}, whyHas: "still connects to"},
		{name: "a replica syncing from its primary where it is is left to it", spec: Spec{Shards: 2, PerShard: 2},
			nodes: func() []Node {
				n := cluster(2, 2)
				member(n, "c-1-1").Follows = "10.0.1.0:6379"
				return n
			},
			want: nil},
		{name: "a whole-cluster restart changed every address: introduced again", spec: Spec{Shards: 2, PerShard: 2},
			nodes: func() []Node {
				n := cluster(2, 2)
				for i := range n {
					n[i].Addr = strings.Replace(n[i].Addr, "10.0.", "10.9.", 1)
				}
				return n
			},
			want: []string{"Meet c-0-0 → c-0-1", "Meet c-0-0 → c-1-0", "Meet c-0-0 → c-1-1"}},
		{name: "a member back with an empty volume: its old ID forgotten first", spec: Spec{Shards: 2, PerShard: 2},
			nodes: func() []Node {
				n := cluster(2, 2)
				back := member(n, "c-1-1")
				back.ID, back.Known, back.Serving, back.PrimaryID, back.Primary = "id-new", nil, nil, "", true
				return n
			},
			want: []string{"Forget  → id-1-1"}},
		{name: "then introduced, then made a replica again", spec: Spec{Shards: 2, PerShard: 2},
			nodes: func() []Node {
				n := cluster(2, 2)
				back := member(n, "c-1-1")
				back.ID, back.Known, back.Serving, back.PrimaryID, back.Primary = "id-new", nil, nil, "", true
				for i := range n {
					delete(n[i].Known, "id-1-1")
				}
				return n
			},
			want: []string{"Meet c-0-0 → c-1-1"}},
		{name: "the empty member, introduced, never takes slots: it replicates", spec: Spec{Shards: 2, PerShard: 2},
			nodes: func() []Node {
				n := cluster(2, 2)
				back := member(n, "c-1-1")
				back.ID, back.PrimaryID, back.Primary = "id-new", "", true
				for i := range n {
					if _, ok := n[i].Known["id-1-1"]; ok {
						delete(n[i].Known, "id-1-1")
						n[i].Known["id-new"] = back.Addr
					}
				}
				return n
			},
			want: []string{"Replicate c-1-1 → c-1-0"}},
		{name: "a node that is no member but still serves slots is waited for", spec: Spec{Shards: 2, PerShard: 2},
			nodes: func() []Node {
				n := cluster(2, 2)
				n = append(n[:2], n[3:]...) // c-1-0 gone from the members (say, its pod and volume deleted)
				for i := range n {
					n[i].Serving["id-1-0"] = true
				}
				return n
			},
			want: []string{"Wait  → id-1-0"}, whyHas: "failover"},
		{name: "a move both sides agree on is finished", spec: Spec{Shards: 2, PerShard: 1},
			nodes: func() []Node {
				n := cluster(2, 1)
				n[0].Migrating = map[int]string{100: "id-1-0", 101: "id-1-0"}
				n[1].Importing = map[int]string{100: "id-0-0", 101: "id-0-0"}
				return n
			},
			want: []string{"Move c-0-0 → c-1-0 [100-101]"}, whyHas: "finished"},
		{name: "an import with keys already there is finished", spec: Spec{Shards: 2, PerShard: 1},
			nodes: func() []Node {
				n := cluster(2, 1)
				n[1].Importing = map[int]string{7: "id-0-0"}
				n[1].KeysInOpen = map[int]int64{7: 3}
				return n
			},
			want: []string{"Move c-0-0 → c-1-0 [7]"}},
		{name: "a member importing its own shard's slot with keys (marked on loading them) is closed, not moved into", spec: Spec{Shards: 2, PerShard: 2},
			nodes: func() []Node {
				n := cluster(2, 2)
				m := member(n, "c-1-1")
				m.Primary, m.PrimaryID, m.Keys = true, "", 42
				m.Importing = map[int]string{9000: "id-1-0", 9001: "id-1-0"}
				m.KeysInOpen = map[int]int64{9000: 3, 9001: 1}
				return n
			},
			want: []string{"Stable c-1-1 [9000-9001]"}, whyHas: "marked these slots importing on loading"},
		{name: "an import that moved nothing is closed", spec: Spec{Shards: 2, PerShard: 1},
			nodes: func() []Node {
				n := cluster(2, 1)
				n[1].Importing = map[int]string{7: "id-0-0"}
				return n
			},
			want: []string{"Stable c-1-0 [7]"}, whyHas: "nothing"},
		{name: "a migration the other side never opened is closed", spec: Spec{Shards: 2, PerShard: 1},
			nodes: func() []Node {
				n := cluster(2, 1)
				n[0].Migrating = map[int]string{9: "id-1-0"}
				return n
			},
			want: []string{"Stable c-0-0 [9]"}},
		{name: "a migration whose target already holds keys, not importing any more, is finished", spec: Spec{Shards: 2, PerShard: 1},
			nodes: func() []Node {
				n := cluster(2, 1)
				n[0].Migrating = map[int]string{9: "id-1-0"}
				n[1].KeysInOpen = map[int]int64{9: 1}
				return n
			},
			want: []string{"Move c-0-0 → c-1-0 [9]"}},
		{name: "three shards to four: each old shard gives the new one its surplus", spec: Spec{Shards: 4, PerShard: 2},
			nodes: func() []Node {
				n := cluster(3, 2)
				for s := 0; s < 2; s++ { // shard 3's members: introduced, replica attached, no slot yet
					x := Node{Member: fmt.Sprintf("c-3-%d", s), Shard: 3, Ordinal: s, Addr: fmt.Sprintf("10.0.3.%d:6379", s), Observed: true,
						ID: fmt.Sprintf("id-3-%d", s), Primary: s == 0, OK: true}
					if s == 1 {
						x.PrimaryID = "id-3-0"
					}
					n = append(n, x)
				}
				for i := range n {
					for _, o := range n {
						if o.ID != n[i].ID {
							if n[i].Known == nil {
								n[i].Known = map[string]string{}
							}
							n[i].Known[o.ID] = o.Addr
						}
					}
				}
				gossip(n)
				return n
			},
			// Each old shard gives the new one its highest slots over its new count: 4,096 in all,
			// not the 8,192 that redrawing the even ranges would move.
			want: []string{"Move c-0-0 → c-3-0 [4096-5460]", "Move c-1-0 → c-3-0 [9557-10921]", "Move c-2-0 → c-3-0 [15018-16383]"}},
		{name: "three shards to four: the new shard does not see the slots' owners yet", spec: Spec{Shards: 4, PerShard: 2},
			nodes: func() []Node {
				n := cluster(3, 2)
				for s := 0; s < 2; s++ {
					x := Node{Member: fmt.Sprintf("c-3-%d", s), Shard: 3, Ordinal: s, Addr: fmt.Sprintf("10.0.3.%d:6379", s), Observed: true,
						ID: fmt.Sprintf("id-3-%d", s), Primary: s == 0, OK: true}
					if s == 1 {
						x.PrimaryID = "id-3-0"
					}
					n = append(n, x)
				}
				for i := range n {
					for _, o := range n {
						if o.ID != n[i].ID {
							if n[i].Known == nil {
								n[i].Known = map[string]string{}
							}
							n[i].Known[o.ID] = o.Addr
						}
					}
				}
				return n // c-3-*'s Serving is empty
			},
			want: []string{"Wait "}, whyHas: "does not see"},
		{name: "four shards to three: the last gives all its slots away", spec: Spec{Shards: 3, PerShard: 2},
			nodes: func() []Node { return cluster(4, 2) },
			want:  []string{"Move c-3-0 → c-0-0 [15019-16383]", "Move c-3-0 → c-1-0 [13654-15018]", "Move c-3-0 → c-2-0 [12288-13653]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			steps := Decide(tc.nodes(), tc.spec)
			got := strs(steps)
			if len(tc.want) == 1 && strings.HasSuffix(tc.want[0], " ") { // a prefix only
				if len(got) != 1 || !strings.HasPrefix(got[0], tc.want[0]) {
					t.Fatalf("got %q; want one step %q…", got, tc.want[0])
				}
			} else if !reflect.DeepEqual(got, tc.want) && (len(got) != 0 || len(tc.want) != 0) {
				t.Fatalf("got %q\nwant %q", got, tc.want)
			}
			if tc.whyHas != "" && !strings.Contains(steps[0].Why, tc.whyHas) {
				t.Errorf("the first step's reason %q does not say %q", steps[0].Why, tc.whyHas)
			}
		})
	}
}

// TestDecideConverges carries out each phase as a server would, from new members to a whole
// cluster and through reshards up and down, and checks that Decide ends with no step, every slot
// served once, by the shard Even says, each shard one primary and its replicas.
func TestDecideConverges(t *testing.T) {
	nodes := fresh(3, 2)
	run := func(spec Spec) (moved int) {
		t.Helper()
		for round := 0; ; round++ {
			steps := Decide(nodes, spec)
			if len(steps) == 0 {
				break
			}
			if round == 20 {
				t.Fatalf("no end after 20 phases; the last: %q", strs(steps))
			}
			if moving := 0; Resharding(steps) {
				for _, s := range steps {
					for _, r := range s.Slots {
						moving += r.To - r.From + 1
					}
				}
				if got := Misplaced(nodes, spec); got != moving {
					t.Fatalf("Misplaced says %d slots; the reshard's steps move %d", got, moving)
				}
				moved += moving
			}
			for _, s := range steps {
				if s.Kind != Wait {
					apply(t, nodes, s)
				}
			}
			gossip(nodes)
		}
		want := Even(spec.Shards)
		served := map[int]string{}
		count := map[int]int{}
		for _, n := range nodes {
			for _, r := range n.Slots {
				for s := r.From; s <= r.To; s++ {
					if prev, ok := served[s]; ok {
						t.Fatalf("slot %d served by %s and %s", s, prev, n.Member)
					}
					served[s] = n.Member
					count[n.Shard]++
				}
			}
			if !n.Primary && member(nodes, n.Member).PrimaryID != fmt.Sprintf("id-%d-0", n.Shard) {
				t.Fatalf("%s replicates %s", n.Member, n.PrimaryID)
			}
		}
		if len(served) != Slots {
			t.Fatalf("%d slots served; want %d", len(served), Slots)
		}
		for shard := 0; shard < spec.Shards+3; shard++ {
			if target := 0; shard < len(want) {
				target = want[shard].To - want[shard].From + 1
				if count[shard] != target {
					t.Fatalf("shard %d serves %d slots; want %d", shard, count[shard], target)
				}
			} else if count[shard] != 0 {
				t.Fatalf("shard %d, past %d shards, serves %d slots", shard, spec.Shards, count[shard])
			}
		}
		if n := Misplaced(nodes, spec); n != 0 {
			t.Fatalf("a converged cluster has %d misplaced slots", n)
		}
		return moved
	}
	run(Spec{Shards: 3, PerShard: 2})
	for s := 3; s < 6; s++ { // three more shards' members start
		for o := 0; o < 2; o++ {
			nodes = append(nodes, Node{Member: fmt.Sprintf("c-%d-%d", s, o), Shard: s, Ordinal: o, Addr: fmt.Sprintf("10.0.%d.%d:6379", s, o),
				Observed: true, ID: fmt.Sprintf("id-%d-%d", s, o), Primary: true, OK: true})
		}
	}
	if n := Misplaced(nodes, Spec{Shards: 6, PerShard: 2}); n != Slots/2 {
		t.Fatalf("3 → 6 shards: %d slots misplaced; want half, %d", n, Slots/2)
	}
	if steps := Decide(nodes, Spec{Shards: 6, PerShard: 2}); Resharding(steps) {
		t.Fatalf("new shards not yet met or attached, and already the reshard: %q", strs(steps))
	}
	// Each way moves only what the counts need: half the slots.
	if n := run(Spec{Shards: 6, PerShard: 2}); n != Slots/2 {
		t.Errorf("3 → 6 shards moved %d slots; want %d", n, Slots/2)
	}
	if n := run(Spec{Shards: 3, PerShard: 2}); n != Slots/2 {
		t.Errorf("6 → 3 shards moved %d slots; want %d", n, Slots/2)
	}
	for _, n := range nodes {
		if n.Shard >= 3 && len(n.Slots) > 0 {
			t.Errorf("%s of a removed shard still serves %v", n.Member, n.Slots)
		}
	}
}

// gossip tells every member which of the nodes it knows serve slots, and whether every slot is
// served (cluster_state:ok).
func gossip(nodes []Node) {
	covered := 0
	for _, n := range nodes {
		for _, r := range n.Slots {
			covered += r.To - r.From + 1
		}
	}
	for i := range nodes {
		nodes[i].OK = covered == Slots
		nodes[i].Serving = map[string]bool{}
		for _, o := range nodes {
			if _, ok := nodes[i].Known[o.ID]; ok {
				nodes[i].Serving[o.ID] = len(o.Slots) > 0
			}
		}
	}
}

// apply carries a step out on the nodes as the servers would.
func apply(t *testing.T, nodes []Node, s Step) {
	t.Helper()
	switch s.Kind {
	case Meet:
		a, b := member(nodes, s.Member), member(nodes, s.Target)
		for _, pair := range [][2]*Node{{a, b}, {b, a}} {
			if pair[0].Known == nil {
				pair[0].Known = map[string]string{}
			}
			pair[0].Known[pair[1].ID] = pair[1].Addr
		}
		// Gossip: everyone a knows learns of b, and b of them.
		for i := range nodes {
			if _, ok := a.Known[nodes[i].ID]; ok && nodes[i].ID != b.ID {
				if nodes[i].Known == nil {
					nodes[i].Known = map[string]string{}
				}
				nodes[i].Known[b.ID] = b.Addr
				b.Known[nodes[i].ID] = nodes[i].Addr
			}
		}
	case AddSlots:
		m := member(nodes, s.Member)
		m.Slots = append(m.Slots, s.Slots...)
	case Replicate:
		m, p := member(nodes, s.Member), member(nodes, s.Target)
		m.Primary, m.PrimaryID = false, p.ID
	case Move:
		from, to := member(nodes, s.Member), member(nodes, s.Target)
		moving := map[int]bool{}
		for _, r := range s.Slots {
			for x := r.From; x <= r.To; x++ {
				moving[x] = true
			}
		}
		var kept []int
		for _, r := range from.Slots {
			for x := r.From; x <= r.To; x++ {
				if !moving[x] {
					kept = append(kept, x)
				}
			}
		}
		from.Slots = ranges(kept)
		var all []int
		for _, r := range append(append([]Range(nil), to.Slots...), s.Slots...) {
			for x := r.From; x <= r.To; x++ {
				all = append(all, x)
			}
		}
		to.Slots = ranges(all)
	default:
		t.Fatalf("unexpected step %s", s)
	}
}

// placed is cluster(3, 2) with each member on the node hosts names, every replica in sync.
func placed(hosts map[string]string) []Node {
	nodes := cluster(3, 2)
	for i := range nodes {
		nodes[i].Host, nodes[i].InSync = hosts[nodes[i].Member], !nodes[i].Primary
	}
	return nodes
}

func TestDecideSpreadsThePrimariesOverTheNodes(t *testing.T) {
	gathered := map[string]string{"c-0-0": "a", "c-1-0": "a", "c-2-0": "b", "c-0-1": "c", "c-1-1": "b", "c-2-1": "c"}
	for _, tc := range []struct {
		name  string
		nodes []Node
		want  []string
	}{
		{"two primaries on node a, none on c where a replica of one of them runs: it takes over",
			placed(gathered), []string{"Failover c-0-1 → c-0-0"}},
		{"one primary a node: nothing", placed(map[string]string{"c-0-0": "a", "c-1-1": "a", "c-1-0": "b", "c-2-1": "b", "c-2-0": "c", "c-0-1": "c"}), nil},
		{"two on a, their replicas on b, which has one: b's primary goes to c first, making room",
			placed(map[string]string{"c-0-0": "a", "c-1-0": "a", "c-2-0": "b", "c-0-1": "b", "c-1-1": "b", "c-2-1": "c"}), []string{"Failover c-2-1 → c-2-0"}},
		{"... then a's first primary goes to b", func() []Node {
			n := placed(map[string]string{"c-0-0": "a", "c-1-0": "a", "c-2-0": "b", "c-0-1": "b", "c-1-1": "b", "c-2-1": "c"})
			p, r := member(n, "c-2-0"), member(n, "c-2-1")
			p.Primary, p.PrimaryID, r.Primary, r.PrimaryID = false, r.ID, true, ""
			p.Slots, r.Slots = r.Slots, p.Slots
			p.InSync, r.InSync = true, false
			return n
		}(), []string{"Failover c-0-1 → c-0-0"}},
		{"two on a, one on b, where a's replicas run, b's replica on a: nothing helps",
			placed(map[string]string{"c-0-0": "a", "c-1-0": "a", "c-2-0": "b", "c-0-1": "b", "c-1-1": "b", "c-2-1": "a"}), nil},
		{"the replica's link is down: waits", func() []Node {
			n := placed(gathered)
			member(n, "c-0-1").InSync = false
			return n
		}(), nil},
		{"a member leaving: the handovers of the roll first", func() []Node {
			n := placed(gathered)
			member(n, "c-2-1").Leaving = true
			return n
		}(), nil},
		{"a node not known: waits", func() []Node {
			n := placed(gathered)
			member(n, "c-2-1").Host = ""
			return n
		}(), nil},
		{"a member not ok: waits", func() []Node {
			n := placed(gathered)
			member(n, "c-1-1").OK = false
			return n
		}(), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			steps := Decide(tc.nodes, Spec{Shards: 3, PerShard: 2})
			if got := strs(steps); !reflect.DeepEqual(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
				t.Fatalf("Decide = %v; want %v", got, tc.want)
			}
			if !Serving(steps) {
				t.Errorf("Serving(%v) = false: a spread's handover is a change of layout", strs(steps))
			}
		})
	}
}

func TestSwitchoverHandsAShardToTheMemberAskedFor(t *testing.T) {
	fourNodes := map[string]string{"c-0-0": "a", "c-0-1": "d", "c-1-0": "b", "c-1-1": "a", "c-2-0": "c", "c-2-1": "b"}
	threeNodes := map[string]string{"c-0-0": "a", "c-1-1": "a", "c-1-0": "b", "c-2-1": "b", "c-2-0": "c", "c-0-1": "c"}
	for _, tc := range []struct {
		name    string
		nodes   []Node
		to      string
		steps   []string
		done    bool
		refused string
	}{
		{"to a replica on a node without a primary: handed over", placed(fourNodes), "c-0-1", []string{"Failover c-0-1 → c-0-0"}, false, ""},
		{"to the primary: done", placed(fourNodes), "c-0-0", nil, true, ""},
		{"to no member: refused", placed(fourNodes), "c-9-0", nil, false, "c-9-0 is no member of the cache"},
		{"to a replica whose node runs a primary, leaving a node without one: refused", placed(threeNodes), "c-0-1", nil, false,
			"c-0-1 on node c would make it run 2 primaries of the cache while node a would run 0"},
		{"to a replica not in sync: waits", func() []Node {
			n := placed(fourNodes)
			member(n, "c-0-1").InSync = false
			return n
		}(), "c-0-1", nil, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := Spec{Shards: 3, PerShard: 2, SwitchTo: tc.to}
			if got := strs(Decide(tc.nodes, spec)); !reflect.DeepEqual(got, tc.steps) && !(len(got) == 0 && len(tc.steps) == 0) {
				t.Errorf("Decide = %v; want %v", got, tc.steps)
			}
			done, refused := Switch(tc.nodes, spec)
			if done != tc.done || !strings.HasPrefix(refused, tc.refused) || (tc.refused == "") != (refused == "") {
				t.Errorf("Switch = %v, %q; want %v, %q…", done, refused, tc.done, tc.refused)
			}
		})
	}
}

func TestAssignRestoredGivesEachShardTheSlotsItsKeysDidNotClaim(t *testing.T) {
	even := Even(3)
	restored := [][]Range{{even[0]}, {even[1]}, {even[2]}}
	decide := func(nodes []Node) []string {
		byID := map[string]*Node{}
		for i := range nodes {
			byID[nodes[i].ID] = &nodes[i]
		}
		return strs(assign(nodes, byID, Spec{Shards: 3, PerShard: 2, Restored: restored}))
	}
	nodes := fresh(3, 2)
	member(nodes, "c-0-0").Slots = []Range{{0, 0}, {5, 5}, {7, 7}} // claimed on loading keys of those slots
	member(nodes, "c-2-0").Slots = []Range{{16383, 16383}}
	want := []string{"AddSlots c-0-0 [1-4,6,8-5460]", "AddSlots c-1-0 [5461-10921]", "AddSlots c-2-0 [10922-16382]"}
	if got := decide(nodes); !reflect.DeepEqual(got, want) {
		t.Errorf("assign = %v; want %v", got, want)
	}
	member(nodes, "c-1-0").Slots = []Range{{3, 3}} // shard 0's slot, held by shard 1's member
	if got := decide(nodes); len(got) != 1 || !strings.HasPrefix(got[0], "Wait") {
		t.Errorf("a slot of shard 0's backup served by shard 1: assign = %v; want a Wait", got)
	}
	if r, err := ParseRanges("0-5460,16000,16001-16383"); err != nil || !reflect.DeepEqual(r, []Range{{0, 5460}, {16000, 16000}, {16001, 16383}}) {
		t.Errorf("ParseRanges = %v, %v", r, err)
	}
	for _, bad := range []string{"", "5-1", "0-16384", "a-b"} {
		if _, err := ParseRanges(bad); err == nil {
			t.Errorf("ParseRanges(%q): no error", bad)
		}
	}
}

// In a handover both members of a shard claim its slots for a moment (the new primary has taken
// them, the old one has not yet heard): nothing is misplaced, and no move is planned.
func TestHandoverIsNotMisplaced(t *testing.T) {
	n := cluster(3, 2)
	promoted := member(n, "c-1-1")
	promoted.Primary, promoted.PrimaryID, promoted.Slots = true, "", member(n, "c-1-0").Slots
	if got := Misplaced(n, Spec{Shards: 3, PerShard: 2}); got != 0 {
		t.Errorf("%d slots misplaced; want 0", got)
	}
	for _, s := range Decide(n, Spec{Shards: 3, PerShard: 2}) {
		if s.Kind == Move {
			t.Errorf("a move planned in a handover: %v", s)
		}
	}
}
