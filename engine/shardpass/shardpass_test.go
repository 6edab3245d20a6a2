package shardpass

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

	"example.com/cache-operator/engine/member"
	"example.com/cache-operator/engine/member/membertest"
	"example.com/cache-operator/engine/shards"
)

// localCluster is cluster-mode redis-server processes on 127.0.0.1 standing in for a sharded
// cache's members, named c-<shard>-<ordinal>, each with its cluster bus on a port of its own.
type localCluster struct {
	t        *testing.T
	password string
	members  []Member
	clients  map[string]*redis.Client
	pass     Pass
	moved    int
	paced    int // passes that stopped at MoveFor
}

func (lc *localCluster) start(shard, per int) {
	for o := 0; o < per; o++ {
		name := fmt.Sprintf("c-%d-%d", shard, o)
		addr, bus := membertest.ClusterServer(lc.t, lc.password)
		cl := redis.NewClient(&redis.Options{Addr: addr, Password: lc.password, MaxRetries: -1, Protocol: 2, DisableIdentity: true})
		lc.t.Cleanup(func() { cl.Close() })
		lc.members = append(lc.members, Member{Name: name, Shard: shard, Ordinal: o, Addr: addr, BusPort: bus})
		lc.clients[name] = cl
	}
}

// views reads every member's view of the cluster.
func (lc *localCluster) views(ctx context.Context) map[string]member.ClusterView {
	out := map[string]member.ClusterView{}
	for _, m := range lc.members {
		v, err := member.ObserveCluster(ctx, lc.clients[m.Name])
		if err != nil {
			lc.t.Fatal(err)
		}
		out[m.Name] = v
	}
	return out
}

// converge runs passes until one finds the cluster whole, within a minute; it returns the phases
// carried out.
func (lc *localCluster) converge(ctx context.Context, spec shards.Spec) []string {
	var phases []string
	deadline := time.Now().Add(time.Minute)
	for {
		res, err := lc.pass.Run(ctx, lc.members, spec)
		if err != nil {
			lc.t.Fatalf("a pass: %v", err)
		}
		lc.moved += res.KeysMoved
		if res.Paced {
			lc.paced++
		}
		if res.Whole {
			return phases
		}
		if len(res.Steps) > 0 && res.Steps[0].Kind != shards.Wait && (len(phases) == 0 || phases[len(phases)-1] != string(res.Steps[0].Kind)) {
			phases = append(phases, string(res.Steps[0].Kind))
		}
		if time.Now().After(deadline) {
			lc.t.Fatalf("the cluster did not converge to %+v within a minute; the last steps: %v", spec, res.Steps)
		}
		time.Sleep(100 * time.Millisecond) // polling gossip between passes, with the deadline above
	}
}

// TestClusterFormsAndReshardsOnLocalServers runs passes on real cluster-mode redis-server
// processes on 127.0.0.1 standing in for a sharded cache's members: six new servers become a
// cluster of three shards of two (cluster_state:ok, each shard a primary and its replica, Even(3)'s
// slots), then, under a cluster-aware writer that records every acknowledged write, two more
// servers join and the slots move to four shards, then back to three, and shard 1's primary
// leaves (its pod being deleted): its replica takes its slots over. Every acknowledged write is
// read back afterwards, with its value, the writer saw no error, and the removed shard's servers
// hold no slot and no key.
func TestClusterFormsAndReshardsOnLocalServers(t *testing.T) {
	ctx := context.Background()
	lc := &localCluster{t: t, password: "cluster-test-pw", clients: map[string]*redis.Client{}}
	lc.pass = Pass{Client: func(m Member) *redis.Client { return lc.clients[m.Name] }, MigratePassword: lc.password,
		MoveFor: 500 * time.Millisecond, MoveShare: 0.5}
	for s := 0; s < 3; s++ {
		lc.start(s, 2)
	}
	phases := lc.converge(ctx, shards.Spec{Shards: 3, PerShard: 2})
	t.Logf("formed 3 shards × 2 in phases %v", phases)
	if want := []string{"Meet", "AddSlots", "Replicate"}; !reflect.DeepEqual(phases, want) {
		t.Errorf("phases %v; want %v", phases, want)
	}
	views := lc.views(ctx)
	for _, m := range lc.members {
		v := views[m.Name]
		if m.Ordinal == 0 {
			if want := shards.Even(3)[m.Shard]; !v.Primary || !reflect.DeepEqual(v.Slots, [][2]int{{want.From, want.To}}) {
				t.Errorf("%s: primary %v, slots %v; want a primary of %v", m.Name, v.Primary, v.Slots, want)
			}
		} else if v.PrimaryID != views[fmt.Sprintf("c-%d-0", m.Shard)].ID {
			t.Errorf("%s replicates %s; want its shard's first member", m.Name, v.PrimaryID)
		}
	}

	var addrs []string
	for _, m := range lc.members {
		addrs = append(addrs, m.Addr)
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
	// Each shard serves its count of the even layout.
	views = lc.views(ctx)
	for shard, r := range shards.Even(3) {
		n := 0
		for _, sr := range views[fmt.Sprintf("c-%d-0", shard)].Slots {
			n += sr[1] - sr[0] + 1
		}
		if want := r.To - r.From + 1; n != want {
			t.Errorf("after 4 → 3 shards, shard %d serves %d slots; want %d", shard, n, want)
		}
	}
	shard1 := views["c-1-0"].Slots
	// A planned removal of shard 1's primary under the writer: its replica takes the slots over.
	for i := range lc.members {
		lc.members[i].Leaving = lc.members[i].Name == "c-1-0"
	}
	t0 = time.Now()
	phases = lc.converge(ctx, shards.Spec{Shards: 3, PerShard: 2})
	t.Logf("c-1-0 leaving: handed over in %v, phases %v", time.Since(t0).Round(time.Millisecond), phases)
	if views := lc.views(ctx); !views["c-1-1"].Primary || !reflect.DeepEqual(views["c-1-1"].Slots, shard1) ||
		views["c-1-0"].PrimaryID != views["c-1-1"].ID {
		t.Errorf("after c-1-0's handover: c-1-1 primary %v with %v, c-1-0 replicates %q; want c-1-1 the primary of shard 1's slots, c-1-0 its replica",
			views["c-1-1"].Primary, views["c-1-1"].Slots, views["c-1-0"].PrimaryID)
	}
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
	if lc.moved == 0 {
		t.Error("the passes moved no key between shards")
	}
	if lc.paced == 0 {
		t.Error("no pass stopped its moves at MoveFor (0.5 s): each reshard was done in one pass")
	}
	views = lc.views(ctx)
	for _, m := range []string{"c-3-0", "c-3-1"} {
		n, err := lc.clients[m].DBSize(ctx).Result()
		if err != nil || n != 0 || len(views[m].Slots) != 0 {
			t.Errorf("%s of the removed shard: %d keys (%v), slots %v; want none", m, n, err, views[m].Slots)
		}
	}
}
