package shards

import "fmt"

// Members the engine left in a state it does not leave by itself: a replica whose replication
// aims where its primary was, a master with keys and no slots, a member whose cluster flags say
// master while its replication follows a primary.

// Flush: Member, a master that serves no slot in a shard whose primary is another member, drops
// the keys it holds (FLUSHALL), which no client reaches, so that it can follow Target, its shard's
// primary (CLUSTER REPLICATE refuses a master that holds keys).
const Flush Kind = "Flush"

// Restart: Member's server is started again (its pod deleted; it keeps its volume, nodes.conf
// and all): its cluster flags say master while its replication follows a primary, and it holds
// keys, a state no command leaves (CLUSTER REPLICATE refuses a master that holds keys, FLUSHALL a
// replica, READONLY). Started again it is a master by both, with keys and no slots, which Flush
// empties and Replicate attaches. Target is its shard's primary. The caller carries it out, and
// only for a state that lasts (two reads of one member are not one instant).
const Restart Kind = "Restart"

// stray judges n, a member of p's shard other than p that serves no slot: a master that holds
// keys (a former primary that the cluster gave its slots to a successor without making it a
// replica; seen after a node's stop) is emptied first, once every slot is served by a member, so
// that none of its keys is the only copy a client could reach (the writes it took that its
// successor never had are what WritesDiscarded counts, from its offsets). While a slot is not
// served, a restore runs or its shard is being removed, it waits. A master with keys whose
// replication follows a primary is restarted instead (see Restart): the engine leaves a former
// primary so when, restarted at an address a peer had, it reaches itself through that peer's
// entry and takes one of its own PINGs, sent while it was a master, after the cluster made it a
// replica (seen on the real nodes after a node's stop that swapped two members' addresses; the
// engine's role switch does not tell its own messages apart: redis/redis#9374, #6755). ok is
// false for any other member, which the replicate phase attaches as it is.
func stray(n, p Node, nodes []Node, spec Spec) (step Step, ok bool) {
	if !n.Primary || len(n.Slots) > 0 || n.Keys == 0 {
		return Step{}, false
	}
	if n.Follows != "" {
		return Step{Kind: Restart, Member: n.Member, Target: p.Member,
			Why: fmt.Sprintf("%s holds %d keys and serves no slot, its cluster flags say master and its replication follows %s: no command leaves that state, so its server is started again (then emptied and attached to %s)", n.Member, n.Keys, n.Follows, p.Member)}, true
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
