package member

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A guarded pool sends no command that changes a member while its guard refuses, on real
// servers: reads go through, role changes, settings, pauses and client kills fail with the
// guard's error and change nothing; once the guard allows, they work.
func TestGuardedPoolRefusesChangesOnRealServers(t *testing.T) {
	ctx := context.Background()
	const pw = "test-password-4711"
	primary := server(t, pw, "")
	replica := server(t, pw, "")
	host, port, _ := net.SplitHostPort(primary)
	portN, _ := strconv.Atoi(port)
	var leading atomic.Bool
	errStale := errors.New("the lease is not current")
	pool := NewGuardedPool(func() error {
		if leading.Load() {
			return nil
		}
		return errStale
	}, "cache-operator/test")
	defer pool.Close()
	c := pool.Client(replica, pw)

	if _, err := ObserveWith(ctx, c); err != nil {
		t.Fatalf("a read while the guard refuses: %v", err)
	}
	if _, err := Settings(ctx, c, []string{"maxmemory"}); err != nil {
		t.Fatalf("CONFIG GET while the guard refuses: %v", err)
	}
	refused := map[string]error{
		"REPLICAOF":    Follow(ctx, c, host, portN),
		"CONFIG SET":   ApplySettings(ctx, c, []string{"maxmemory"}, map[string]string{"maxmemory": "12345678"}),
		"CLIENT PAUSE": PauseWrites(ctx, c, time.Second),
		"CLIENT KILL": func() error {
			_, err := DisconnectClients(ctx, c)
			return err
		}(),
		"FAILOVER":       forceFailover(ctx, c, host, portN),
		"CLIENT UNPAUSE": Unpause(ctx, c),
		"handover": func() error {
			_, err := Handover(ctx, c, c, host, portN, time.Second, time.Second, false)
			return err
		}(),
	}
	for name, err := range refused {
		if !errors.Is(err, errStale) {
			t.Errorf("%s while the guard refuses: %v; want the guard's error", name, err)
		}
	}
	r, err := ObserveWith(ctx, c)
	if err != nil || r.Role != Primary {
		t.Fatalf("after the refused REPLICAOF the server is %+v (%v); want it still a primary", r, err)
	}
	if got, _ := Settings(ctx, c, []string{"maxmemory"}); got["maxmemory"] == "12345678" {
		t.Errorf("the refused CONFIG SET reached the server")
	}

	if list, err := c.ClientList(ctx).Result(); err != nil || !strings.Contains(list, "name=cache-operator/test") {
		t.Errorf("CLIENT LIST does not name the pool's connection (%v): %s", err, list)
	}
	leading.Store(true)
	if err := Follow(ctx, c, host, portN); err != nil {
		t.Fatalf("REPLICAOF once the guard allows: %v", err)
	}
	if r, err := ObserveWith(ctx, c); err != nil || r.Role != Replica {
		t.Errorf("after REPLICAOF the server is %+v (%v); want a replica", r, err)
	}
}

// What the discarded-writes count reads is what real servers report: a replica promoted while the
// old primary takes writes on its own records the fork (master_replid2, second_repl_offset), and
// the old primary's offset past it is the stream it took alone.
func TestForkRecordedOnRealServers(t *testing.T) {
	ctx := context.Background()
	const pw = "test-password-4711"
	oldAddr := server(t, pw, "")
	host, port, _ := net.SplitHostPort(oldAddr)
	newAddr := server(t, pw, fmt.Sprintf("replicaof %s %s", host, port))
	pool := NewPool()
	defer pool.Close()
	old, promoted := pool.Client(oldAddr, pw), pool.Client(newAddr, pw)
	for i := 0; i < 100; i++ {
		if err := old.Set(ctx, fmt.Sprintf("k%d", i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		o, _ := ObserveWith(ctx, old)
		n, _ := ObserveWith(ctx, promoted)
		if n.LinkUp && n.Offset == o.Offset {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica did not catch up: %+v vs %+v", n, o)
		}
		time.Sleep(50 * time.Millisecond) // polling the sync, with a deadline
	}
	before, _ := ObserveWith(ctx, old)
	if err := Promote(ctx, promoted); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ { // the old primary, cut off in real life, takes writes alone
		if err := old.Set(ctx, fmt.Sprintf("alone%d", i), "xxxxxxxxxx", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	after, _ := ObserveWith(ctx, old)
	p, err := ObserveWith(ctx, promoted)
	if err != nil || p.ReplID2 != before.ReplID || p.SecondOffset != before.Offset+1 {
		t.Fatalf("promoted: %+v (%v); want replid2 %s and second offset %d", p, err, before.ReplID, before.Offset+1)
	}
	if after.ReplID != before.ReplID || after.Offset <= before.Offset {
		t.Fatalf("the old primary: %+v; want its history %s past offset %d", after, before.ReplID, before.Offset)
	}
	t.Logf("fork at %d; the old primary took %d bytes alone (50 SETs)", before.Offset, after.Offset-before.Offset)
}
