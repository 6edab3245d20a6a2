package member

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"example.com/cache-operator/engine/member/membertest"
	"example.com/cache-operator/engine/shards"
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

// localCluster is cluster-mode redis-server processes on 127.0.0.1 standing in for a sharded
// cache's members, named c-<shard>-<ordinal>.
type localCluster struct {
	t        *testing.T
	password string
	members  []string
	shard    map[string]int
	ordinal  map[string]int
	addr     map[string]string
	bus      map[string]int
	clients  map[string]*redis.Client
}

func (lc *localCluster) start(shard, per int) {
	for o := 0; o < per; o++ {
		name := fmt.Sprintf("c-%d-%d", shard, o)
		addr, bus := membertest.ClusterServer(lc.t, lc.password)
		cl := redis.NewClient(&redis.Options{Addr: addr, Password: lc.password, MaxRetries: -1, Protocol: 2, DisableIdentity: true})
		lc.t.Cleanup(func() { cl.Close() })
		lc.members = append(lc.members, name)
		lc.shard[name], lc.ordinal[name], lc.addr[name], lc.bus[name], lc.clients[name] = shard, o, addr, bus, cl
	}
}

// observe reads every member into the planner's nodes.
func (lc *localCluster) observe(ctx context.Context) ([]shards.Node, map[string]ClusterView) {
	views := map[string]ClusterView{}
	open := map[int]bool{}
	for _, m := range lc.members {
		v, err := ObserveCluster(ctx, lc.clients[m])
		if err != nil {
			lc.t.Fatal(err)
		}
		views[m] = v
		for s := range v.Migrating {
			open[s] = true
		}
		for s := range v.Importing {
			open[s] = true
		}
	}
	var nodes []shards.Node
	for _, m := range lc.members {
		v := views[m]
		n := shards.Node{Member: m, Shard: lc.shard[m], Ordinal: lc.ordinal[m], Addr: lc.addr[m], Observed: true, ID: v.ID,
			Primary: v.Primary, PrimaryID: v.PrimaryID, Migrating: v.Migrating, Importing: v.Importing, Known: v.Known, Serving: v.Serving,
			KeysInOpen: map[int]int64{}}
		for _, r := range v.Slots {
			n.Slots = append(n.Slots, shards.Range{From: r[0], To: r[1]})
		}
		for s := range open {
			k, err := KeysInSlot(ctx, lc.clients[m], s)
			if err != nil {
				lc.t.Fatal(err)
			}
			n.KeysInOpen[s] = k
		}
		nodes = append(nodes, n)
	}
	return nodes, views
}

// apply carries one step out as a member pass would.
func (lc *localCluster) apply(ctx context.Context, s shards.Step, views map[string]ClusterView) {
	t := lc.t
	var err error
	switch s.Kind {
	case shards.Wait:
	case shards.Forget:
		for _, m := range lc.members {
			if e := ForgetNode(ctx, lc.clients[m], s.Target); e != nil {
				err = e
			}
		}
	case shards.Meet:
		err = Meet(ctx, lc.clients[s.Member], s.Addr, lc.bus[s.Target])
	case shards.AddSlots:
		for _, r := range s.Slots {
			if err = AddSlots(ctx, lc.clients[s.Member], r.From, r.To); err != nil {
				break
			}
		}
	case shards.Replicate:
		err = ReplicateNode(ctx, lc.clients[s.Member], views[s.Target].ID)
	case shards.Stable:
		for _, r := range s.Slots {
			for slot := r.From; slot <= r.To && err == nil; slot++ {
				err = SetSlotStable(ctx, lc.clients[s.Member], slot)
			}
		}
	case shards.Move:
		for _, r := range s.Slots {
			for slot := r.From; slot <= r.To && err == nil; slot++ {
				_, err = MoveSlot(ctx, lc.clients[s.Member], lc.clients[s.Target], views[s.Member].ID, views[s.Target].ID, lc.addr[s.Target], "", lc.password, slot, 100)
			}
		}
	}
	if err != nil {
		t.Fatalf("%s: %v", s, err)
	}
}

// converge runs passes (observe, Decide, carry out the phase) until Decide has nothing left and
// every member says cluster_state:ok, within a minute; it returns the phases run.
func (lc *localCluster) converge(ctx context.Context, spec shards.Spec) []string {
	var phases []string
	deadline := time.Now().Add(time.Minute)
	for {
		nodes, views := lc.observe(ctx)
		steps := shards.Decide(nodes, spec)
		if len(steps) == 0 {
			ok := true
			for _, v := range views {
				ok = ok && v.State == "ok"
			}
			if ok {
				return phases
			}
		} else if steps[0].Kind != shards.Wait && (len(phases) == 0 || phases[len(phases)-1] != string(steps[0].Kind)) {
			phases = append(phases, string(steps[0].Kind))
		}
		for _, s := range steps {
			lc.apply(ctx, s, views)
		}
		if time.Now().After(deadline) {
			lc.t.Fatalf("the cluster did not converge to %+v within a minute; the last steps: %v", spec, steps)
		}
		time.Sleep(100 * time.Millisecond) // polling gossip between passes, with the deadline above
	}
}

// TestClusterFormsAndReshardsOnLocalServers carries shards.Decide's plans out with this package's
// commands on real cluster-mode redis-server processes: six new servers become a cluster of three
// shards of two (cluster_state:ok, each shard a primary and its replica, Even(3)'s slots), then,
// under a cluster-aware writer that records every acknowledged write, two more servers join and the
// slots move to four shards, then back to three. Every acknowledged write is read back afterwards,
// with its value, and the removed shard's servers hold no slot and no key.
func TestClusterFormsAndReshardsOnLocalServers(t *testing.T) {
	ctx := context.Background()
	lc := &localCluster{t: t, password: "cluster-test-pw", shard: map[string]int{}, ordinal: map[string]int{}, addr: map[string]string{},
		bus: map[string]int{}, clients: map[string]*redis.Client{}}
	for s := 0; s < 3; s++ {
		lc.start(s, 2)
	}
	phases := lc.converge(ctx, shards.Spec{Shards: 3, PerShard: 2})
	t.Logf("formed 3 shards × 2 in phases %v", phases)
	if want := []string{"Meet", "AddSlots", "Replicate"}; !reflect.DeepEqual(phases, want) {
		t.Errorf("phases %v; want %v", phases, want)
	}
	_, views := lc.observe(ctx)
	for _, m := range lc.members {
		v := views[m]
		if lc.ordinal[m] == 0 {
			if want := shards.Even(3)[lc.shard[m]]; !v.Primary || !reflect.DeepEqual(v.Slots, [][2]int{{want.From, want.To}}) {
				t.Errorf("%s: primary %v, slots %v; want a primary of %v", m, v.Primary, v.Slots, want)
			}
		} else if v.PrimaryID != views[fmt.Sprintf("c-%d-0", lc.shard[m])].ID {
			t.Errorf("%s replicates %s; want its shard's first member", m, v.PrimaryID)
		}
	}

	var addrs []string
	for _, m := range lc.members {
		addrs = append(addrs, lc.addr[m])
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, Password: lc.password, Protocol: 2, DisableIdentity: true, MaxRedirects: 8})
	defer cc.Close()
	// The writer: one write a millisecond or so, at most 200,000 writes or two minutes.
	var mu sync.Mutex
	acked := map[int]bool{}
	var failed []string
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		deadline := time.Now().Add(2 * time.Minute)
		for i := 0; i < 200_000 && time.Now().Before(deadline); i++ {
			select {
			case <-stop:
				return
			default:
			}
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			err := cc.Set(cctx, "w:"+strconv.Itoa(i), i, 0).Err()
			cancel()
			mu.Lock()
			if err == nil {
				acked[i] = true
			} else if len(failed) < 10 {
				failed = append(failed, err.Error())
			}
			mu.Unlock()
			time.Sleep(time.Millisecond) // a steady writer, not a flood
		}
	}()
	writes := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	for until := time.Now().Add(10 * time.Second); writes() < 500 && time.Now().Before(until); {
		time.Sleep(20 * time.Millisecond) // polling the writer's count, with a deadline
	}

	lc.start(3, 2)
	t0 := time.Now()
	phases = lc.converge(ctx, shards.Spec{Shards: 4, PerShard: 2})
	t.Logf("3 → 4 shards in %v, phases %v, %d writes acknowledged so far", time.Since(t0).Round(time.Millisecond), phases, writes())
	t0 = time.Now()
	phases = lc.converge(ctx, shards.Spec{Shards: 3, PerShard: 2})
	t.Logf("4 → 3 shards in %v, phases %v", time.Since(t0).Round(time.Millisecond), phases)
	close(stop)
	<-done

	mu.Lock()
	keys := make([]int, 0, len(acked))
	for k := range acked {
		keys = append(keys, k)
	}
	mu.Unlock()
	sort.Ints(keys)
	lost := 0
	for _, k := range keys {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		v, err := cc.Get(cctx, "w:"+strconv.Itoa(k)).Result()
		cancel()
		if err != nil || v != strconv.Itoa(k) {
			lost++
			if lost <= 5 {
				t.Errorf("acknowledged write w:%d reads %q, %v", k, v, err)
			}
		}
	}
	t.Logf("%d writes acknowledged through two reshards, %d lost; first failures: %v", len(keys), lost, failed)
	if len(keys) < 500 {
		t.Errorf("only %d writes acknowledged", len(keys))
	}
	if len(failed) > 0 {
		t.Errorf("writes failed (a cluster client should only see redirections it follows): %v", failed)
	}
	_, views = lc.observe(ctx)
	for _, m := range []string{"c-3-0", "c-3-1"} {
		n, err := lc.clients[m].DBSize(ctx).Result()
		if err != nil || n != 0 || len(views[m].Slots) != 0 {
			t.Errorf("%s of the removed shard: %d keys (%v), slots %v; want none", m, n, err, views[m].Slots)
		}
	}
}
