package operator

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"example.com/cache-operator/e2e/framework"
)

// Tests that mostly wait on the product's own clocks (a backup schedule, a password overlap, a
// roll, a failover's detection) run side by side on the one cluster, after the serial tests (go
// test runs parallel tests last). What lets them share it:
//   - each test's operator reconciles its own namespace only (--watch-namespace), so operators
//     never reconcile each other's caches, and its metrics, Events and log are its own;
//   - the webhooks (validation, and the CRD's conversion) are cluster-wide, one registration for
//     all: one more operator, confined to a namespace that holds nothing, serves them for every
//     parallel test, and the tests' operators serve none (--webhook-port=0).
// Tests that change what every test sees stay serial: stopping a node or the object store,
// restarting the control plane, leader election, RBAC, the webhooks themselves, and those
// whose figures are the whole machine's (memory, CPU, request counts of every user). So do those
// that assert tight timings (a failover's p50, a partition's bounds, how long a roll or a move stops
// writes: side by side in CI, a roll's 2 s target was missed at 2.75 s), race a transient state
// (the plugin's status during a failover: on a busy machine the failover was over before the
// status ran) or use a second namespace (a restore into another namespace). The parallel tests
// assert what was lost and refused, not how fast: their clients' bounds are for a loaded
// machine (bulkClient).

// sharedWebhooks is the operator that serves the parallel tests' webhooks.
var sharedWebhooks struct {
	once sync.Once
	op   *operator
	err  error
}

// webhooksOnlyNamespace is the namespace the webhooks' operator is confined to: it does not
// exist, so that operator reconciles nothing.
const webhooksOnlyNamespace = "cache-e2e-webhooks-only"

// confined returns the flags of a parallel test's operator (the test has called parallel): it
// reconciles ns only and serves no webhooks. It waits for the shared webhooks' operator, which
// the first parallel test starts (the serial tests before it registered their own operators'
// webhooks, gone now).
func confined(t *testing.T, c *framework.Cluster, ns string) []string {
	t.Helper()
	if top, _, _ := strings.Cut(t.Name(), "/"); !isParallel(top) {
		// A serial test that started the shared operator would leave it serving webhooks that
		// the next serial tests re-register to their own operators, gone when they end: every
		// parallel test after would find no conversion webhook. startOperatorIn chooses.
		t.Fatalf("confined is for parallel tests only; %s is serial: start its operator with startOperatorIn", top)
	}
	sharedWebhooks.once.Do(func() {
		sharedWebhooks.op, sharedWebhooks.err = launch(c, "webhooks", true, inNamespace(webhooksOnlyNamespace)...)
	})
	if sharedWebhooks.err != nil {
		t.Fatalf("the parallel tests' webhooks: %v", sharedWebhooks.err)
	}
	return inNamespace(ns)
}

// isParallel reports whether the top-level test called parallel.
func isParallel(top string) bool {
	_, ok := parallelTests.Load(top)
	return ok
}

// inNamespace returns the flags of an operator that reconciles ns only.
func inNamespace(ns string) []string { return []string{"--watch-namespace=" + ns} }

// stopSharedWebhooks stops the webhooks' operator after the last test (TestMain).
func stopSharedWebhooks() {
	if op := sharedWebhooks.op; op != nil {
		op.stop(syscall.SIGTERM)
		fmt.Fprintln(os.Stderr, "e2e: stopped the parallel tests' webhooks operator")
	}
}

// parallelTests holds the names of the top-level tests that called parallel.
var parallelTests sync.Map

// parallelSlots is how many parallel tests run at once (besides the light ones). go test's own
// -parallel must be at least as high as the number of parallel tests, so that all of them reach
// parallel's queue at once (hack/e2e.sh gives 64).
const parallelSlots = 4

// longestFirst are the parallel tests that take longest, started first so that the phase does
// not end with one of them alone (measured: the backup schedule, started last, kept the two
// cores 70 % idle for its last two minutes). The others follow in go test's order.
var longestFirst = []string{"TestBackupOneGiB", "TestDeletingAChildCostsNothing", "TestRoutingThroughServices", "TestTLSTurnedOnAndOff",
	"TestBackupAndRestoreOnEachEngine", "TestPasswordRotation", "TestInternalPasswordRotation"}

// light are parallel tests that mostly wait (the backup schedule keeps 13 % of the machine busy)
// and take no slot.
var light = map[string]bool{"TestBackupScheduleAndRetention": true}

// queue admits the parallel tests: a test starts when a slot is free and no test waiting with a
// higher rank (longestFirst, then arrival) could take it. The first admission waits a moment
// after the first arrival, so that every released test has queued (a scheduling choice; no test
// waits on it for its result).
var queue = &admission{waiting: map[string]int{}}

type admission struct {
	sync.Mutex
	cond    *sync.Cond
	waiting map[string]int // name → rank
	running int
	arrived int
	open    bool
}

// better reports whether a waiting test ranks before rank (the lock held).
func (q *admission) better(rank int) bool {
	for _, r := range q.waiting {
		if r < rank {
			return true
		}
	}
	return false
}

// parallel runs t beside the other parallel tests (t.Parallel); its operators, started with
// startOperatorIn, are confined to its namespace.
func parallel(t *testing.T) {
	t.Parallel()
	parallelTests.Store(t.Name(), true)
	if light[t.Name()] {
		return
	}
	queue.Lock()
	defer queue.Unlock()
	if queue.cond == nil {
		queue.cond = sync.NewCond(&queue.Mutex)
		time.AfterFunc(time.Second, func() {
			queue.Lock()
			queue.open = true
			queue.Unlock()
			queue.cond.Broadcast()
		})
	}
	rank := len(longestFirst) + queue.arrived
	queue.arrived++
	if i := slices.Index(longestFirst, t.Name()); i >= 0 {
		rank = i
	}
	queue.waiting[t.Name()] = rank
	for !queue.open || queue.running >= parallelSlots || queue.better(rank) {
		queue.cond.Wait()
	}
	delete(queue.waiting, t.Name())
	queue.running++
	t.Cleanup(func() {
		queue.Lock()
		queue.running--
		queue.Unlock()
		queue.cond.Broadcast()
	})
}

// startOperatorIn is startOperator for a test whose caches live in ns: confined to ns when the
// test (or the test it is a subtest of) runs in parallel.
func startOperatorIn(t *testing.T, c *framework.Cluster, ns string, args ...string) *operator {
	t.Helper()
	top, _, _ := strings.Cut(t.Name(), "/")
	if isParallel(top) {
		args = append(confined(t, c, ns), args...)
	}
	return startOperator(t, c, args...)
}
