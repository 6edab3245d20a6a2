package member

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// hostPort splits a local server's address.
func hostPort(t *testing.T, addr string) (string, int) {
	t.Helper()
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return h, port
}

// eventually polls cond every 20 ms until it holds, for at most 20 s.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok, seen := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: last seen %s", what, seen)
		}
		time.Sleep(20 * time.Millisecond) // polling the servers, with a deadline
	}
}

// pair is a primary a and its replica b (which takes DEBUG), on this machine.
type pair struct {
	a, b   string
	ca, cb *redis.Client
	bHost  string
	bPort  int
}

// replicaPair starts a primary and a replica of it, and returns once the primary counts the
// replica online.
func replicaPair(t *testing.T, pw string) pair {
	t.Helper()
	a := server(t, pw, "")
	aHost, aPort := hostPort(t, a)
	b := server(t, pw, fmt.Sprintf("replicaof %s %d\nenable-debug-command yes", aHost, aPort))
	bHost, bPort := hostPort(t, b)
	pool := NewPool()
	t.Cleanup(pool.Close)
	p := pair{a: a, b: b, ca: pool.Client(a, pw), cb: pool.Client(b, pw), bHost: bHost, bPort: bPort}
	eventually(t, "b online at a", func() (bool, string) {
		info, err := p.ca.Info(context.Background(), "replication").Result()
		return err == nil && strings.Contains(info, "state=online"), fmt.Sprint(info, err)
	})
	return p
}

// ackWriter writes w:0, w:1, ... to addr on one connection until a write fails, stop is closed, or
// its bounds are reached, and records each acknowledged write.
type ackWriter struct {
	mu    sync.Mutex
	acked []int
	err   error
	stop  chan struct{}
	done  chan struct{}
}

func startAckWriter(addr, pw string) *ackWriter {
	w := &ackWriter{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		cl := redis.NewClient(&redis.Options{Addr: addr, Password: pw, MaxRetries: -1, Protocol: 2, DisableIdentity: true,
			ReadTimeout: 5 * time.Second})
		defer cl.Close()
		deadline := time.Now().Add(20 * time.Second)
		for n := 0; n < 200000 && time.Now().Before(deadline); n++ {
			select {
			case <-w.stop:
				return
			default:
			}
			err := cl.Set(context.Background(), "w:"+strconv.Itoa(n), n, 0).Err()
			w.mu.Lock()
			if err != nil {
				w.err = err
				w.mu.Unlock()
				return
			}
			w.acked = append(w.acked, n)
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *ackWriter) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

// missing returns the acknowledged writes that addr does not hold.
func (w *ackWriter) missing(t *testing.T, c *redis.Client) []int {
	t.Helper()
	w.mu.Lock()
	acked := append([]int(nil), w.acked...)
	w.mu.Unlock()
	var out []int
	for i := 0; i < len(acked); i += 1000 {
		batch := acked[i:min(i+1000, len(acked))]
		keys := make([]string, len(batch))
		for j, n := range batch {
			keys[j] = "w:" + strconv.Itoa(n)
		}
		vals, err := c.MGet(context.Background(), keys...).Result()
		if err != nil {
			t.Fatal(err)
		}
		for j, v := range vals {
			if v != strconv.Itoa(batch[j]) {
				out = append(out, batch[j])
			}
		}
	}
	return out
}

// TestHandoverOnRealServers hands the primary role to a replica that is behind (it sleeps while
// the primary takes writes) while a writer writes
// to the primary on one connection: the handover waits for the replica, holds the writer's last
// write meanwhile, and every acknowledged write is on the new primary. The held write fails
// READONLY once the old primary, now a replica, is unpaused.
func TestHandoverOnRealServers(t *testing.T) {
	ctx := context.Background()
	const pw = "test-password-0815"
	p := replicaPair(t, pw)
	a, b, ca, cb, bHost, bPort := p.a, p.b, p.ca, p.cb, p.bHost, p.bPort
	w := startAckWriter(a, pw)
	defer func() { close(w.stop); <-w.done }()
	eventually(t, "the writer's first 500 writes", func() (bool, string) { return w.count() >= 500, fmt.Sprint(w.count(), " ", w.err) })

	// b falls behind: it sleeps (DEBUG SLEEP) while a takes writes, which wait in b's socket.
	sleeper := redis.NewClient(&redis.Options{Addr: b, Password: pw, MaxRetries: -1, Protocol: 2, DisableIdentity: true, ReadTimeout: 5 * time.Second})
	defer sleeper.Close()
	slept := make(chan error, 1)
	go func() { slept <- sleeper.Do(ctx, "DEBUG", "SLEEP", "0.8").Err() }()
	probe := redis.NewClient(&redis.Options{Addr: b, Password: pw, MaxRetries: -1, Protocol: 2, DisableIdentity: true, ReadTimeout: 50 * time.Millisecond})
	defer probe.Close()
	eventually(t, "b to sleep (no PONG within 50 ms)", func() (bool, string) {
		err := probe.Ping(ctx).Err()
		return err != nil, fmt.Sprint(err)
	})
	cut := w.count()
	eventually(t, "100 writes that b has not had", func() (bool, string) { return w.count() >= cut+100, fmt.Sprint(w.count()-cut, " ", w.err) })
	before := w.count()
	times, err := Handover(ctx, ca, cb, bHost, bPort, 3*time.Second, 6*time.Second, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-slept; err != nil {
		t.Fatalf("DEBUG SLEEP: %v", err)
	}
	t.Logf("handover to a replica that was asleep: caught up after %v, promoted after %v; %d writes acknowledged during the catch-up",
		times.CaughtUp, times.Promoted, w.count()-before)
	assertHandedOver(t, w, ca, cb, bPort)
	t.Logf("all %d acknowledged writes on the new primary", w.count())
	if err := cb.Set(ctx, "after", "v", 0).Err(); err != nil {
		t.Fatalf("writing to the new primary: %v", err)
	}
}

// TestHandoverRefusedResumesThePrimary: a target that does not follow the primary is refused,
// and the primary is a primary again that takes writes at once.
func TestHandoverRefusedResumesThePrimary(t *testing.T) {
	ctx := context.Background()
	const pw = "test-password-0815"
	a, other := server(t, pw, ""), server(t, pw, "")
	oHost, oPort := hostPort(t, other)
	pool := NewPool()
	defer pool.Close()
	ca, co := pool.Client(a, pw), pool.Client(other, pw)
	if _, err := Handover(ctx, ca, co, oHost, oPort, 200*time.Millisecond, 10*time.Second, false); err == nil {
		t.Fatal("a handover to a member that follows nobody succeeded")
	} else {
		t.Logf("refused: %v", err)
	}
	r, err := ObserveWith(ctx, ca)
	if err != nil || r.Role != Primary {
		t.Fatalf("a after the refused handover: %+v %v", r, err)
	}
	// Held writes would wait out the 10 s pause; a bounded write shows the pause is gone.
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := ca.Set(wctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("writing to a after the refused handover: %v", err)
	}
}

// TestHandoverRefusedWhenThePauseRunsShort: a pause that could end before FAILOVER's own begins
// is not used: the handover is refused after the catch-up, and the primary stays the primary.
func TestHandoverRefusedWhenThePauseRunsShort(t *testing.T) {
	ctx := context.Background()
	const pw = "test-password-0815"
	p := replicaPair(t, pw)
	ca, cb, bHost, bPort := p.ca, p.cb, p.bHost, p.bPort
	_, err := Handover(ctx, ca, cb, bHost, bPort, 3*time.Second, 2*Timeout, false)
	if err == nil || !strings.Contains(err.Error(), "could lose writes") {
		t.Fatalf("a handover with a %v pause: %v; want it refused", 2*Timeout, err)
	}
	ra, errA := ObserveWith(ctx, ca)
	rb, errB := ObserveWith(ctx, cb)
	if errA != nil || errB != nil || ra.Role != Primary || rb.Role != Replica {
		t.Fatalf("after the refused handover a is %+v (%v), b %+v (%v); want them as they were", ra, errA, rb, errB)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := ca.Set(wctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("writing to a after the refused handover: %v", err)
	}
}

// TestHandoverByPromotion: the handover of a roll that turns TLS on or off (the old primary could
// not reach the target as a replica): the target promotes itself while the primary holds its
// writes, the primary follows it, and every acknowledged write is on the new primary.
func TestHandoverByPromotion(t *testing.T) {
	ctx := context.Background()
	const pw = "handover-promote"
	p := replicaPair(t, pw)
	ca, cb, bHost, bPort := p.ca, p.cb, p.bHost, p.bPort
	w := startAckWriter(p.a, pw)
	defer func() { close(w.stop); <-w.done }()
	eventually(t, "the writer's first 500 writes", func() (bool, string) { return w.count() >= 500, fmt.Sprint(w.count(), " ", w.err) })
	times, err := Handover(ctx, ca, cb, bHost, bPort, 3*time.Second, 6*time.Second, true)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := ObserveWith(ctx, cb)
	if err != nil || rb.Role != Primary {
		t.Fatalf("target after the handover: %+v %v; want the primary", rb, err)
	}
	assertHandedOver(t, w, ca, cb, bPort)
	t.Logf("handover by promotion: caught up after %v, promoted after %v; all %d acknowledged writes on the new primary", times.CaughtUp, times.Promoted, w.count())
}

// assertHandedOver checks the end of a handover from ca to cb (at port bPort): the old primary is
// a replica of cb; once unpaused, the writer's held write fails READONLY; every write it had
// acknowledged is on cb.
func assertHandedOver(t *testing.T, w *ackWriter, ca, cb *redis.Client, bPort int) {
	t.Helper()
	ctx := context.Background()
	ra, err := ObserveWith(ctx, ca)
	if err != nil || ra.Role != Replica || ra.PrimaryPort != bPort {
		t.Fatalf("old primary after the handover: %+v %v; want a replica of b", ra, err)
	}
	if err := Unpause(ctx, ca); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the writer's held write to fail READONLY", func() (bool, string) {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.err != nil && strings.Contains(w.err.Error(), "READONLY"), fmt.Sprint(w.err)
	})
	if lost := w.missing(t, cb); len(lost) > 0 {
		t.Fatalf("%d of %d acknowledged writes missing on the new primary, e.g. %v", len(lost), w.count(), lost[:min(5, len(lost))])
	}
}
