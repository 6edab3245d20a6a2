package shards

import (
	"fmt"
	"strconv"
	"strings"
)

// assignRestored: a cluster restored from a sharded backup. Each shard's first member loaded its
// shard's object and, a new node holding keys, claimed the slots it holds keys of; the rest of the
// shard's slots in the backup (those with no key) go to the shard's primary. A slot of a shard's
// backup ranges that a member of another shard serves means the backup and the members disagree:
// the phase waits, saying so, rather than hand out anything.
func assignRestored(nodes []Node, byID map[string]*Node, spec Spec) []Step {
	owner, shardOf := map[int]string{}, map[string]int{}
	for _, n := range nodes {
		shardOf[n.Member] = n.Shard
		for _, r := range n.Slots {
			for s := r.From; s <= r.To; s++ {
				owner[s] = n.Member
			}
		}
	}
	var steps []Step
	for shard := 0; shard < len(spec.Restored) && shard < spec.Shards; shard++ {
		p := primaryOf(nodes, byID, shard)
		if p == nil {
			continue
		}
		var missing []int
		for _, r := range spec.Restored[shard] {
			for s := r.From; s <= r.To; s++ {
				m, ok := owner[s]
				switch {
				case !ok:
					missing = append(missing, s)
				case shardOf[m] != shard:
					return []Step{{Kind: Wait, Why: fmt.Sprintf("slot %d, shard %d's in the backup, is served by %s of shard %d", s, shard, m, shardOf[m])}}
				}
			}
		}
		if len(missing) > 0 {
			steps = append(steps, Step{Kind: AddSlots, Member: p.Member, Slots: ranges(missing),
				Why: fmt.Sprintf("a restored cluster: shard %d serves the %d slots of its backup that hold no key", shard, len(missing))})
		}
	}
	return steps
}

// ParseRanges reads slot ranges as status lists them ("0-5460,16000-16383").
func ParseRanges(s string) ([]Range, error) {
	var out []Range
	for _, part := range strings.Split(s, ",") {
		from, to, found := strings.Cut(strings.TrimSpace(part), "-")
		if !found {
			to = from
		}
		a, err1 := strconv.Atoi(from)
		b, err2 := strconv.Atoi(to)
		if err1 != nil || err2 != nil || a < 0 || b >= Slots || a > b {
			return nil, fmt.Errorf("slot ranges %q: %q is not a range of slots", s, part)
		}
		out = append(out, Range{From: a, To: b})
	}
	return out, nil
}
