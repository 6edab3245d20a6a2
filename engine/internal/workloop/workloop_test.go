package workloop

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"
)

// wait polls cond until it holds or the deadline passes.
func wait(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", d, what)
		}
		time.Sleep(time.Millisecond)
	}
}

// A key in flight at shutdown finishes within the grace on a context that is still open; keys
// still queued are not started.
func TestShutdownFinishesWorkInFlight(t *testing.T) {
	l := New(Options{Name: "t", Workers: 1, Grace: 5 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	started, release := make(chan struct{}), make(chan struct{})
	var finished, ran atomic.Int32
	var ctxErrInFlight error
	done := make(chan struct{})
	go func() {
		l.Run(ctx, func(work context.Context, key string) (time.Duration, error) {
			ran.Add(1)
			if key == "a" {
				close(started)
				<-release
				ctxErrInFlight = work.Err()
				finished.Add(1)
			}
			return 0, nil
		})
		close(done)
	}()
	l.Add("a")
	<-started
	l.Add("b") // queued behind a: never started
	cancel()
	close(release)
	<-done
	if finished.Load() != 1 || ctxErrInFlight != nil {
		t.Errorf("the key in flight finished %d times, its context %v; want once, open", finished.Load(), ctxErrInFlight)
	}
	if ran.Load() != 1 {
		t.Errorf("%d keys ran; the queued one must not start after shutdown", ran.Load())
	}
}

// A key in flight past the grace has its context cancelled, and Run returns once it ends.
func TestShutdownCancelsAfterGrace(t *testing.T) {
	l := New(Options{Name: "t", Workers: 1, Grace: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	done := make(chan struct{})
	var sawCancel atomic.Bool
	go func() {
		l.Run(ctx, func(work context.Context, key string) (time.Duration, error) {
			close(started)
			<-work.Done()
			sawCancel.Store(true)
			return 0, nil
		})
		close(done)
	}()
	l.Add("a")
	<-started
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the grace")
	}
	if !sawCancel.Load() {
		t.Error("the key in flight never saw its context cancelled")
	}
}

// A positive after runs the key again; an error retries it with backoff; Forget calls every hook.
func TestRequeueRetryAndForget(t *testing.T) {
	l := New(Options{Name: "t", Workers: 2, Grace: time.Second,
		RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Millisecond, 10*time.Millisecond)})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	runs := map[string]int{}
	go l.Run(ctx, func(_ context.Context, key string) (time.Duration, error) {
		mu.Lock()
		runs[key]++
		n := runs[key]
		mu.Unlock()
		switch {
		case key == "again" && n < 3:
			return 10 * time.Millisecond, nil
		case key == "fails" && n < 4:
			return 0, errors.New("not yet")
		}
		return 0, nil
	})
	l.Add("again")
	l.Add("fails")
	count := func(k string) int { mu.Lock(); defer mu.Unlock(); return runs[k] }
	wait(t, "the requeued key to run 3 times", 5*time.Second, func() bool { return count("again") == 3 })
	wait(t, "the failing key to run 4 times", 5*time.Second, func() bool { return count("fails") == 4 })
	wait(t, "the failing key's retries to be forgotten once it succeeded", 5*time.Second, func() bool { return l.Retries("fails") == 0 })

	var forgot []string
	l.OnForget(func(k string) { forgot = append(forgot, "first:"+k) })
	l.OnForget(func(k string) { forgot = append(forgot, "second:"+k) })
	l.Forget("ns/gone")
	if len(forgot) != 2 || forgot[0] != "first:ns/gone" || forgot[1] != "second:ns/gone" {
		t.Errorf("Forget called %v; want both hooks, in order", forgot)
	}
}
