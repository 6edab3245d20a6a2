// Package shards decides what a sharded cache's cluster (Redis Cluster, Valkey cluster mode) needs
// next, as one pure function (Decide) of what each member reports and the spec: introductions,
// forgetting nodes that are gone, closing slots a dead operator left open, the first slot
// assignment, replicas attached to their shard's primary, and the slot moves of a reshard. It talks
// to nothing; a member pass reads the members, carries out one phase and reads them again.
package shards

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Slots is the number of hash slots of a cluster.
const Slots = 16384

// Range is the slots From to To, both included (as CLUSTER ADDSLOTSRANGE takes them).
type Range struct{ From, To int }

func (r Range) String() string {
	if r.From == r.To {
		return fmt.Sprint(r.From)
	}
	return fmt.Sprintf("%d-%d", r.From, r.To)
}

// Even is the even assignment of every slot to n shards: shard i serves [i*Slots/n, (i+1)*Slots/n).
func Even(n int) []Range {
	if n <= 0 {
		return nil
	}
	out := make([]Range, n)
	for i := range out {
		out[i] = Range{i * Slots / n, (i+1)*Slots/n - 1}
	}
	return out
}

// Node is one member of a sharded cache as a pass sees it: its pod (name, shard, address) and, when
// its server answered, its own view of the cluster (CLUSTER MYID, CLUSTER NODES, and
// CLUSTER COUNTKEYSINSLOT for the slots it has open).
type Node struct {
	Member string // the pod's name
	Shard  int    // the shard its pod belongs to
	// Ordinal orders the members of a shard: at the first assignment the lowest is the primary.
	Ordinal int
	Addr    string // the pod's ip:port now
	Host    string // the node the pod runs on ("": not known)
	// Observed: its server answered; what follows is valid.
	Observed bool
	ID       string // its node ID
	// Primary: it says master. PrimaryID: the node it replicates, when it is a replica.
	Primary   bool
	PrimaryID string
	Slots     []Range        // the slots it serves, as it lists them for itself
	Migrating map[int]string // slot → the node ID it migrates the slot to
	Importing map[int]string // slot → the node ID it imports the slot from
	// KeysInOpen is how many keys it holds in each slot that any node has open.
	KeysInOpen map[int]int64
	// Leaving: its pod is being deleted (a roll, a drain, an eviction, a delete). A primary hands
	// its slots to a replica before it stops.
	Leaving bool
	// Known is every other node it knows: node ID → the address it has for it. Serving: those of
	// them it sees serving slots.
	Known   map[string]string
	Serving map[string]bool
	// OK: it says cluster_state:ok (a member that does not refuses keys: a MIGRATE to it fails).
	OK bool
	// InSync: a replica whose link to its primary is up, no sync in progress.
	InSync bool
	// Follows: its replication target, the address it connects to (master_host and master_port,
	// from INFO whatever its cluster flags say; "": none). Keys: how many keys it holds.
	Follows string
	Keys    int64
}

// Spec is the cluster the cache's spec asks for.
type Spec struct {
	Shards   int // shards, each serving an even part of the slots
	PerShard int // members per shard: a primary and its replicas
	// SwitchTo names a member the user asked to be its shard's primary (the switchover
	// annotation; "": none).
	SwitchTo string
	// Restored is, while a restore from a sharded backup runs, the slots each shard served in the
	// backup (nil: no restore): the assign phase gives each shard's first member those of its
	// slots no member claimed on loading the shard's object.
	Restored [][]Range
}

// Kind is what a step does.
type Kind string

// The steps, in the order of the phases Decide goes through.
const (
	// Wait: nothing can be decided yet (Why says what is waited for).
	Wait Kind = "Wait"
	// Forget: every member forgets node Target (CLUSTER FORGET), which no member is any more.
	Forget Kind = "Forget"
	// Meet: Member meets the node at Addr (CLUSTER MEET), Target's member.
	Meet Kind = "Meet"
	// Move: the keys of Slots go from Member to Target (SETSLOT IMPORTING on Target, MIGRATING on
	// Member, MIGRATE in batches, then SETSLOT NODE Target on both), slot by slot.
	Move Kind = "Move"
	// Stable: Member closes the open Slots (CLUSTER SETSLOT STABLE): nothing was moved.
	Stable Kind = "Stable"
	// AddSlots: Member starts serving Slots (CLUSTER ADDSLOTSRANGE).
	AddSlots Kind = "AddSlots"
	// Replicate: Member becomes a replica of Target (CLUSTER REPLICATE).
	Replicate Kind = "Replicate"
	// Failover: Member, a replica, takes the slots of its primary Target, which is leaving, in a
	// handover that loses nothing (CLUSTER FAILOVER: the primary stops taking writes, the replica
	// catches up with its offset, then the cluster's configuration moves to it).
	Failover Kind = "Failover"
)

// Step is one command of a phase, for the member named Member (Target and Addr: the other node).
type Step struct {
	Kind   Kind
	Member string
	Target string // a member's name, or for Forget a node ID
	Addr   string
	Slots  []Range
	Why    string
	// Reshard: the step is a reshard's move (the cluster is whole and serving: only its layout
	// differs from the spec's). Spread: the step is the spread phase's handover (the same: the
	// cluster serves, only where its primaries run changes).
	Reshard, Spread bool
}

func (s Step) String() string {
	out := string(s.Kind) + " " + s.Member
	if s.Target != "" {
		out += " → " + s.Target
	}
	if len(s.Slots) > 0 {
		parts := make([]string, len(s.Slots))
		for i, r := range s.Slots {
			parts[i] = r.String()
		}
		out += " [" + strings.Join(parts, ",") + "]"
	}
	return out
}

// Decide returns the steps of the first phase that has any, in this order: wait until every
// member answers; hand a leaving primary's slots to its replica; forget nodes that are no member;
// introduce members to the first member (by name); close slots left open; assign every slot of a
// new cluster; attach replicas to their shard's primary; move slots until the shards serve
// Even(spec.Shards); hand a shard over to the member the user named; spread the primaries over
// the nodes. A cluster that needs
// nothing gets no step. The caller carries out one phase, reads the members again and calls
// Decide again.
func Decide(nodes []Node, spec Spec) []Step {
	if len(nodes) == 0 {
		return nil
	}
	nodes = append([]Node(nil), nodes...)
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Member < nodes[j].Member })
	var silent []string
	for _, n := range nodes {
		if !n.Observed || n.ID == "" {
			silent = append(silent, n.Member)
		}
	}
	if len(silent) > 0 {
		return []Step{{Kind: Wait, Why: "waiting for " + strings.Join(silent, ", ") + " to answer"}}
	}
	byID := map[string]*Node{}
	for i := range nodes {
		byID[nodes[i].ID] = &nodes[i]
	}
	for _, phase := range []func([]Node, map[string]*Node, Spec) []Step{handover, forget, meet, closeOpen, assign, replicate, reshard, switchover, spread} {
		if steps := phase(nodes, byID, spec); len(steps) > 0 {
			return steps
		}
	}
	return nil
}

// handover: a primary whose pod is leaving, and that serves slots, hands them to one of its
// replicas that stays (the first by name): the planned counterpart of the cluster's own failover,
// which would lose what the primary acknowledged and the replica had not yet received. A primary
// without such a replica stops as it is (its volume keeps its data; the cluster waits for it).
func handover(nodes []Node, _ map[string]*Node, _ Spec) []Step {
	var steps []Step
	for _, p := range nodes {
		if !p.Leaving || !p.Primary || len(p.Slots) == 0 {
			continue
		}
		for _, r := range nodes { // sorted by name
			if r.PrimaryID == p.ID && !r.Primary && !r.Leaving {
				steps = append(steps, Step{Kind: Failover, Member: r.Member, Target: p.Member,
					Why: fmt.Sprintf("%s, shard %d's primary, is leaving: %s takes its slots over", p.Member, p.Shard, r.Member)})
				break
			}
		}
	}
	return steps
}

// forget: a node ID that some member knows and no member has (a member that came back with an
// empty volume has a new ID; a member scaled away) is forgotten by every member, once no member
// says it serves a slot (until the cluster's own failover has given its slots to a replica, it is
// waited for).
func forget(nodes []Node, byID map[string]*Node, _ Spec) []Step {
	ghosts, serving := map[string]bool{}, map[string]bool{}
	for _, n := range nodes {
		for id := range n.Known {
			if byID[id] == nil {
				ghosts[id] = true
				serving[id] = serving[id] || n.Serving[id]
			}
		}
	}
	var steps, waits []Step
	for _, id := range sorted(ghosts) {
		if serving[id] {
			waits = append(waits, Step{Kind: Wait, Target: id, Why: "node " + id + ", no member of the cache, still serves slots: waiting for the cluster's failover to give them to its replica"})
			continue
		}
		steps = append(steps, Step{Kind: Forget, Target: id, Why: "node " + id + " is no member of the cache"})
	}
	return append(steps, waits...)
}

// meet: every member is introduced to the first member (by name), at its current address, when
// that member does not know it there (a new member, one back with a new ID, or a whole-cluster
// restart that changed every address). Gossip spreads the rest, except an address that changed
// while both ends were away: a node keeps the old address of a peer it never reached again (it
// takes a new one from gossip only once it has marked the peer failing, which it never does for a
// peer it could not ping: seen after a whole-cluster restart on the real nodes, stuck for
// minutes). So once the first member knows every member where it is, each member that does not
// know another at its address meets it there itself (a meeting already under way is not
// repeated by the server). A later phase's command may name any node.
func meet(nodes []Node, _ map[string]*Node, _ Spec) []Step {
	first := nodes[0]
	var steps []Step
	for _, n := range nodes[1:] {
		if addr, ok := first.Known[n.ID]; !ok || addr != n.Addr {
			steps = append(steps, Step{Kind: Meet, Member: first.Member, Target: n.Member, Addr: n.Addr,
				Why: fmt.Sprintf("%s does not know %s at %s", first.Member, n.Member, n.Addr)})
		}
	}
	if len(steps) > 0 {
		return steps
	}
	for _, n := range nodes {
		for _, m := range nodes {
			if addr, ok := n.Known[m.ID]; m.ID != n.ID && (!ok || addr != m.Addr) {
				steps = append(steps, Step{Kind: Meet, Member: n.Member, Target: m.Member, Addr: m.Addr,
					Why: fmt.Sprintf("%s does not know %s at %s", n.Member, m.Member, m.Addr)})
			}
		}
	}
	if len(steps) > 0 {
		return steps
	}
	return nil
}

// assign: a cluster where no member serves any slot is new: each shard's first member (by
// ordinal) takes its even part. Slots nobody serves in a cluster that has any are not assigned
// here: their data was on a shard that lost every member, and handing them to another would hide
// that (the caller reports it).
func assign(nodes []Node, byID map[string]*Node, spec Spec) []Step {
	if spec.Restored != nil {
		return assignRestored(nodes, byID, spec)
	}
	for _, n := range nodes {
		if len(n.Slots) > 0 {
			return nil
		}
	}
	var steps []Step
	for shard, r := range Even(spec.Shards) {
		if p := firstOf(nodes, shard); p != nil {
			steps = append(steps, Step{Kind: AddSlots, Member: p.Member, Slots: []Range{r},
				Why: fmt.Sprintf("a new cluster: shard %d serves slots %s", shard, r)})
		}
	}
	return steps
}

// primaryOf returns the member of shard that serves slots (the shard's primary), or at none, the
// one another member of the shard replicates, or the first by ordinal.
func primaryOf(nodes []Node, byID map[string]*Node, shard int) *Node {
	for i := range nodes {
		if nodes[i].Shard == shard && nodes[i].Primary && len(nodes[i].Slots) > 0 {
			return &nodes[i]
		}
	}
	for i := range nodes {
		if p := byID[nodes[i].PrimaryID]; nodes[i].Shard == shard && p != nil && p.Shard == shard {
			return p
		}
	}
	return firstOf(nodes, shard)
}

func firstOf(nodes []Node, shard int) *Node {
	var first *Node
	for i := range nodes {
		if nodes[i].Shard == shard && (first == nil || nodes[i].Ordinal < first.Ordinal) {
			first = &nodes[i]
		}
	}
	return first
}

// replicate: every member of a shard but its primary replicates the primary. A member that serves
// slots is never made a replica here (the cluster's own failover decides between primaries), and
// the members of shards past spec.Shards, which are being removed, are left as they are.
func replicate(nodes []Node, byID map[string]*Node, spec Spec) []Step {
	var steps []Step
	for shard := 0; shard < spec.Shards; shard++ {
		p := primaryOf(nodes, byID, shard)
		if p == nil {
			continue
		}
		for _, n := range nodes {
			if n.Shard != shard || n.Member == p.Member || len(n.Slots) > 0 {
				continue
			}
			if !n.Primary && n.PrimaryID == p.ID {
				if stale(n, *p) {
					steps = append(steps, Step{Kind: Replicate, Member: n.Member, Target: p.Member,
						Why: fmt.Sprintf("%s knows %s at %s but its replication still connects to %s", n.Member, p.Member, p.Addr, n.Follows)})
				}
				continue
			}
			if s, ok := stray(n, *p, nodes, spec); ok {
				steps = append(steps, s)
				continue
			}
			steps = append(steps, Step{Kind: Replicate, Member: n.Member, Target: p.Member,
				Why: fmt.Sprintf("%s is shard %d's primary", p.Member, shard)})
		}
	}
	return steps
}

// reshard: once the cluster is whole, slots move until each shard i below spec.Shards serves as
// many slots as Even(spec.Shards)'s part i holds, and the shards past spec.Shards serve none (they
// are removed once they hold no slot and no key). It moves no more than the counts need (3 → 6
// shards moves half the slots, not the five sixths that redrawing the even ranges would): each
// shard short of its count, in shard order, takes from the shards over theirs, in shard order,
// the highest slots they serve. The plan is a function of the counts only, so that a reshard
// resumed after a stop (the operator's, or a pass's budget) picks the same pairs.
func reshard(nodes []Node, byID map[string]*Node, spec Spec) []Step {
	owners, surplus, deficit := balance(nodes, byID, spec)
	if len(surplus) == 0 {
		return nil
	}
	// A member that does not yet see a primary serve its slots (one just met, still learning the
	// layout by gossip), or does not yet say cluster_state:ok, refuses a key of them: a MIGRATE to
	// it fails (CLUSTERDOWN). The moves wait for gossip.
	for _, n := range nodes {
		if !n.OK {
			return []Step{{Kind: Wait, Why: fmt.Sprintf("%s does not say cluster_state:ok yet", n.Member)}}
		}
		for _, m := range nodes {
			if m.ID != n.ID && len(m.Slots) > 0 && !n.Serving[m.ID] {
				return []Step{{Kind: Wait, Why: fmt.Sprintf("%s does not see %s serve slots yet (gossip)", n.Member, m.Member)}}
			}
		}
	}
	var steps []Step
	for _, d := range deficit {
		for i := range surplus {
			if d.n == 0 {
				break
			}
			src := &surplus[i]
			k := min(d.n, src.n)
			if k == 0 {
				continue
			}
			// The source's highest slots it still has to give.
			slots := src.slots[len(src.slots)-k:]
			src.slots, src.n, d.n = src.slots[:len(src.slots)-k], src.n-k, d.n-k
			steps = append(steps, Step{Kind: Move, Member: owners[src.shard].Member, Target: owners[d.shard].Member,
				Slots: ranges(append([]int(nil), slots...)), Reshard: true,
				Why: fmt.Sprintf("resharding to %d shards: shard %d gives %d slots to shard %d", spec.Shards, src.shard, k, d.shard)})
		}
	}
	return steps
}

// share is a shard's slots against its count in the even layout: n slots over (surplus) or
// under (deficit) it.
type share struct {
	shard int
	n     int
	slots []int // a surplus shard's slots, sorted
}

// balance finds each shard's primary (the member that serves its slots, or the one its members
// replicate) and the shards over and under their counts, in shard order. A shard without a
// primary to take slots is left out.
func balance(nodes []Node, byID map[string]*Node, spec Spec) (map[int]*Node, []share, []share) {
	want := Even(spec.Shards)
	served := map[int][]int{}
	shardSet := map[int]bool{}
	counted := map[[2]int]bool{} // shard, slot: two members of a shard claim its slots for a moment in a handover
	for _, n := range nodes {
		shardSet[n.Shard] = true
		for _, r := range n.Slots {
			for s := r.From; s <= r.To; s++ {
				if !counted[[2]int{n.Shard, s}] {
					counted[[2]int{n.Shard, s}] = true
					served[n.Shard] = append(served[n.Shard], s)
				}
			}
		}
	}
	owners := map[int]*Node{}
	var surplus, deficit []share
	for _, shard := range sorted(shardSet) {
		target := 0
		if shard < len(want) {
			target = want[shard].To - want[shard].From + 1
		}
		have := len(served[shard])
		p := primaryOf(nodes, byID, shard)
		if p == nil {
			continue
		}
		owners[shard] = p
		switch {
		case have > target:
			sort.Ints(served[shard])
			surplus = append(surplus, share{shard: shard, n: have - target, slots: served[shard]})
		case have < target:
			deficit = append(deficit, share{shard: shard, n: target - have})
		}
	}
	return owners, surplus, deficit
}

// Misplaced counts the slots that shards serve over their counts in the even layout of
// spec.Shards (all of them, for a shard past spec.Shards): what a reshard still has to move.
func Misplaced(nodes []Node, spec Spec) int {
	byID := map[string]*Node{}
	for i := range nodes {
		byID[nodes[i].ID] = &nodes[i]
	}
	_, surplus, _ := balance(nodes, byID, spec)
	n := 0
	for _, s := range surplus {
		n += s.n
	}
	return n
}

// Serving reports whether steps only change the layout of a cluster that serves every slot: a
// reshard's moves, or the spread phase's handover.
func Serving(steps []Step) bool {
	for _, s := range steps {
		if !s.Reshard && !s.Spread {
			return false
		}
	}
	return true
}

// Resharding reports whether steps are a reshard's moves only: the cluster serves every slot and
// only its layout differs from the spec's.
func Resharding(steps []Step) bool {
	for _, s := range steps {
		if !s.Reshard {
			return false
		}
	}
	return len(steps) > 0
}

// ranges folds sorted slots into ranges.
func ranges(slots []int) []Range {
	sort.Ints(slots)
	var out []Range
	for _, s := range slots {
		if n := len(out); n > 0 && out[n-1].To == s-1 {
			out[n-1].To = s
			continue
		}
		out = append(out, Range{s, s})
	}
	return out
}

// sorted returns the keys of m in order.
func sorted[K cmp.Ordered](m map[K]bool) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
