package shardpass

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"example.com/cache-operator/engine/member"
	"example.com/cache-operator/engine/shards"
)

// primaryOf is a member serving slots on history replID at offset (promoted from replID2 at
// second, when set).
func primaryOf(name string, shard int, id, replID string, offset int64, replID2 string, second int64) Seen {
	return Seen{Member: Member{Name: name, Shard: shard}, View: member.ClusterView{ID: id, Primary: true, Slots: [][2]int{{0, 5460}}},
		Repl: member.Replication{Role: "master", ReplID: replID, Offset: offset, ReplID2: replID2, SecondOffset: second}}
}

func replicaOf(name string, shard int, id, of, replID string, offset int64) Seen {
	return Seen{Member: Member{Name: name, Shard: shard}, View: member.ClusterView{ID: id, PrimaryID: of},
		Repl: member.Replication{Role: "slave", ReplID: replID, Offset: offset}}
}

func gone(name string, shard int) Seen {
	return Seen{Member: Member{Name: name, Shard: shard}, Err: errors.New("connection refused")}
}

func TestWatchTellsFailoversAndCountsDiscardedWrites(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	type pass struct {
		seen     []Seen
		steps    []shards.Step
		changes  []Change
		discards []Discard
	}
	before := pass{seen: []Seen{primaryOf("c-s0-0", 0, "A", "h1", 1000, "", -1), replicaOf("c-s0-1", 0, "B", "A", "h1", 900)}}
	// B promoted off h1 at 951 (its fork is 950).
	promoted := primaryOf("c-s0-1", 0, "B", "h2", 960, "h1", 951)
	failedOver := Change{Shard: 0, From: "c-s0-0", To: "c-s0-1", Behind: 100, Since: time.Second}
	for _, tc := range []struct {
		name   string
		passes []pass
	}{
		{"the cluster's failover, the old primary read before it syncs: its writes past the fork counted exactly", []pass{
			before,
			{seen: []Seen{gone("c-s0-0", 0), promoted}, changes: []Change{failedOver}},
			{seen: []Seen{replicaOf("c-s0-0", 0, "A", "B", "h1", 1200), promoted},
				discards: []Discard{{Member: "c-s0-0", Primary: "c-s0-1", Bytes: 250, Offset: 1200, Fork: 950}}},
			{seen: []Seen{replicaOf("c-s0-0", 0, "A", "B", "h2", 960), promoted}},
		}},
		{"the old primary already synced: what the last read on its history saw past the fork, as a lower bound", []pass{
			before,
			{seen: []Seen{primaryOf("c-s0-0", 0, "A", "h1", 1100, "", -1), promoted}}, // both serve: a partition
			{seen: []Seen{primaryOf("c-s0-0", 0, "A", "h1", 1300, "", -1), promoted}},
			{seen: []Seen{replicaOf("c-s0-0", 0, "A", "B", "h2", 960), promoted},
				changes:  []Change{{Shard: 0, From: "c-s0-0", To: "c-s0-1", Behind: 100, Since: 3 * time.Second}},
				discards: []Discard{{Member: "c-s0-0", Primary: "c-s0-1", Bytes: 350, Offset: 1300, Fork: 950, Synced: true}}},
		}},
		{"a crashed primary back with a new history: nothing to measure, nothing reported", []pass{
			before,
			{seen: []Seen{gone("c-s0-0", 0), promoted}, changes: []Change{failedOver}},
			{seen: []Seen{replicaOf("c-s0-0", 0, "A", "B", "h9", 0), promoted}},
			{seen: []Seen{replicaOf("c-s0-0", 0, "A", "B", "h2", 960), promoted}},
		}},
		{"a handover the operator asked for is planned; caught up, it discards nothing", []pass{
			{seen: before.seen, steps: []shards.Step{{Kind: shards.Failover, Member: "c-s0-1"}}},
			{seen: []Seen{replicaOf("c-s0-0", 0, "A", "B", "h1", 950), promoted},
				changes: []Change{{Shard: 0, From: "c-s0-0", To: "c-s0-1", Planned: true, Behind: 100, Since: time.Second}}},
		}},
		{"a new process starts from what it finds", []pass{
			{seen: []Seen{replicaOf("c-s0-0", 0, "A", "B", "h1", 1200), promoted}},
			{seen: []Seen{replicaOf("c-s0-0", 0, "A", "B", "h2", 960), promoted}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var w Watch
			for i, p := range tc.passes {
				changes, discards := w.Observe(Result{Seen: p.seen, Steps: p.steps}, t0.Add(time.Duration(i)*time.Second))
				if !reflect.DeepEqual(changes, p.changes) {
					t.Errorf("pass %d: changes %+v; want %+v", i, changes, p.changes)
				}
				if !reflect.DeepEqual(discards, p.discards) {
					t.Errorf("pass %d: discards %+v; want %+v", i, discards, p.discards)
				}
			}
		})
	}
}
