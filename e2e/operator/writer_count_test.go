package operator

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"example.com/cache-operator/engine/member/membertest"
)

// The writer's loss count on a key space: a key set back to an older write's number, or
// deleted, loses every acknowledged write to it after that number, and nothing else.
func TestWriterCountsLossesOnAKeySpace(t *testing.T) {
	const pw = "writer-test-password"
	addr := membertest.Server(t, pw, "")
	w := startWriterKeys(t, addr, pw, "k:", false, 10, 45, 30*time.Second)
	<-w.done
	if len(w.acked) != 45 {
		t.Fatalf("%d of 45 writes acknowledged by a local server", len(w.acked))
	}
	if lost := w.lost(t, addr, pw); len(lost) != 0 {
		t.Fatalf("lost %v before any change", lost)
	}
	cl := newClient(addr, pw)
	defer cl.Close()
	ctx := context.Background()
	// Key 3 held write 43 (writes 3, 13, 23, 33, 43): back to 13 loses 23, 33 and 43. Key 7 held
	// write 37: deleted, it loses 7, 17, 27 and 37.
	if err := cl.Set(ctx, "k:3", 13, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := cl.Del(ctx, "k:7").Err(); err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(w.lost(t, addr, pw))
	if want := "[7 17 23 27 33 37 43]"; got != want {
		t.Errorf("lost %s; want %s", got, want)
	}
}

// isFenced, which assertOnePrimary uses: a master with no replica is held by
// min-replicas-to-write 1 (and a write is refused), not with 0.
func TestIsFencedOnALocalServer(t *testing.T) {
	const pw = "fence-test-password"
	addr := membertest.Server(t, pw, "")
	cl := newClient(addr, pw)
	defer cl.Close()
	ctx := context.Background()
	if isFenced(cl) {
		t.Error("fenced with min-replicas-to-write 0")
	}
	if err := cl.ConfigSet(ctx, "min-replicas-to-write", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if !isFenced(cl) {
		t.Error("not fenced with min-replicas-to-write 1 and no replica")
	}
	if err := cl.Set(ctx, "k", 1, 0).Err(); err == nil || !strings.Contains(err.Error(), "NOREPLICAS") {
		t.Errorf("a write to the fenced master: %v; want NOREPLICAS", err)
	}
}

// TestLongestStallCountsHeldAndFailedWrites: a stall runs from the last acknowledgement to the
// next, whether the writes between failed or were held; one that ends before t0 is not counted.
func TestLongestStallCountsHeldAndFailedWrites(t *testing.T) {
	base := time.Now()
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	w := &writer{events: []writeEvent{
		{at: at(0), ok: true}, {at: at(900), ok: true}, // held 0.9 s, before t0
		{at: at(1000), ok: true}, {at: at(1400), ok: false}, {at: at(1600), ok: true}, // 0.6 s across t0
		{at: at(1700), ok: true}, {at: at(2000), ok: true}, // held 0.3 s
		{at: at(2100), ok: false}, {at: at(2800), ok: false}, // failing at the end: 0.8 s so far
	}}
	for _, tc := range []struct {
		t0   time.Time
		want time.Duration
	}{
		{at(1100), 800 * time.Millisecond},
		{at(0), 900 * time.Millisecond},
		{at(1900), 800 * time.Millisecond},
	} {
		if got := w.longestStall(tc.t0); got != tc.want {
			t.Errorf("longestStall(+%v) = %v; want %v", tc.t0.Sub(base), got, tc.want)
		}
	}
	w.events = w.events[:7]
	if got := w.longestStall(at(1650)); got != 300*time.Millisecond {
		t.Errorf("after the last failure was cut: %v; want 300ms", got)
	}
}
