package member

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"example.com/cache-operator/engine/member/membertest"
)

// server runs a redis-server on 127.0.0.1 until the test ends (membertest.Server).
func server(t testing.TB, password, extra string) string {
	t.Helper()
	return membertest.Server(t, password, extra)
}

func TestObserveRealServers(t *testing.T) {
	ctx := context.Background()
	const pw = "test-password-4711"
	primary := server(t, pw, "")
	host, port, _ := net.SplitHostPort(primary)
	replica := server(t, pw, fmt.Sprintf("replicaof %s %s", host, port))

	var r Replication
	deadline := time.Now().Add(20 * time.Second)
	for {
		var err error
		if r, err = Observe(ctx, replica, pw); err != nil {
			t.Fatal(err)
		}
		if r.LinkUp || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // polling the sync, with a deadline
	}
	if r.Role != Replica || !r.LinkUp || r.PrimaryHost != host {
		t.Errorf("replica: %+v; want a replica of %s with its link up", r, host)
	}
	p, err := Observe(ctx, primary, pw)
	if err != nil || p.Role != Primary || p.Replicas != 1 {
		t.Errorf("primary: %+v %v; want a primary with one replica", p, err)
	}
	if p.Offset < r.Offset {
		t.Errorf("primary offset %d below the replica's %d", p.Offset, r.Offset)
	}

	_, err = Observe(ctx, primary, "wrong-password")
	if err == nil || strings.Contains(err.Error(), "wrong-password") || strings.Contains(err.Error(), pw) {
		t.Errorf("wrong password: %v; want an error that names no password", err)
	}
	// Nothing listens: the call ends within its bound.
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := l.Addr().String()
	l.Close()
	start := time.Now()
	if _, err := Observe(ctx, closed, pw); err == nil {
		t.Error("no server: no error")
	}
	if took := time.Since(start); took > 3*Timeout {
		t.Errorf("a call to a closed port took %v; want at most %v", took, 3*Timeout)
	}
}

func TestParseReplication(t *testing.T) {
	r, err := ParseReplication("# Replication\r\nrole:slave\r\nmaster_host:c-0.c.ns.svc.cluster.local\r\nmaster_link_status:down\r\nmaster_sync_in_progress:0\r\nslave_repl_offset:42\r\n")
	if err != nil || r.Role != Replica || r.LinkUp || r.Offset != 42 || r.PrimaryHost != "c-0.c.ns.svc.cluster.local" {
		t.Errorf("%+v %v", r, err)
	}
	if r.AOFOff || r.AOFRewriting || r.Loading {
		t.Errorf("no persistence section, yet %+v", r)
	}
	// A restored member: loaded, its AOF off; then turned on and rewriting.
	r, _ = ParseReplication("role:master\r\n# Persistence\r\nloading:0\r\naof_enabled:0\r\naof_rewrite_in_progress:0\r\naof_rewrite_scheduled:0\r\n")
	if !r.AOFOff || r.AOFRewriting || r.Loading {
		t.Errorf("AOF off: %+v", r)
	}
	r, _ = ParseReplication("role:master\r\nloading:0\r\naof_enabled:1\r\naof_rewrite_in_progress:1\r\naof_rewrite_scheduled:0\r\n")
	if r.AOFOff || !r.AOFRewriting {
		t.Errorf("AOF rewriting: %+v", r)
	}
	if _, err := ParseReplication("role:sentinel\r\n"); err == nil {
		t.Error("an unknown role parsed")
	}
}

// TestRoleChangesOnRealServers hands a primary over to its replica with FAILOVER, then promotes
// and repoints by hand, reading the keys on every member.
func TestRoleChangesOnRealServers(t *testing.T) {
	ctx := context.Background()
	const pw = "test-password-0815"
	a := server(t, pw, "")
	aHost, aPortS, _ := net.SplitHostPort(a)
	b := server(t, pw, fmt.Sprintf("replicaof %s %s", aHost, aPortS))
	bHost, bPortS, _ := net.SplitHostPort(b)
	var bPort int
	fmt.Sscan(bPortS, &bPort)
	pool := NewPool()
	defer pool.Close()
	ca, cb := pool.Client(a, pw), pool.Client(b, pw)
	for i := 0; i < 10; i++ {
		if err := ca.Set(ctx, fmt.Sprintf("k%d", i), "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	waitFor := func(what string, c func() (bool, string)) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			ok, seen := c()
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: last seen %s", what, seen)
			}
			time.Sleep(50 * time.Millisecond) // polling the servers, with a deadline
		}
	}
	waitFor("the replica has the 10 keys and the primary counts it online", func() (bool, string) {
		r, err := ObserveWith(ctx, cb)
		p, errP := ObserveWith(ctx, ca)
		// FAILOVER needs the primary to see the replica online, which can come a moment after
		// the replica reports its link up.
		info, errI := ca.Info(ctx, "replication").Result()
		return err == nil && errP == nil && errI == nil && r.LinkUp && r.Keys == 10 && p.Replicas == 1 && strings.Contains(info, "state=online"),
			fmt.Sprintf("%+v %v; primary %+v %v", r, err, p, errP)
	})

	if _, err := Handover(ctx, ca, cb, bHost, bPort, 5*time.Second, 10*time.Second, false); err != nil {
		t.Fatal(err)
	}
	if err := Unpause(ctx, ca); err != nil {
		t.Fatal(err)
	}
	waitFor("b primary and a its replica after the handover", func() (bool, string) {
		rb, errB := ObserveWith(ctx, cb)
		ra, errA := ObserveWith(ctx, ca)
		return errA == nil && errB == nil && rb.Role == Primary && ra.Role == Replica && ra.PrimaryPort == bPort,
			fmt.Sprintf("a %+v %v; b %+v %v", ra, errA, rb, errB)
	})
	if err := cb.Set(ctx, "after", "v", 0).Err(); err != nil {
		t.Fatalf("writing to the new primary: %v", err)
	}
	if err := ca.Set(ctx, "stale", "v", 0).Err(); err == nil || !strings.Contains(err.Error(), "READONLY") {
		t.Fatalf("writing to the old primary: %v; want READONLY", err)
	}
	if err := AbortFailover(ctx, ca); err != nil {
		t.Errorf("abort with none in progress: %v", err)
	}

	// By hand: a is promoted, b follows it.
	if err := Promote(ctx, ca); err != nil {
		t.Fatal(err)
	}
	var aPort int
	fmt.Sscan(aPortS, &aPort)
	if err := Follow(ctx, cb, aHost, aPort); err != nil {
		t.Fatal(err)
	}
	waitFor("b follows a with 11 keys", func() (bool, string) {
		r, err := ObserveWith(ctx, cb)
		return err == nil && r.Role == Replica && r.LinkUp && r.Keys == 11, fmt.Sprintf("%+v %v", r, err)
	})
	// A paused primary holds writes until the pause ends.
	if err := PauseWrites(ctx, ca, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := ca.Set(ctx, "paused", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 200*time.Millisecond {
		t.Errorf("a write during CLIENT PAUSE WRITE returned after %v; want it held", took)
	}
	if pool.Len() != 2 {
		t.Errorf("pool holds %d clients; want 2", pool.Len())
	}
	pool.Retain(func(addr string) bool { return addr == a })
	if pool.Len() != 1 {
		t.Errorf("after Retain the pool holds %d clients; want 1", pool.Len())
	}
}

func TestParseKeys(t *testing.T) {
	if n := ParseKeys("# Keyspace\r\ndb0:keys=3,expires=0,avg_ttl=0\r\ndb5:keys=4,expires=1,avg_ttl=9\r\n"); n != 7 {
		t.Errorf("keys %d; want 7", n)
	}
	if n := ParseKeys("# Keyspace\r\n"); n != 0 {
		t.Errorf("keys %d; want 0", n)
	}
}

// BenchmarkObserve is the cost of one poll of a member (one INFO over a pooled connection to a
// real redis-server on 127.0.0.1), the unit of the operator's polling cost: a cache of size n
// costs n polls per --member-poll. "three sections" is the poll before the per-member metrics
// (replication, keyspace, persistence), for the ratio of what memory, stats and clients add.
func BenchmarkObserve(b *testing.B) {
	const pw = "bench-password-1"
	addr := server(b, pw, "")
	p := NewPool()
	defer p.Close()
	c := p.Client(addr, pw)
	ctx := context.Background()
	b.Run("every section", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ObserveWith(ctx, c); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("three sections", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			info, err := c.Info(ctx, "replication", "keyspace", "persistence").Result()
			if err != nil {
				b.Fatal(err)
			}
			if _, err := ParseReplication(info); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestPoolMemoryPerMember measures the heap one pooled, connected member client holds, for the
// cost of the pool at 1,000 caches (3,000 members).
func TestPoolMemoryPerMember(t *testing.T) {
	const pw = "mem-password-1"
	addr := server(t, pw, "maxclients 2000")
	ctx := context.Background()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const n = 500
	clients := make([]*redis.Client, n)
	for i := range clients {
		// One pool per client, so that each holds its own connection, as distinct members do.
		clients[i] = NewPool().Client(addr, pw)
		if _, err := ObserveWith(ctx, clients[i]); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapInuse-before.HeapInuse) / n
	t.Logf("one connected member client holds %.1f KiB of heap; 3,000 members (1,000 caches of 3) %.1f MiB", per/1024, per*3000/(1<<20))
	if per > 256<<10 {
		t.Errorf("%.0f bytes per member client; want well under 256 KiB", per)
	}
	for _, c := range clients {
		c.Close()
	}
}

// Live settings on a real server: read, applied, read back; a bad value is an error that names the
// setting; a malformed settings text is refused.
func TestSettingsOnARealServer(t *testing.T) {
	ctx := context.Background()
	const pw = "test-password-4711"
	addr := server(t, pw, "maxmemory-policy noeviction")
	p := NewPool()
	defer p.Close()
	c := p.Client(addr, pw)
	settings, names, err := ParseSettings("# live\nmaxmemory 67108864\nmaxmemory-policy allkeys-lru\n")
	if err != nil {
		t.Fatal(err)
	}
	got, err := Settings(ctx, c, names)
	if err != nil || got["maxmemory-policy"] != "noeviction" || got["maxmemory"] != "0" {
		t.Fatalf("settings before: %v %v; want noeviction and 0", got, err)
	}
	if err := ApplySettings(ctx, c, names, settings); err != nil {
		t.Fatal(err)
	}
	if got, err = Settings(ctx, c, names); err != nil || got["maxmemory-policy"] != "allkeys-lru" || got["maxmemory"] != "67108864" {
		t.Errorf("settings after: %v %v; want allkeys-lru and 67108864", got, err)
	}
	err = ApplySettings(ctx, c, []string{"maxmemory-policy"}, map[string]string{"maxmemory-policy": "sometimes"})
	if err == nil || !strings.Contains(err.Error(), "CONFIG SET maxmemory-policy") {
		t.Errorf("a bad value: %v; want an error naming the setting", err)
	}
	for _, bad := range []string{"maxmemory\n", "maxmemory 1\nmaxmemory 2\n"} {
		if _, _, err := ParseSettings(bad); err == nil {
			t.Errorf("ParseSettings(%q): no error", bad)
		}
	}
}

// A server started with its AOF off (a restored snapshot) reports it, and EnableAOF turns it on:
// the rewrite that writes the AOF's base runs, then ends.
func TestEnableAOFOnRealServer(t *testing.T) {
	ctx := context.Background()
	const pw = "test-password-2024"
	addr := server(t, pw, "")
	r, err := Observe(ctx, addr, pw)
	if err != nil || !r.AOFOff || r.Loading {
		t.Fatalf("%+v %v; want the AOF off and nothing loading", r, err)
	}
	p := NewPool()
	defer p.Close()
	if err := EnableAOF(ctx, p.Client(addr, pw)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if r, err = Observe(ctx, addr, pw); err != nil {
			t.Fatal(err)
		}
		if (!r.AOFOff && !r.AOFRewriting) || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // polling the rewrite, with a deadline
	}
	if r.AOFOff || r.AOFRewriting {
		t.Errorf("after EnableAOF and 20 s: %+v; want the AOF on and written", r)
	}
}

// The figures the operator exports per member come from the same INFO as the replication state.
func TestObserveStatsOnARealServer(t *testing.T) {
	ctx := context.Background()
	const pw = "test-password-4712"
	addr := server(t, pw, "maxmemory 2mb\nmaxmemory-policy allkeys-lru")
	c := redis.NewClient(&redis.Options{Addr: addr, Password: pw, Protocol: 2, DisableIdentity: true})
	defer c.Close()
	// The short-lived key first, while the cache has room: set in a full cache, it could be
	// evicted before it expires (it was, once: 3,272 evicted and 729 kept of 4,001).
	if err := c.Set(ctx, "short", "x", time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	var r Replication
	deadline := time.Now().Add(10 * time.Second)
	for {
		var err error
		// Reading the expired key makes the server count it, whenever its own cycle has not.
		_ = c.Get(ctx, "short").Err()
		if r, err = Observe(ctx, addr, pw); err != nil {
			t.Fatal(err)
		}
		if r.Stats.ExpiredKeys >= 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // polling the expiry, with a deadline
	}
	value := strings.Repeat("v", 1024)
	p := c.Pipeline()
	for i := range 4000 { // 4 MiB into a 2 MiB cache: about half is evicted
		p.Set(ctx, fmt.Sprintf("k%d", i), value, 0)
	}
	if _, err := p.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := Observe(ctx, addr, pw)
	if err != nil {
		t.Fatal(err)
	}
	s := r.Stats
	t.Logf("stats: %+v, keys %d", s, r.Keys)
	if s.MaxMemory != 2<<20 {
		t.Errorf("maxmemory %d; want %d", s.MaxMemory, 2<<20)
	}
	if s.UsedMemory <= 0 || s.UsedMemory > 3<<20 {
		t.Errorf("used memory %d; want some, at most about maxmemory", s.UsedMemory)
	}
	if s.EvictedKeys == 0 || s.EvictedKeys+r.Keys > 4000 {
		t.Errorf("evicted %d with %d keys left of 4,000; want evictions that account for the missing keys", s.EvictedKeys, r.Keys)
	}
	if s.ExpiredKeys < 1 {
		t.Errorf("expired %d; want the short-lived key counted", s.ExpiredKeys)
	}
	if s.Clients < 2 { // this test's client and Observe's own
		t.Errorf("connected clients %d; want at least 2", s.Clients)
	}
}
