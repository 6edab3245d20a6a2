package shards

import "fmt"

// spread: once the cluster is whole (every member ok, every replica's link up) and needs nothing
// else, no node runs two primaries more
// than another node does while a replica of one of them runs there: that replica takes its
// primary's slots over (CLUSTER FAILOVER, which loses nothing); or where no such replica runs, a
// handover between two other nodes makes room for one. A node lost takes its
// primaries' shards down until the cluster fails them over, and a failover needs a majority of
// the primaries: with 3 shards, a node with 2 of the primaries leaves 1 of 3, and no shard of
// the cluster takes writes until the node is back. The scheduler spreads each shard's members,
// not the primaries (which the cluster elects); failovers and handovers gather them. One handover
// a pass; each one, or each two, lowers the sum of the squared counts, so they end.
func spread(nodes []Node, _ map[string]*Node, spec Spec) []Step {
	count := map[string]int{}
	for _, n := range nodes {
		if n.Host == "" || !n.OK || n.Leaving || (!n.Primary && !n.InSync) {
			return nil // a node not known yet, a cluster not whole, or a member leaving: not now
		}
		count[n.Host] += 0
		if n.Primary && len(n.Slots) > 0 {
			count[n.Host]++
		}
	}
	// A handover that lowers the busiest nodes' count: first one straight from such a node; or
	// else one from a node with one primary fewer, to a node with one fewer again, after which a
	// handover straight from a busiest node is possible (a state of as many squares, then fewer).
	if p, r := handoverWhere(nodes, spec, func(p, r Node) bool { return count[r.Host]+2 <= count[p.Host] }); p != nil {
		return []Step{spreadStep(*p, *r, count)}
	}
	busiest := 0
	for _, c := range count {
		busiest = max(busiest, c)
	}
	if p, r := handoverWhere(nodes, spec, func(p, r Node) bool {
		if count[p.Host] != busiest-1 || count[r.Host] != busiest-2 {
			return false
		}
		after, _ := handoverWhere(nodes, spec, func(p2, r2 Node) bool {
			return count[p2.Host] == busiest && r2.Host == p.Host
		})
		return after != nil
	}); p != nil {
		return []Step{spreadStep(*p, *r, count)}
	}
	return nil
}

// handoverWhere returns the first primary (by name) and the replica of its shard that replicates
// it for which ok holds.
func handoverWhere(nodes []Node, spec Spec, ok func(p, r Node) bool) (*Node, *Node) {
	for i, p := range nodes {
		if !p.Primary || len(p.Slots) == 0 || p.Shard >= spec.Shards {
			continue
		}
		for j, r := range nodes {
			if r.PrimaryID == p.ID && !r.Primary && r.Shard == p.Shard && ok(p, r) {
				return &nodes[i], &nodes[j]
			}
		}
	}
	return nil, nil
}

func spreadStep(p, r Node, count map[string]int) Step {
	return Step{Kind: Failover, Member: r.Member, Target: p.Member, Spread: true,
		Why: fmt.Sprintf("node %s runs %d primaries and %s's node %s %d: %s takes shard %d's slots over",
			p.Host, count[p.Host], r.Member, r.Host, count[r.Host], r.Member, p.Shard)}
}
