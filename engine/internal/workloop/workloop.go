// Package workloop is the one work loop of the operator's three controllers (the reconciles, the
// member passes, the backups): a rate-limited queue of keys (namespace/name of a cache), its
// workers, requeue-after, the shutdown grace, and forgetting a key everywhere with one call.
//
// The discipline is sample-controller's: a key is in the queue at most once and handled by one
// worker at a time; a Func that fails is retried with backoff; one that succeeds is forgotten by
// the rate limiter and may ask to run again after a delay. On shutdown the loop takes no more
// keys (what is queued is left: the next leader lists everything anew), and the keys in flight
// get Options.Grace to finish on a context that outlives the caller's; after that their context
// is cancelled.
package workloop

import (
	"context"
	"sync"
	"time"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// Func handles one key. A positive after asks for the key again after that delay (when err is
// nil); an error retries it with the rate limiter's backoff.
type Func func(ctx context.Context, key string) (after time.Duration, err error)

// Options configure a Loop.
type Options struct {
	// Name names the queue (its workqueue metrics' name label) and the loop in logs.
	Name string
	// Workers is how many keys are handled at once (at least 1).
	Workers int
	// RateLimiter paces retries; nil: client-go's default controller rate limiter.
	RateLimiter workqueue.TypedRateLimiter[string]
	// Grace is how long keys in flight may run on after shutdown begins.
	Grace time.Duration
}

// Loop is a keyed work queue and its workers.
type Loop struct {
	opts  Options
	queue workqueue.TypedRateLimitingInterface[string]

	mu      sync.Mutex
	forgets []func(key string)
}

// New returns a Loop; Run starts its workers.
func New(opts Options) *Loop {
	if opts.Workers < 1 {
		opts.Workers = 1
	}
	rl := opts.RateLimiter
	if rl == nil {
		rl = workqueue.DefaultTypedControllerRateLimiter[string]()
	}
	return &Loop{opts: opts, queue: workqueue.NewTypedRateLimitingQueueWithConfig(rl,
		workqueue.TypedRateLimitingQueueConfig[string]{Name: opts.Name})}
}

// Add queues key now.
func (l *Loop) Add(key string) { l.queue.Add(key) }

// AddAfter queues key after d.
func (l *Loop) AddAfter(key string, d time.Duration) { l.queue.AddAfter(key, d) }

// Len is how many keys wait.
func (l *Loop) Len() int { return l.queue.Len() }

// Drain takes every key queued now out of the queue without handling it, and returns them (tests
// that check what an event enqueued).
func (l *Loop) Drain() []string {
	var keys []string
	for l.queue.Len() > 0 {
		k, shutdown := l.queue.Get()
		if shutdown {
			break
		}
		keys = append(keys, k)
		l.queue.Done(k)
		l.queue.Forget(k)
	}
	return keys
}

// Retries is how many times key has failed since it last succeeded.
func (l *Loop) Retries(key string) int { return l.queue.NumRequeues(key) }

// OnForget registers a hook that Forget calls with the key: each package that keeps per-key state
// registers its own, so that a deleted cache is forgotten everywhere by one call.
func (l *Loop) OnForget(f func(key string)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.forgets = append(l.forgets, f)
}

// Forget drops key's backoff and calls every hook registered with OnForget.
func (l *Loop) Forget(key string) {
	l.queue.Forget(key)
	l.mu.Lock()
	hooks := append([]func(string){}, l.forgets...)
	l.mu.Unlock()
	for _, f := range hooks {
		f(key)
	}
}

// Run handles keys with f until ctx ends, then shuts down as the package comment says. It returns
// when no key is in flight any more.
func (l *Loop) Run(ctx context.Context, f Func) {
	defer utilruntime.HandleCrash()
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	var workers sync.WaitGroup
	for i := 0; i < l.opts.Workers; i++ {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for l.next(ctx, work, f) {
			}
		}()
	}
	<-ctx.Done()
	l.queue.ShutDown()
	stopped := make(chan struct{})
	go func() { workers.Wait(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(l.opts.Grace):
		klog.InfoS("Work in flight did not finish within the grace; cancelling it", "loop", l.opts.Name, "grace", l.opts.Grace)
		cancelWork()
		<-stopped
	}
}

// next handles one key on work; false once ctx ended or the queue shut down.
func (l *Loop) next(ctx, work context.Context, f Func) bool {
	key, shutdown := l.queue.Get()
	if shutdown {
		return false
	}
	defer l.queue.Done(key)
	if ctx.Err() != nil {
		return false // shutting down: what is queued is left
	}
	after, err := f(work, key)
	if err != nil {
		klog.ErrorS(err, "Failed; retrying with backoff", "loop", l.opts.Name, "key", key, "retries", l.queue.NumRequeues(key))
		l.queue.AddRateLimited(key)
		return true
	}
	l.queue.Forget(key)
	if after > 0 {
		l.queue.AddAfter(key, after)
	}
	return true
}
