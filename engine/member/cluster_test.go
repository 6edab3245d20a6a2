package member

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"example.com/cache-operator/engine/member/membertest"
)

func TestParseClusterNodes(t *testing.T) {
	text := `07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004,host-4 slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected
67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30002@31002 master - 0 1426238316232 2 connected 5461-10922
292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 127.0.0.1:30003@31003 master - 0 1426238318243 3 connected 10923-16383 [10923-<-67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1]
6ec23923021cf3ffec47632106199cb7f496ce01 127.0.0.1:30005@31005 slave 67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 0 1426238316232 5 connected
aaaabbbbccccddddeeeeffff0000111122223333 127.0.0.1:30009@31009 handshake - 0 0 0 connected
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-5460 7 [93->-292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f] [77-<-67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1]
`
	v, err := ParseClusterNodes(text)
	if err != nil {
		t.Fatal(err)
	}
	want := ClusterView{ID: "e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca", Primary: true, Slots: [][2]int{{0, 5460}, {7, 7}},
		Migrating: map[int]string{93: "292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f"},
		Importing: map[int]string{77: "67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1"},
		Known: map[string]string{"07c37dfeb235213a872192d90877d0cd55635b91": "127.0.0.1:30004", "67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1": "127.0.0.1:30002",
			"292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f": "127.0.0.1:30003", "6ec23923021cf3ffec47632106199cb7f496ce01": "127.0.0.1:30005"},
		Serving: map[string]bool{"07c37dfeb235213a872192d90877d0cd55635b91": false, "67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1": true,
			"292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f": true, "6ec23923021cf3ffec47632106199cb7f496ce01": false}}
	if !reflect.DeepEqual(v, want) {
		t.Errorf("got  %+v\nwant %+v", v, want)
	}
	if _, err := ParseClusterNodes("e7d1 127.0.0.1:30001@31001 master - 0 0 1 connected 0-5460\n"); err == nil {
		t.Error("a text with no myself line was accepted")
	}
	if _, err := ParseClusterNodes("e7d1 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-x\n"); err == nil {
		t.Error("a bad slot range was accepted")
	}
}

// MoveSlots on two real cluster-mode servers: 300 keys of one slot move from the one that serves
// every slot to the other. With For longer than any MIGRATE the keys go Batch (100) at a time;
// with For shorter than any, each MIGRATE carries half the keys of the one before, down to one.
// Either way every key arrives with its value and the target serves the slot.
func TestMoveSlotsBoundsEachMigrate(t *testing.T) {
	for _, tc := range []struct {
		name            string
		for_            time.Duration
		minCalls, calls int
	}{
		{name: "unbounded", for_: time.Hour, minCalls: 3, calls: 3},
		{name: "bounded below any MIGRATE", for_: time.Nanosecond, minCalls: 10, calls: 300},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			const pw = "move-pw"
			addrA, _ := membertest.ClusterServer(t, pw)
			addrB, busB := membertest.ClusterServer(t, pw)
			a := redis.NewClient(&redis.Options{Addr: addrA, Password: pw, Protocol: 2, DisableIdentity: true})
			b := redis.NewClient(&redis.Options{Addr: addrB, Password: pw, Protocol: 2, DisableIdentity: true})
			defer a.Close()
			defer b.Close()
			if err := AddSlots(ctx, a, 0, 16383); err != nil {
				t.Fatal(err)
			}
			if err := Meet(ctx, a, addrB, busB); err != nil {
				t.Fatal(err)
			}
			va, vb := waitKnown(t, ctx, a, b)
			for i := range 300 {
				if err := a.Set(ctx, fmt.Sprintf("{m}:%d", i), i, 0).Err(); err != nil {
					t.Fatal(err)
				}
			}
			s, err := a.ClusterKeySlot(ctx, "{m}").Result()
			if err != nil {
				t.Fatal(err)
			}
			slot := int(s)
			var sizes []time.Duration
			moved, err := MoveSlots(ctx, a, b, va.ID, vb.ID, addrB, []int{slot},
				Migration{Password: pw, For: tc.for_, Pace: func(d time.Duration) { sizes = append(sizes, d) }})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d keys moved in %d MIGRATEs", moved, len(sizes))
			if moved != 300 || len(sizes) < tc.minCalls || len(sizes) > tc.calls {
				t.Errorf("%d keys in %d MIGRATEs; want 300 keys in %d to %d", moved, len(sizes), tc.minCalls, tc.calls)
			}
			if n, err := b.DBSize(ctx).Result(); err != nil || n != 300 {
				t.Errorf("the target holds %d keys (%v); want 300", n, err)
			}
			if v, err := b.Do(ctx, "CLUSTER", "COUNTKEYSINSLOT", slot).Int64(); err != nil || v != 300 {
				t.Errorf("the target counts %d keys in slot %d (%v)", v, slot, err)
			}
		})
	}
}

// waitKnown waits until a and b know each other, b sees a serve slots and both say
// cluster_state:ok, and returns their views.
func waitKnown(t *testing.T, ctx context.Context, a, b *redis.Client) (ClusterView, ClusterView) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		va, err := ObserveCluster(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		vb, err := ObserveCluster(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := va.Known[vb.ID]; ok && vb.Serving[va.ID] && va.State == "ok" && vb.State == "ok" {
			return va, vb
		}
		if time.Now().After(deadline) {
			t.Fatalf("within 30 s: %s knows %v, %s serving %v", va.ID, va.Known, vb.ID, vb.Serving)
		}
		time.Sleep(50 * time.Millisecond) // polling gossip, with the deadline above
	}
}
