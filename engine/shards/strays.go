package shards

import "fmt"

// Members the engine left in a state it does not leave by itself: a replica whose replication
// aims where its primary was, a master with keys and no slots.

// Flush: Member, a master that serves no slot in a shard whose primary is another member, drops
// the keys it holds (FLUSHALL), which no client reaches, so that it can follow Target, its shard's
// primary (CLUSTER REPLICATE refuses a master that holds keys).
const Flush Kind = "Flush"

// stray judges n, a member of p's shard other than p that serves no slot: a master that holds
// keys (a former primary that the cluster gave its slots to a successor without making it a
// replica; seen after a node's stop) is emptied first, once every slot is served by a member, so
// that none of its keys is the only copy a client could reach (the writes it took that its
// successor never had are what WritesDiscarded counts, from its offsets). While a slot is not
// served, a restore runs or its shard is being removed, it waits. ok is false for any other
// member, which the replicate phase attaches as it is: among them one whose cluster flags say
// master while its replication follows a primary (INFO says slave; it refuses FLUSHALL, READONLY:
// seen on the real nodes just after a node's stop, a former primary on its way to being a
// replica).
func stray(n, p Node, nodes []Node, spec Spec) (step Step, ok bool) {
	if !n.Primary || len(n.Slots) > 0 || n.Keys == 0 || n.Follows != "" {
		return Step{}, false
	}
	var served [Slots]bool
	count := 0
	for _, m := range nodes {
		for _, r := range m.Slots {
			for s := r.From; s <= r.To && s < Slots; s++ {
				if !served[s] {
					served[s], count = true, count+1
				}
			}
		}
	}
	if count < Slots || spec.Restored != nil || n.Shard >= spec.Shards {
		return Step{Kind: Wait, Member: n.Member, Why: fmt.Sprintf("%s serves no slot and holds %d keys: it is emptied once every slot is served (%d are), no restore runs and its shard stays", n.Member, n.Keys, count)}, true
	}
	return Step{Kind: Flush, Member: n.Member, Target: p.Member,
		Why: fmt.Sprintf("%s serves no slot and holds %d keys that no client reaches (shard %d's slots are %s's): emptied so that it can follow %s", n.Member, n.Keys, n.Shard, p.Member, p.Member)}, true
}

// stale reports whether replica n, attached to p in the cluster's configuration and knowing p
// where it is, has its replication connect elsewhere. A node that takes a peer's new address from
// gossip updates its table but not its replication target, so after a restart that changed the
// members' addresses (a hibernation's resume, a whole-cluster restart) a replica can keep
// connecting to where its primary was: nothing (its link down for good, its readiness with it),
// or another member that now has that address (it answers NOMASTERLINK, or it is a primary of
// another shard and the replica syncs that shard's keys). CLUSTER REPLICATE of the same primary
// points the replication at the table's address; the replica resyncs from its primary.
func stale(n, p Node) bool {
	return n.Follows != "" && n.Known[p.ID] == p.Addr && n.Follows != p.Addr
}
