package operator

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"example.com/cache-operator/e2e/framework"
)

// writer writes SET <prefix><n> <n> through addr as fast as one connection allows, bounded in
// count and time, and records every outcome. It keeps its connection while the connection lives
// (go-redis dials anew only once it breaks), or, with reconnect, dials anew after every failure.
// With a key space (keys > 0), write n goes to the key <prefix><n mod keys>, so that a long run
// keeps the data set's size bounded; each key's value only grows.
type writer struct {
	mu      sync.Mutex
	events  []writeEvent
	acked   map[int]time.Time
	stop    chan struct{}
	done    chan struct{}
	prefix  string
	keys    int
	next    int // the number of the next write
	current *redis.Client
}

type writeEvent struct {
	at   time.Time
	ok   bool
	err  string
	took time.Duration // from the write's start to its answer (the cluster writer's)
}

func startWriter(t *testing.T, addr, pw string, maxWrites int, maxTime time.Duration) *writer {
	return startWriterWith(t, addr, pw, "w:", false, maxWrites, maxTime)
}

func startWriterWith(t *testing.T, addr, pw, prefix string, reconnect bool, maxWrites int, maxTime time.Duration) *writer {
	return startWriterKeys(t, addr, pw, prefix, reconnect, 0, maxWrites, maxTime)
}

// startWriterKeys starts a writer on a key space of keys keys (0: a new key for every write).
func startWriterKeys(t *testing.T, addr, pw, prefix string, reconnect bool, keys, maxWrites int, maxTime time.Duration) *writer {
	return startWriterDial(t, func() *redis.Client { return newClient(addr, pw) }, prefix, reconnect, keys, maxWrites, maxTime)
}

// startWriterDial starts a writer whose clients dial (a TLS client, for instance).
func startWriterDial(t *testing.T, dial func() *redis.Client, prefix string, reconnect bool, keys, maxWrites int, maxTime time.Duration) *writer {
	w := &writer{acked: map[int]time.Time{}, stop: make(chan struct{}), done: make(chan struct{}), prefix: prefix, keys: keys}
	w.current = dial()
	go func() {
		defer close(w.done)
		defer func() { w.client().Close() }()
		deadline := time.Now().Add(maxTime)
		for n := 0; n < maxWrites && time.Now().Before(deadline); n++ {
			select {
			case <-w.stop:
				return
			default:
			}
			w.mu.Lock()
			w.next = n + 1
			w.mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			err := w.client().Set(ctx, w.key(n), n, 0).Err()
			cancel()
			now := time.Now()
			w.mu.Lock()
			ev := writeEvent{at: now, ok: err == nil}
			if err != nil {
				ev.err = err.Error()
				if reconnect {
					w.current.Close()
					w.current = dial()
				}
			} else {
				w.acked[n] = now
			}
			w.events = append(w.events, ev)
			w.mu.Unlock()
			if err != nil {
				time.Sleep(20 * time.Millisecond) // pacing retries of a failed write, not synchronisation
			} else {
				time.Sleep(2 * time.Millisecond) // a steady writer, not a flood
			}
		}
	}()
	t.Cleanup(w.halt)
	return w
}

// key is the key write n goes to.
func (w *writer) key(n int) string {
	if w.keys > 0 {
		n %= w.keys
	}
	return w.prefix + strconv.Itoa(n)
}

// written is the number of writes begun so far.
func (w *writer) written() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.next
}

// ackedCount is the number of writes acknowledged so far.
func (w *writer) ackedCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

func (w *writer) client() *redis.Client {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.current
}

// serverSideAddr is the address (ip:port) the server the writer is connected to sees it at
// (CLIENT INFO on the writer's own connection).
func (w *writer) serverSideAddr(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	info, err := w.client().Do(ctx, "CLIENT", "INFO").Text()
	if err != nil {
		t.Fatalf("CLIENT INFO on the writer's connection: %v", err)
	}
	for _, f := range strings.Fields(info) {
		if v, ok := strings.CutPrefix(f, "addr="); ok {
			return v
		}
	}
	t.Fatalf("CLIENT INFO without addr: %q", info)
	return ""
}

func (w *writer) halt() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// recoveredAfter returns how long after t0 writes succeeded again: the first success that follows
// a failure after t0 (0 if no write failed after t0), and whether one did succeed.
func (w *writer) recoveredAfter(t0 time.Time) (time.Duration, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	failed := false
	for _, e := range w.events {
		if e.at.Before(t0) {
			continue
		}
		if !e.ok {
			failed = true
			continue
		}
		if failed {
			return e.at.Sub(t0), true
		}
	}
	return 0, !failed
}

// longestStall is the longest span without an acknowledged write that ends after t0 (it may
// begin before, at the last acknowledgement before t0): failed writes and writes held by a paused
// primary count alike, as a client sees them. A writer whose last write failed is stalled until
// that write.
func (w *writer) longestStall(t0 time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var longest time.Duration
	var last time.Time
	for _, e := range w.events {
		if !e.ok {
			continue
		}
		if !e.at.Before(t0) && !last.IsZero() {
			longest = max(longest, e.at.Sub(last))
		}
		last = e.at
	}
	if n := len(w.events); n > 0 && !w.events[n-1].ok && !last.IsZero() {
		longest = max(longest, w.events[n-1].at.Sub(last))
	}
	return longest
}

// failedTime sums the spans in which writes failed: from a failure that follows a success until
// the next success.
func (w *writer) failedTime() (time.Duration, map[string]int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var total time.Duration
	var start time.Time
	kinds := map[string]int{}
	for _, e := range w.events {
		switch {
		case !e.ok && start.IsZero():
			start = e.at
			kinds[errKind(e.err)]++
		case !e.ok:
			kinds[errKind(e.err)]++
		case e.ok && !start.IsZero():
			total += e.at.Sub(start)
			start = time.Time{}
		}
	}
	return total, kinds
}

// failedWindows describes each stretch of failed writes: when it began (from the writer's start),
// how long it lasted and the errors in it, e.g. "+12.3s 1.1s [READONLY:8 timeout:1]".
func (w *writer) failedWindows() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	var start time.Time
	kinds := map[string]int{}
	for _, e := range w.events {
		switch {
		case !e.ok:
			if start.IsZero() {
				start, kinds = e.at, map[string]int{}
			}
			kinds[errKind(e.err)]++
		case !start.IsZero():
			out = append(out, fmt.Sprintf("+%.1fs %v %v", start.Sub(w.events[0].at).Seconds(), e.at.Sub(start).Round(10*time.Millisecond), kinds))
			start = time.Time{}
		}
	}
	if !start.IsZero() {
		out = append(out, fmt.Sprintf("+%.1fs unended %v", start.Sub(w.events[0].at).Seconds(), kinds))
	}
	return out
}

func errKind(s string) string {
	for _, k := range []string{"READONLY", "refused", "reset", "timeout", "LOADING", "MASTERDOWN"} {
		if strings.Contains(s, k) {
			return k
		}
	}
	return s
}

// waitFailedThenOK waits until, after t0, a write failed and a later one succeeded, and returns
// the time from t0 to that success: a kill is seen only once a write fails.
func (w *writer) waitFailedThenOK(t *testing.T, t0 time.Time, timeout time.Duration) time.Duration {
	t.Helper()
	var d time.Duration
	framework.Eventually(t, timeout, "a write to fail and a later one to succeed", func() (bool, string, error) {
		var ok bool
		d, ok = w.recoveredAfter(t0)
		return ok && d > 0, w.last(), nil
	})
	return d
}

// waitOK waits until a write after t0 succeeded.
func (w *writer) waitOK(t *testing.T, t0 time.Time, timeout time.Duration) {
	t.Helper()
	framework.Eventually(t, timeout, "a write to succeed", func() (bool, string, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		for i := len(w.events) - 1; i >= 0 && !w.events[i].at.Before(t0); i-- {
			if w.events[i].ok {
				return true, "", nil
			}
		}
		seen := "no write yet"
		if n := len(w.events); n > 0 {
			seen = fmt.Sprintf("writer %s: last write at %s ok=%v %s", w.prefix, w.events[n-1].at.Format("15:04:05.000"), w.events[n-1].ok, w.events[n-1].err)
		}
		return false, seen, nil
	})
}

func (w *writer) last() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := len(w.events); n > 0 {
		return fmt.Sprintf("last write at %s ok=%v %s", w.events[n-1].at.Format("15:04:05.000"), w.events[n-1].ok, w.events[n-1].err)
	}
	return "no write yet"
}

// lost returns the acknowledged writes that addr does not hold: whose key is missing or, on a
// key space, holds an older write's number (a later write to the key, acknowledged or not, may
// have replaced it).
func (w *writer) lost(t *testing.T, addr, pw string) []int {
	t.Helper()
	cl := newClient(addr, pw)
	defer cl.Close()
	return w.lostWith(t, cl)
}

// lostWith is lost, reading through cl (a TLS client, for instance).
func (w *writer) lostWith(t *testing.T, cl *redis.Client) []int {
	t.Helper()
	w.mu.Lock()
	acked := make([]int, 0, len(w.acked))
	for n := range w.acked {
		acked = append(acked, n)
	}
	w.mu.Unlock()
	sort.Ints(acked)
	// The keys to read: one per acknowledged write, or the key space's keys in use.
	var keys []int
	if w.keys == 0 {
		keys = acked
	} else if len(acked) > 0 {
		for k := 0; k < min(w.keys, acked[len(acked)-1]+1); k++ {
			keys = append(keys, k)
		}
	}
	stored := make(map[int]int, len(keys)) // key number -> the write number it holds (absent: none)
	for i := 0; i < len(keys); i += 500 {
		batch := keys[i:min(i+500, len(keys))]
		names := make([]string, len(batch))
		for j, n := range batch {
			names[j] = w.key(n)
		}
		var vals []interface{}
		err := errors.New("not tried")
		for try := 0; try < 300 && err != nil; try++ { // up to 30 s: a handover may be under way
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			vals, err = cl.MGet(ctx, names...).Result()
			cancel()
			if err != nil {
				time.Sleep(100 * time.Millisecond) // pacing retries of a read, bounded by the count
			}
		}
		if err != nil {
			t.Fatalf("reading back acknowledged writes: %v", err)
		}
		for j, v := range vals {
			if s, ok := v.(string); ok {
				n, err := strconv.Atoi(s)
				if err != nil {
					t.Fatalf("key %s holds %q, not a write number", names[j], s)
				}
				stored[batch[j]] = n
			}
		}
	}
	var missing []int
	for _, n := range acked {
		k := n
		if w.keys > 0 {
			k = n % w.keys
		}
		if v, ok := stored[k]; !ok || v < n {
			missing = append(missing, n)
		}
	}
	return missing
}

func percentile(ds []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s) == 0 {
		return 0
	}
	i := int(float64(len(s)-1) * p)
	return s[i]
}
