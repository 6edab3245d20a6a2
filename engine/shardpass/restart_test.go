package shardpass

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"example.com/cache-operator/engine/member"
	"example.com/cache-operator/engine/member/membertest"
	"example.com/cache-operator/engine/shards"
)

// restartable starts 3 shards × 2 cluster-mode servers on 127.0.0.1 that the test can stop and
// start again (procs); connect points a member and its client at its server where it is now.
func restartable(t *testing.T, pw string, extra ...string) (*localCluster, map[string]*membertest.Proc, func(*Member, *membertest.Proc)) {
	lc := &localCluster{t: t, password: pw, clients: map[string]*redis.Client{}}
	lc.pass = Pass{Client: func(m Member) *redis.Client { return lc.clients[m.Name] }, MigratePassword: pw}
	procs := map[string]*membertest.Proc{}
	connect := func(m *Member, p *membertest.Proc) {
		m.Addr, m.BusPort = p.Addr(), p.Bus
		cl := redis.NewClient(&redis.Options{Addr: m.Addr, Password: pw, MaxRetries: -1, Protocol: 2, DisableIdentity: true})
		t.Cleanup(func() { cl.Close() })
		lc.clients[m.Name] = cl
	}
	for s := 0; s < 3; s++ {
		for o := 0; o < 2; o++ {
			m := Member{Name: fmt.Sprintf("c-%d-%d", s, o), Shard: s, Ordinal: o}
			procs[m.Name] = membertest.StartCluster(t, pw, "127.0.0.1", extra...)
			connect(&m, procs[m.Name])
			lc.members = append(lc.members, m)
		}
	}
	return lc, procs, connect
}

// TestRestartAtNewAddressesRelinksReplicas: a cluster of 3 shards × 2 stops whole and starts again
// with every member at the address another had (a hibernation's resume on nodes that hand the
// pods' addresses out again: every member back with its nodes.conf at a peer's old address, where
// its peers' links reach the wrong node and flag it without an address). The passes introduce
// them again; every replica then links to its own primary where it is now.
func TestRestartAtNewAddressesRelinksReplicas(t *testing.T) {
	ctx := context.Background()
	const pw = "restart-test-pw"
	lc, procs, connect := restartable(t, pw)
	spec := shards.Spec{Shards: 3, PerShard: 2}
	lc.converge(ctx, spec)

	// Every member takes the next one's address (c-0-0 c-0-1's, ..., c-2-1 c-0-0's).
	type ports struct{ port, bus int }
	var was []ports
	for _, m := range lc.members {
		procs[m.Name].Stop()
		was = append(was, ports{procs[m.Name].Port, procs[m.Name].Bus})
	}
	for i := range lc.members {
		m := &lc.members[i]
		p := procs[m.Name]
		next := was[(i+1)%len(was)]
		p.Port, p.Bus = next.port, next.bus
		p.Start("127.0.0.1")
		connect(m, p)
	}
	primaryOf := func(m Member) Member { return lc.members[m.Shard*2] }
	phases := lc.converge(ctx, spec)
	t.Logf("the passes' phases: %v", phases)
	// A replica pointed at its primary resyncs: poll until every link is up.
	deadline := time.Now().Add(30 * time.Second)
	for {
		down := ""
		for _, m := range lc.members {
			r, err := member.ObserveWith(ctx, lc.clients[m.Name])
			if err != nil {
				t.Fatal(err)
			}
			if r.Role != member.Primary && (net.JoinHostPort(r.PrimaryHost, fmt.Sprint(r.PrimaryPort)) != primaryOf(m).Addr || !r.LinkUp) {
				down = fmt.Sprintf("%s: replication to %s:%d, link up %v", m.Name, r.PrimaryHost, r.PrimaryPort, r.LinkUp)
			}
		}
		if down == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after the passes found the cluster whole, %s; want every replica linked to its primary where it is", down)
		}
		time.Sleep(100 * time.Millisecond) // polling the replicas' links, with the deadline above
	}
}

// TestReplicaFollowingAnOldAddressIsPointedAgain: a replica whose table has its primary where it
// is while its replication still connects to where the primary was, the state a resume left
// three replicas in on the real nodes (not ready for minutes). Made here the way the engine gets
// there: the replica restarts at a new address with a nodes.conf that has its primary failed at an
// address nobody has (its replication target at start), so it takes the primary's address from
// the others' gossip, which moves no replication, and the primary's PING that follows finds the
// address already right. The pass points it again (CLUSTER REPLICATE of the same primary), and
// the replica links to its primary.
func TestReplicaFollowingAnOldAddressIsPointedAgain(t *testing.T) {
	ctx := context.Background()
	const pw = "stale-link-pw"
	lc, procs, connect := restartable(t, pw)
	spec := shards.Spec{Shards: 3, PerShard: 2}
	lc.converge(ctx, spec)
	views := lc.views(ctx)
	pID := views["c-1-0"].ID
	r := &lc.members[3] // c-1-1, c-1-0's replica
	proc := procs[r.Name]
	proc.Stop()
	ports := membertest.FreePorts(t, "127.0.0.1", 4)
	nowhere := fmt.Sprintf("127.0.0.1:%d@%d", ports[2], ports[3])
	conf := filepath.Join(proc.Dir(), "nodes.conf")
	text, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, line := range strings.Split(string(text), "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[0] == pID {
			f[1], f[2] = nowhere, f[2]+",fail"
			line = strings.Join(f, " ")
		}
		lines = append(lines, line)
	}
	if err := os.WriteFile(conf, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	proc.Port, proc.Bus = ports[0], ports[1]
	proc.Start("127.0.0.1")
	connect(r, proc)
	// A pass's meet phase: the first member meets the replica at its new address. Then gossip:
	// poll until the replica and its primary know each other where they are.
	if err := member.Meet(ctx, lc.clients["c-0-0"], r.Addr, r.BusPort); err != nil {
		t.Fatal(err)
	}
	p := lc.members[2]
	deadline := time.Now().Add(30 * time.Second)
	for {
		views = lc.views(ctx)
		rv, pv := views[r.Name], views[p.Name]
		if rv.Known[pID] == p.Addr && pv.Known[rv.ID] == r.Addr {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("within 30 s: %s knows %s at %q, %s knows %s at %q", r.Name, p.Name, rv.Known[pID], p.Name, r.Name, pv.Known[rv.ID])
		}
		time.Sleep(100 * time.Millisecond) // polling gossip, with the deadline above
	}
	repl, err := member.ObserveWith(ctx, lc.clients[r.Name])
	if err != nil {
		t.Fatal(err)
	}
	follows := net.JoinHostPort(repl.PrimaryHost, fmt.Sprint(repl.PrimaryPort))
	if follows == p.Addr {
		t.Fatalf("%s's replication follows %s where it is (%s) before any pass: the engine moved it this time, the state under test was not made", r.Name, p.Name, follows)
	}
	t.Logf("%s knows %s at %s; its replication connects to %s (link up %v)", r.Name, p.Name, p.Addr, follows, repl.LinkUp)
	phases := lc.converge(ctx, spec)
	if !slices.Contains(phases, string(shards.Replicate)) {
		t.Errorf("the passes' phases %v: no Replicate", phases)
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		repl, err := member.ObserveWith(ctx, lc.clients[r.Name])
		if err != nil {
			t.Fatal(err)
		}
		follows = net.JoinHostPort(repl.PrimaryHost, fmt.Sprint(repl.PrimaryPort))
		if follows == p.Addr && repl.LinkUp {
			t.Logf("after the passes (phases %v): %s linked to %s at %s", phases, r.Name, p.Name, follows)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after the passes: %s's replication connects to %s, link up %v; want %s, up", r.Name, follows, repl.LinkUp, p.Addr)
		}
		time.Sleep(100 * time.Millisecond) // polling the replica's link, with the deadline above
	}
}

// TestMasterWithKeysAndNoSlotsIsEmptied: a member that says master, serves no slot and holds keys
// (as a former primary the cluster gave its slots to a successor without making it a replica, seen
// after a node's stop) cannot be made a replica (CLUSTER REPLICATE refuses a master with keys).
// Made here on real servers: before the cluster forms, one second member gets 100 keys (DEBUG
// POPULATE). The passes empty it (Flush) once every slot is served, then attach it; it ends a
// linked replica holding what its primary holds.
func TestMasterWithKeysAndNoSlotsIsEmptied(t *testing.T) {
	ctx := context.Background()
	const pw = "stray-pw"
	lc, _, _ := restartable(t, pw, "enable-debug-command local")
	if err := lc.clients["c-1-1"].Do(ctx, "DEBUG", "POPULATE", 100, "stray", 10).Err(); err != nil {
		t.Fatal(err)
	}
	spec := shards.Spec{Shards: 3, PerShard: 2}
	kinds := map[shards.Kind]string{}
	deadline := time.Now().Add(time.Minute)
	for {
		res, err := lc.pass.Run(ctx, lc.members, spec)
		if err != nil {
			t.Fatalf("a pass: %v", err)
		}
		for _, s := range res.Steps {
			if s.Kind != shards.Wait {
				kinds[s.Kind] = s.Why
			}
		}
		if res.Whole {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not whole within a minute; the last steps: %v", res.Steps)
		}
		time.Sleep(100 * time.Millisecond) // polling gossip between passes, with the deadline above
	}
	t.Logf("the passes' Flush: %q", kinds[shards.Flush])
	if !strings.Contains(kinds[shards.Flush], "c-1-1 serves no slot and holds 100 keys") {
		t.Errorf("no Flush of c-1-1's 100 keys among the steps: %v", kinds)
	}
	lc.waitSyncedReplica(ctx, "c-1-1", "c-1-0", 30*time.Second)
}

// TestMasterFlagOverAReplicaIsRestarted: a replica holding its primary's keys whose cluster flags
// then say master (no slots) while its replication still follows the primary, the state a former
// primary was left in after a node's stop that swapped two members' addresses (it reached itself
// through a peer's entry and took its own PING, sent while a master, after the cluster had made
// it a replica). Made here with that message: a PONG in the replica's own name that says master.
// No command leaves the state (CLUSTER REPLICATE refuses a master with keys; FLUSHALL a replica,
// READONLY): the pass says Restart. Started again on its data directory (appendonly, as members
// are), it is a master of nothing with keys, which the passes empty (Flush) and attach; it ends
// a linked replica holding what its primary holds.
func TestMasterFlagOverAReplicaIsRestarted(t *testing.T) {
	ctx := context.Background()
	const pw = "restart-stuck-pw"
	lc, procs, connect := restartable(t, pw, "appendonly yes")
	spec := shards.Spec{Shards: 3, PerShard: 2}
	lc.converge(ctx, spec)
	var addrs []string
	for _, m := range lc.members {
		addrs = append(addrs, m.Addr)
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, Password: pw, Protocol: 2, DisableIdentity: true})
	defer cc.Close()
	for i := range 300 {
		if err := cc.Set(ctx, fmt.Sprintf("k%d", i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	r, p := &lc.members[3], lc.members[2] // c-1-1, c-1-0's replica
	lc.waitSyncedReplica(ctx, r.Name, p.Name, 30*time.Second)

	id := lc.views(ctx)[r.Name].ID
	membertest.ClaimMasterAsItself(t, net.JoinHostPort("127.0.0.1", fmt.Sprint(procs[r.Name].Bus)), id)
	var v member.ClusterView
	var repl member.Replication
	deadline := time.Now().Add(10 * time.Second)
	for {
		var err error
		if v, err = member.ObserveCluster(ctx, lc.clients[r.Name]); err != nil {
			t.Fatal(err)
		}
		if repl, err = member.ObserveWith(ctx, lc.clients[r.Name]); err != nil {
			t.Fatal(err)
		}
		if v.Primary && repl.Role == member.Replica {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s after its own PONG: cluster flags master %v, INFO role %s; the state under test was not made", r.Name, v.Primary, repl.Role)
		}
		time.Sleep(50 * time.Millisecond) // polling the member, with the deadline above
	}
	err := member.ReplicateNode(ctx, lc.clients[r.Name], lc.views(ctx)[p.Name].ID)
	t.Logf("%s: cluster flags master, %d slots, INFO %s of %s:%d holding %d keys; CLUSTER REPLICATE: %v", r.Name, len(v.Slots), repl.Role, repl.PrimaryHost, repl.PrimaryPort, repl.Keys, err)
	if err == nil {
		t.Fatalf("CLUSTER REPLICATE accepted in the state under test: it is not the campaign's")
	}
	res, err := lc.pass.Run(ctx, lc.members, spec)
	if err != nil {
		t.Fatal(err)
	}
	var restart []shards.Step
	for _, s := range res.Steps {
		if s.Kind == shards.Restart {
			restart = append(restart, s)
		}
	}
	if len(restart) != 1 || restart[0].Member != r.Name {
		t.Fatalf("the pass's steps %v; want one Restart of %s", res.Steps, r.Name)
	}
	t.Logf("the pass: %s (%s)", restart[0], restart[0].Why)

	// What the operator does: its pod is deleted and started again on its volume.
	procs[r.Name].Stop()
	procs[r.Name].Start("127.0.0.1")
	connect(r, procs[r.Name])
	phases := lc.converge(ctx, spec)
	t.Logf("the passes after the restart: %v", phases)
	if !slices.Contains(phases, string(shards.Flush)) || !slices.Contains(phases, string(shards.Replicate)) {
		t.Errorf("the passes' phases %v: want a Flush, then a Replicate", phases)
	}
	lc.waitSyncedReplica(ctx, r.Name, p.Name, 30*time.Second)
}

// waitSyncedReplica waits until member r is a replica in its replication (INFO) and its cluster
// flags, linked, holding as many keys as p.
func (lc *localCluster) waitSyncedReplica(ctx context.Context, r, p string, timeout time.Duration) {
	lc.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		rr, err := member.ObserveWith(ctx, lc.clients[r])
		if err != nil {
			lc.t.Fatal(err)
		}
		pr, err := member.ObserveWith(ctx, lc.clients[p])
		if err != nil {
			lc.t.Fatal(err)
		}
		v, err := member.ObserveCluster(ctx, lc.clients[r])
		if err != nil {
			lc.t.Fatal(err)
		}
		if rr.Role == member.Replica && !v.Primary && rr.LinkUp && rr.Keys == pr.Keys {
			return
		}
		if time.Now().After(deadline) {
			lc.t.Fatalf("%s: INFO %s, cluster flags master %v, link up %v, %d keys (%s %d); want a linked replica holding its primary's keys",
				r, rr.Role, v.Primary, rr.LinkUp, rr.Keys, p, pr.Keys)
		}
		time.Sleep(100 * time.Millisecond) // polling the replica's sync, with the deadline above
	}
}
