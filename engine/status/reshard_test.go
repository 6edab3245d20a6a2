package status

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"example.com/cache-operator/engine/api"
)

// A reshard's status through its passes: started at its first count, the slots moved counted
// from it (the same for a pass that reads the same, an operator's restart included), a pass that
// could not count changes nothing, the retiring shard's StatefulSet keeps it while it is removed,
// and it is gone once every slot is placed and no shard past spec.shards is left.
func TestApplyReshard(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	spec := api.Spec{Shards: 3, Replicas: 2}
	set := func(name string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetName(name)
		return u
	}
	sets := []*unstructured.Unstructured{set("c-s0"), set("c-s1"), set("c-s2"), set("c-s3")}
	view := func(toMove int64, known bool) Observed {
		return Observed{StatefulSets: sets, ViewOK: true, View: api.MembersView{Observed: true, SlotsToMove: toMove, SlotsKnown: known, Shards: 3}}
	}
	var s api.Status
	applyReshard(&s, "c", spec, view(4096, true), 5, now)
	c := meta.FindStatusCondition(s.Conditions, api.ConditionResharding)
	if s.Reshard == nil || *s.Reshard != (api.ReshardStatus{Shards: 3, SlotsToMove: 4096, Since: "2026-12-07T12:00:00Z"}) || c == nil || c.Reason != api.ReasonMovingSlots ||
		c.Message != "moving slots to 3 shards: 0 of 4096 moved" {
		t.Fatalf("first count: %+v, %+v", s.Reshard, c)
	}
	for range 2 { // the same count twice: the same status
		applyReshard(&s, "c", spec, view(1000, true), 5, now.Add(time.Minute))
		if c := meta.FindStatusCondition(s.Conditions, api.ConditionResharding); s.Reshard.SlotsMoved != 3096 || s.Reshard.SlotsToMove != 1000 ||
			s.Reshard.Since != "2026-12-07T12:00:00Z" || c.Message != "moving slots to 3 shards: 3096 of 4096 moved" {
			t.Fatalf("later: %+v, %+v", s.Reshard, c)
		}
	}
	applyReshard(&s, "c", spec, view(0, false), 5, now)
	if s.Reshard.SlotsToMove != 1000 {
		t.Fatalf("a pass that could not count changed the status: %+v", s.Reshard)
	}
	applyReshard(&s, "c", spec, view(0, true), 5, now)
	if c := meta.FindStatusCondition(s.Conditions, api.ConditionResharding); s.Reshard == nil || s.Reshard.SlotsMoved != 4096 || c.Reason != api.ReasonRemovingShards ||
		c.Message != "every shard serves its share of the slots; removing shard 3 (no slot, no key)" {
		t.Fatalf("slots placed, shard 3's StatefulSet still there: %+v, %+v", s.Reshard, c)
	}
	if s.Reshard.Placed != "2026-12-07T12:00:00Z" {
		t.Fatalf("placed %q; want the pass that found every slot placed", s.Reshard.Placed)
	}
	sets = sets[:3]
	applyReshard(&s, "c", spec, view(0, true), 5, now)
	if s.Reshard != nil || meta.FindStatusCondition(s.Conditions, api.ConditionResharding) != nil {
		t.Fatalf("done: %+v, %+v; want neither", s.Reshard, s.Conditions)
	}
	// A view judged against another count changes nothing; a new target starts a new count.
	applyReshard(&s, "c", api.Spec{Shards: 4, Replicas: 2}, view(4096, true), 5, now)
	if s.Reshard != nil {
		t.Fatalf("a view of 3 shards started a reshard to 4: %+v", s.Reshard)
	}
	o := view(4096, true)
	o.View.Shards = 4
	applyReshard(&s, "c", api.Spec{Shards: 4, Replicas: 2}, o, 5, now)
	applyReshard(&s, "c", api.Spec{Shards: 3, Replicas: 2}, view(2000, true), 5, now)
	if s.Reshard.Shards != 3 || s.Reshard.SlotsMoved != 0 || s.Reshard.SlotsToMove != 2000 {
		t.Fatalf("a new target: %+v; want a new count", s.Reshard)
	}
}
