package controller

import (
	"testing"
	"time"

	"example.com/cache-operator/engine/api"
)

// A shard past spec.shards stays rendered until a view judged against this very spec.shards
// finds the shards past it empty, and then api.RetireGrace after every slot was placed: a view
// from before the scale-in (it judged 4 shards, so nothing was past them) must not remove shard 3
// while it still serves its slots (seen on the real nodes).
func TestShardSetsKeepARetiringShardUntilEmpty(t *testing.T) {
	mc := newCache("c")
	mc.Object["spec"] = map[string]interface{}{"replicas": int64(2), "shards": int64(3), "engine": map[string]interface{}{"version": "7.2"}}
	sts := child("apps/v1", "StatefulSet", api.ShardSetName("c", 3), mc)
	sts.SetLabels(map[string]string{api.LabelManagedBy: api.ManagedByValue})
	f := newFixture(t, nil, mc, sts)
	spec, err := api.SpecFrom(mc)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		if s, _ := f.ctrl.child(sts.GroupVersionKind(), "shop", sts.GetName()); s != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the informer never held c-s3")
		}
		time.Sleep(10 * time.Millisecond) // polling the informer, with the deadline above
	}
	placedLongAgo := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	placedNow := time.Now().UTC().Format(time.RFC3339)
	for _, tc := range []struct {
		name   string
		view   api.MembersView
		placed string
		want   int
	}{
		{"no view yet", api.MembersView{}, placedLongAgo, 4},
		{"a view of 4 shards, from before the scale-in", api.MembersView{Observed: true, Shards: 4, RetiredEmpty: true}, placedLongAgo, 4},
		{"shard 3 still serves slots", api.MembersView{Observed: true, Shards: 3}, placedLongAgo, 4},
		{"empty, every slot placed just now", api.MembersView{Observed: true, Shards: 3, RetiredEmpty: true}, placedNow, 4},
		{"empty, placed a minute ago", api.MembersView{Observed: true, Shards: 3, RetiredEmpty: true}, placedLongAgo, 3},
	} {
		m := mc.DeepCopy()
		m.Object["status"] = map[string]interface{}{"reshard": map[string]interface{}{"shards": int64(3), "placed": tc.placed}}
		if got := f.ctrl.shardSets(m, spec, tc.view); got != tc.want {
			t.Errorf("%s: %d shard sets; want %d", tc.name, got, tc.want)
		}
	}
}
