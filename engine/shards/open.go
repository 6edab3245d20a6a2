package shards

import "sort"

// closeOpen: a slot that a member has open (migrating or importing), left so by an operator that
// stopped in the middle of a move, is moved on to the importing side when that side already holds
// keys of it or both sides agree on the move; otherwise it is closed where it is open, since
// nothing of it moved. No move goes within a shard: a member that imports a slot its own shard
// serves marked it so itself, on loading keys of a slot it does not serve (a former primary
// started again on a replica's copy), and is closed there (its keys are emptied by stray).
func closeOpen(nodes []Node, byID map[string]*Node, _ Spec) []Step {
	owner := map[int]*Node{}
	open := map[int]bool{}
	for i := range nodes {
		for _, r := range nodes[i].Slots {
			for s := r.From; s <= r.To; s++ {
				owner[s] = &nodes[i]
			}
		}
		for s := range nodes[i].Migrating {
			open[s] = true
		}
		for s := range nodes[i].Importing {
			open[s] = true
		}
	}
	type pair struct {
		kind     Kind
		from, to string
		loaded   bool // an import its member marked itself, on loading keys of a slot its shard serves
	}
	grouped := map[pair][]int{}
	for _, s := range sorted(open) {
		o := owner[s]
		var other *Node
		for i := range nodes {
			n := &nodes[i]
			if n == o {
				continue
			}
			if _, ok := n.Importing[s]; ok && (o == nil || n.Shard != o.Shard) {
				other = n
			}
		}
		if o == nil {
			// Nobody serves it: the importing side takes it if it holds keys of it.
			if other != nil && other.KeysInOpen[s] > 0 {
				k := pair{kind: AddSlots, from: other.Member}
				grouped[k] = append(grouped[k], s)
				continue
			}
			for i := range nodes {
				if isOpen(nodes[i], s) {
					k := pair{kind: Stable, from: nodes[i].Member}
					grouped[k] = append(grouped[k], s)
				}
			}
			continue
		}
		if to, ok := o.Migrating[s]; ok && other == nil {
			if t := byID[to]; t != nil && t.KeysInOpen[s] > 0 {
				other = t
			}
		}
		if other != nil && (other.KeysInOpen[s] > 0 || o.Migrating[s] == other.ID) {
			k := pair{kind: Move, from: o.Member, to: other.Member}
			grouped[k] = append(grouped[k], s)
			continue
		}
		for i := range nodes {
			if isOpen(nodes[i], s) {
				k := pair{kind: Stable, from: nodes[i].Member, loaded: &nodes[i] != o && nodes[i].Shard == o.Shard}
				grouped[k] = append(grouped[k], s)
			}
		}
	}
	keys := make([]pair, 0, len(grouped))
	for k := range grouped {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.kind != b.kind {
			return a.kind < b.kind
		}
		if a.from != b.from {
			return a.from < b.from
		}
		if a.to != b.to {
			return a.to < b.to
		}
		return !a.loaded && b.loaded
	})
	var steps []Step
	for _, k := range keys {
		why := "a move left open by an operator that stopped: nothing of it moved"
		switch {
		case k.kind != Stable:
			why = "a move left open by an operator that stopped: finished"
		case k.loaded:
			why = "no move: " + k.from + " marked these slots importing on loading keys of them, which its shard's primary serves"
		}
		steps = append(steps, Step{Kind: k.kind, Member: k.from, Target: k.to, Slots: ranges(grouped[k]), Why: why})
	}
	return steps
}

func isOpen(n Node, s int) bool {
	_, m := n.Migrating[s]
	_, i := n.Importing[s]
	return m || i
}
