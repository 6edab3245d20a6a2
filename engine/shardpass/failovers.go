package shardpass

import (
	"time"

	"example.com/cache-operator/engine/member"
	"example.com/cache-operator/engine/roles"
	"example.com/cache-operator/engine/shards"
)

// Watch follows each shard's primary from pass to pass. The cluster elects a replica by itself
// when a primary stops answering; the operator learns of it only by reading the members again.
// Watch tells such a failover from the operator's own handover (a Failover step of a pass), keeps
// the new primary's lag behind the old one at the last pass that read both, and measures the
// writes the old primary took past the point where its successor's history forked from its own:
// those it acknowledged alone, discarded when it syncs from its successor. It measures them when
// a pass reads the old primary again before that sync (still on its old history), or when the
// last pass that read it there already saw it past the fork; writes it took after the last pass
// that read it cannot be counted once it has synced, and the Change says so.
// The zero Watch is ready; a new process starts one from the primaries it first finds.
type Watch struct {
	primaries map[int]primarySeen
	handovers map[int]time.Time
	deposed   map[string]deposedPrimary
}

// primarySeen is a shard's primary at the last pass that found exactly one: its replication, and
// each replica's lag behind it (replicas on its history).
type primarySeen struct {
	name, id string
	repl     member.Replication
	lag      map[string]int64
	at       time.Time
}

// deposedPrimary is a former primary not yet read again: its successor, and its replication as
// last read while on its own history.
type deposedPrimary struct {
	successor string
	last      member.Replication
	since     time.Time
}

// Change is a shard's primary replaced between two passes.
type Change struct {
	Shard    int
	From, To string
	// Planned: a pass asked To's shard to hand over within HandoverWindow before (the operator's
	// CLUSTER FAILOVER, which waits for the replica to catch up); otherwise the cluster elected
	// To because From stopped answering.
	Planned bool
	// Behind is To's lag behind From in bytes at the last pass that read both on one history
	// (-1: none did), and Since how long before this pass that pass was.
	Behind int64
	Since  time.Duration
}

// Discard is a former primary's writes that its successor never had, measured.
type Discard struct {
	Member, Primary string
	// Bytes past the fork: exact when Synced is false (the member was read on its old history
	// after it stopped taking writes), a lower bound when true (it had synced from its successor
	// by the time a pass read it, and Bytes is what the last pass that read it on its old history
	// saw past the fork).
	Bytes        int64
	Offset, Fork int64
	Synced       bool
}

// HandoverWindow is how long after a pass asked a shard's replica to take over a change of that
// shard's primary counts as the handover.
const HandoverWindow = 30 * time.Second

// deposedFor is how long a former primary that no pass reads is waited for.
const deposedFor = 10 * time.Minute

// Observe takes a pass's result and returns the shards whose primary changed since the last
// pass that found one, and the discarded writes of former primaries read again.
func (w *Watch) Observe(res Result, now time.Time) ([]Change, []Discard) {
	if w.primaries == nil {
		w.primaries, w.handovers, w.deposed = map[int]primarySeen{}, map[int]time.Time{}, map[string]deposedPrimary{}
	}
	byName := map[string]Seen{}
	claims := map[int][]Seen{}
	for _, s := range res.Seen {
		if s.Err != nil {
			continue
		}
		byName[s.Name] = s
		if s.View.Primary && len(s.View.Slots) > 0 {
			claims[s.Shard] = append(claims[s.Shard], s)
		}
	}
	var changes []Change
	for shard, cs := range claims {
		prev, known := w.primaries[shard]
		if len(cs) != 1 {
			// Two members of the shard say they serve its slots (one cut off from the cluster):
			// the cluster settles it. The known primary's writes since still count.
			for _, c := range cs {
				if known && c.View.ID == prev.id && c.Repl.ReplID == prev.repl.ReplID {
					prev.repl = c.Repl
					w.primaries[shard] = prev
				}
			}
			continue
		}
		cur := cs[0]
		if known && prev.id != cur.View.ID {
			ch := Change{Shard: shard, From: prev.name, To: cur.Name, Behind: -1, Since: now.Sub(prev.at)}
			if lag, ok := prev.lag[cur.Name]; ok {
				ch.Behind = lag
			}
			if at, ok := w.handovers[shard]; ok && now.Sub(at) < HandoverWindow {
				ch.Planned = true
				delete(w.handovers, shard)
			}
			changes = append(changes, ch)
			if prev.name != cur.Name {
				w.deposed[prev.name] = deposedPrimary{successor: cur.Name, last: prev.repl, since: now}
			}
		}
		p := primarySeen{name: cur.Name, id: cur.View.ID, repl: cur.Repl, lag: map[string]int64{}, at: now}
		for _, s := range byName {
			if s.Shard == shard && s.View.PrimaryID == cur.View.ID && s.Repl.ReplID == cur.Repl.ReplID {
				p.lag[s.Name] = max(0, cur.Repl.Offset-s.Repl.Offset)
			}
		}
		w.primaries[shard] = p
	}
	for _, step := range res.Steps {
		if step.Kind == shards.Failover {
			if s, ok := byName[step.Member]; ok {
				w.handovers[s.Shard] = now
			}
		}
	}
	return changes, w.discards(byName, now)
}

// discards reads again the former primaries a pass answered for.
func (w *Watch) discards(byName map[string]Seen, now time.Time) []Discard {
	var out []Discard
	for name, d := range w.deposed {
		m, ok1 := byName[name]
		succ, ok2 := byName[d.successor]
		if !ok1 || !ok2 || m.Repl.ReplID == "" {
			if now.Sub(d.since) > deposedFor {
				delete(w.deposed, name)
			}
			continue
		}
		fork := succ.Repl.SecondOffset - 1
		switch {
		case m.Repl.ReplID == d.last.ReplID && m.View.Primary && len(m.View.Slots) > 0:
			d.last = m.Repl // it still serves, cut off from the cluster: the bound grows
			w.deposed[name] = d
			continue
		case m.Repl.ReplID == succ.Repl.ReplID2 && succ.Repl.SecondOffset > 0:
			if bytes, known := roles.Discarded(succ.Repl, m.Repl); known && bytes > 0 {
				out = append(out, Discard{Member: name, Primary: d.successor, Bytes: bytes, Offset: m.Repl.Offset, Fork: fork})
			}
		case m.Repl.ReplID == succ.Repl.ReplID && d.last.ReplID == succ.Repl.ReplID2 && succ.Repl.SecondOffset > 0 &&
			d.last.Offset > fork:
			out = append(out, Discard{Member: name, Primary: d.successor, Bytes: d.last.Offset - fork, Offset: d.last.Offset, Fork: fork, Synced: true})
		}
		delete(w.deposed, name)
	}
	return out
}
