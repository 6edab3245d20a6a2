package shards

import "fmt"

// switchover: the member spec.SwitchTo names takes its shard's slots over (CLUSTER FAILOVER, which
// loses nothing), once the cluster is whole and it is in sync, unless Switch refuses it.
func switchover(nodes []Node, byID map[string]*Node, spec Spec) []Step {
	if spec.SwitchTo == "" {
		return nil
	}
	if done, refused := Switch(nodes, spec); done || refused != "" {
		return nil
	}
	t := find(nodes, spec.SwitchTo)
	p := byID[t.PrimaryID]
	if !wholeFor(nodes) || p == nil || !t.InSync {
		return nil // the switchover waits for a whole cluster and a replica in sync
	}
	return []Step{{Kind: Failover, Member: t.Member, Target: p.Member,
		Why: fmt.Sprintf("a switchover to %s was asked for: it takes shard %d's slots over from %s", t.Member, t.Shard, p.Member)}}
}

// Switch judges spec.SwitchTo against the cluster: done when the member serves its shard's slots;
// refused (with the reason, for the user) when it names no member of a kept shard, or when the
// handover would leave a node running two primaries more than another (the spread phase would
// hand the shard back at once: a node with that many primaries can take the majority down with
// it). Neither: the switchover phase carries it out, once the cluster is whole.
func Switch(nodes []Node, spec Spec) (done bool, refused string) {
	t := find(nodes, spec.SwitchTo)
	switch {
	case spec.SwitchTo == "":
		return false, ""
	case t == nil:
		return false, fmt.Sprintf("%s is no member of the cache", spec.SwitchTo)
	case t.Shard >= spec.Shards:
		return false, fmt.Sprintf("%s is a member of shard %d, which is being removed", t.Member, t.Shard)
	case t.Primary && len(t.Slots) > 0:
		return true, ""
	case !t.Observed:
		return false, ""
	}
	// The cluster as it would be: t serving its primary's slots, the primary its replica.
	after := append([]Node(nil), nodes...)
	var p *Node
	for i := range after {
		if after[i].ID == t.PrimaryID && t.PrimaryID != "" {
			p = &after[i]
		}
	}
	if p == nil || p.Host == "" || t.Host == "" {
		return false, "" // not attached yet, or its node not known: the phase waits
	}
	q := find(after, t.Member)
	q.Primary, q.PrimaryID, q.Slots = true, "", p.Slots
	p.Primary, p.PrimaryID, p.Slots, p.InSync = false, q.ID, nil, true
	for i := range after {
		after[i].OK, after[i].Leaving = true, false
		if !after[i].Primary {
			after[i].InSync = true
		}
	}
	if step := spread(after, nil, spec); len(step) > 0 {
		count := map[string]int{}
		for _, n := range after {
			if n.Primary && len(n.Slots) > 0 {
				count[n.Host]++
			}
		}
		return false, fmt.Sprintf("%s on node %s would make it run %d primaries of the cache while node %s would run %d: "+
			"the operator keeps the primaries spread over the nodes (a node running two more than another can leave the cluster "+
			"without a majority when it stops) and would hand the shard back at once", t.Member, t.Host, count[t.Host], p.Host, count[p.Host])
	}
	return false, ""
}

// wholeFor reports whether every member says cluster_state:ok and none is leaving.
func wholeFor(nodes []Node) bool {
	for _, n := range nodes {
		if !n.OK || n.Leaving {
			return false
		}
	}
	return true
}

func find(nodes []Node, member string) *Node {
	for i := range nodes {
		if nodes[i].Member == member {
			return &nodes[i]
		}
	}
	return nil
}
