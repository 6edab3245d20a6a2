package deployed

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"example.com/cache-operator/e2e/framework"
)

// recorder writes SET d:<n> <n> through addr, one write at a time, until stopped (bounded in
// count and time), and records which writes were acknowledged and when writes failed.
type recorder struct {
	mu       sync.Mutex
	acked    []int
	failures []time.Time
	lastOK   time.Time
	stop     chan struct{}
	done     chan struct{}
}

func startRecorder(addr, pw string, maxWrites int, maxTime time.Duration) *recorder {
	r := &recorder{stop: make(chan struct{}), done: make(chan struct{})}
	cl := redis.NewClient(&redis.Options{Addr: addr, Password: pw, DialTimeout: 500 * time.Millisecond,
		ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: -1, PoolSize: 1, Protocol: 2, DisableIdentity: true})
	go func() {
		defer close(r.done)
		defer cl.Close()
		deadline := time.Now().Add(maxTime)
		for n := 0; n < maxWrites && time.Now().Before(deadline); n++ {
			select {
			case <-r.stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			err := cl.Set(ctx, "d:"+strconv.Itoa(n), n, 0).Err()
			cancel()
			r.mu.Lock()
			if err == nil {
				r.acked = append(r.acked, n)
				r.lastOK = time.Now()
			} else {
				r.failures = append(r.failures, time.Now())
			}
			r.mu.Unlock()
			if err != nil {
				time.Sleep(50 * time.Millisecond) // pacing retries of a failed write, not synchronisation
			} else {
				time.Sleep(5 * time.Millisecond) // a steady writer, not a flood
			}
		}
	}()
	return r
}

func (r *recorder) halt() {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	<-r.done
}

// okSince reports whether a write succeeded after t.
func (r *recorder) okSince(t time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastOK.After(t)
}

// missing returns the acknowledged writes addr does not hold.
func (r *recorder) missing(t *testing.T, addr, pw string) []int {
	t.Helper()
	r.mu.Lock()
	acked := append([]int(nil), r.acked...)
	r.mu.Unlock()
	cl := redis.NewClient(&redis.Options{Addr: addr, Password: pw, Protocol: 2, DisableIdentity: true})
	defer cl.Close()
	var lost []int
	for i := 0; i < len(acked); i += 500 {
		batch := acked[i:min(i+500, len(acked))]
		keys := make([]string, len(batch))
		for j, n := range batch {
			keys[j] = "d:" + strconv.Itoa(n)
		}
		var vals []interface{}
		var err error
		framework.Eventually(t, 30*time.Second, "reading back the acknowledged writes", func() (bool, string, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			vals, err = cl.MGet(ctx, keys...).Result()
			return err == nil, fmt.Sprint(err), nil
		})
		for j, v := range vals {
			if v == nil {
				lost = append(lost, batch[j])
			}
		}
	}
	return lost
}

// cacheAccess returns the address of a cache's read-write Service and the clients' password.
func cacheAccess(t *testing.T, c *framework.Cluster, ns, name string) (string, string) {
	t.Helper()
	ctx := context.Background()
	svc, err := c.Kube.CoreV1().Services(ns).Get(ctx, name+"-rw", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Kube.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return svc.Spec.ClusterIP + ":6379", string(s.Data["password"])
}

// primaryOf returns the member labelled primary.
func primaryOf(t *testing.T, c *framework.Cluster, ns, name string) string {
	t.Helper()
	pods, err := c.Kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/instance=" + name + ",cache.example.com/role=primary"})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 {
		return fmt.Sprintf("(%d pods labelled primary)", len(pods.Items))
	}
	return pods.Items[0].Name
}

// failoverEvents counts the cache's FailoverStarted Events since t.
func failoverEvents(t *testing.T, c *framework.Cluster, ns, name string, since time.Time) int {
	t.Helper()
	evs, err := c.Kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=FailoverStarted"})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range evs.Items {
		if e.LastTimestamp.Time.After(since.Add(-time.Second)) || e.EventTime.Time.After(since.Add(-time.Second)) {
			n++
		}
	}
	return n
}
