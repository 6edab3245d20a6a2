package status

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"example.com/cache-operator/engine/api"
)

// applyReshard keeps status.reshard and the Resharding condition of a sharded cache: present
// while the member pass counts slots to move or a shard's StatefulSet past spec.shards is still
// there. The slots moved are counted from the first count of the reshard (those to move then,
// kept as moved + to move), so that the figure survives an operator restart and reads the same
// in every pass. A pass that could not count (a member did not answer), or counted against
// another spec.shards (before a change), changes nothing.
func applyReshard(s *api.Status, name string, spec api.Spec, o Observed, gen int64, now time.Time) {
	if !spec.Sharded() {
		s.Reshard = nil
		meta.RemoveStatusCondition(&s.Conditions, api.ConditionResharding)
		return
	}
	var retiring []string
	for _, sts := range o.StatefulSets {
		if sts == nil {
			continue
		}
		if shard, ok := api.ShardOfSet(name, sts.GetName()); ok && shard >= int(spec.Shards) {
			retiring = append(retiring, fmt.Sprint(shard))
		}
	}
	if !o.ViewOK || !o.View.SlotsKnown || o.View.Shards != spec.Shards {
		return
	}
	toMove := o.View.SlotsToMove
	if toMove == 0 && len(retiring) == 0 {
		s.Reshard = nil
		meta.RemoveStatusCondition(&s.Conditions, api.ConditionResharding)
		return
	}
	r := s.Reshard
	if r == nil || r.Shards != spec.Shards {
		r = &api.ReshardStatus{Shards: spec.Shards, SlotsToMove: toMove, Since: now.UTC().Format(time.RFC3339)}
	}
	total := r.SlotsMoved + r.SlotsToMove
	r.SlotsMoved, r.SlotsToMove = max(r.SlotsMoved, total-toMove), toMove
	switch {
	case toMove > 0:
		r.Placed = ""
	case r.Placed == "":
		r.Placed = now.UTC().Format(time.RFC3339)
	}
	s.Reshard = r
	c := metav1.Condition{Type: api.ConditionResharding, Status: metav1.ConditionTrue, ObservedGeneration: gen, Reason: api.ReasonMovingSlots,
		Message: fmt.Sprintf("moving slots to %d shards: %d of %d moved", r.Shards, r.SlotsMoved, r.SlotsMoved+r.SlotsToMove)}
	if toMove == 0 {
		c.Reason = api.ReasonRemovingShards
		c.Message = fmt.Sprintf("every shard serves its share of the slots; removing shard %s (no slot, no key)", strings.Join(retiring, ", "))
	}
	meta.SetStatusCondition(&s.Conditions, c)
}
