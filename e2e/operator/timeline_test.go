package operator

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"example.com/cache-operator/e2e/framework"
)

// timeline samples a cache's members every interval (pod phase and readiness, and from each
// server: role, loading, sync, link, AOF rewrite, snapshot in progress) and keeps each member's
// changes with the time since it began, for the log of a test that measures a slow phase: where
// the time goes. A server that does not answer is a state too ("server: dial tcp ..."); it never
// fails the test.
type timeline struct {
	start time.Time
	mu    sync.Mutex
	last  map[string]string
	lines []string
	stop  chan struct{}
	done  chan struct{}
}

var infoField = regexp.MustCompile(`(?m)^(role|loading|master_link_status|master_sync_in_progress|aof_rewrite_in_progress|rdb_bgsave_in_progress|connected_slaves|aof_delayed_fsync):(\S+)`)

func startTimeline(c *framework.Cluster, ns, cache string, interval, maxTime time.Duration) *timeline {
	tl := &timeline{start: time.Now(), last: map[string]string{}, stop: make(chan struct{}), done: make(chan struct{})}
	password := ""
	clients := map[string]*redis.Client{}
	go func() {
		defer close(tl.done)
		defer func() {
			for _, cl := range clients {
				cl.Close()
			}
		}()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		deadline := time.Now().Add(maxTime)
		for time.Now().Before(deadline) {
			ctx, cancel := context.WithTimeout(context.Background(), interval+time.Second)
			pods, err := c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + cache})
			if password == "" {
				// The cache's Secret may not exist yet: its pods have no server to ask either.
				if s, err := getChild(c, "Secret", ns, cache); err == nil {
					enc, _, _ := unstructured.NestedString(s.Object, "data", "internal-password")
					dec, _ := base64.StdEncoding.DecodeString(enc)
					password = string(dec)
				}
			}
			if err == nil {
				for _, p := range pods.Items {
					tl.record(p.Name, memberState(ctx, &p, clients, password))
				}
			}
			cancel()
			select {
			case <-tl.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return tl
}

// memberState is one line of what a member's pod and server show.
func memberState(ctx context.Context, p *corev1.Pod, clients map[string]*redis.Client, password string) string {
	ready := "not ready"
	for _, cd := range p.Status.Conditions {
		if cd.Type == corev1.PodReady && cd.Status == corev1.ConditionTrue {
			ready = "ready"
		}
	}
	state := fmt.Sprintf("pod %s %s", p.Status.Phase, ready)
	for _, s := range p.Status.InitContainerStatuses {
		if s.State.Running != nil {
			state += ", init " + s.Name + " running"
		}
	}
	if p.Status.PodIP == "" || password == "" {
		return state // no server yet, or no Secret to authenticate with
	}
	addr := net.JoinHostPort(p.Status.PodIP, "6379")
	cl := clients[addr]
	if cl == nil {
		cl = redis.NewClient(&redis.Options{Addr: addr, Username: "internal", Password: password,
			DialTimeout: 500 * time.Millisecond, ReadTimeout: time.Second, MaxRetries: -1, PoolSize: 1, Protocol: 2, DisableIdentity: true})
		clients[addr] = cl
	}
	info, err := cl.Info(ctx, "replication", "persistence").Result()
	if err != nil {
		return state + ", server: " + strings.SplitN(err.Error(), ":", 2)[0]
	}
	var fields []string
	for _, m := range infoField.FindAllStringSubmatch(info, -1) {
		if m[2] != "0" || m[1] == "connected_slaves" {
			fields = append(fields, m[1]+"="+m[2])
		}
	}
	sort.Strings(fields)
	return state + ", " + strings.Join(fields, " ")
}

func (tl *timeline) record(member, state string) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if tl.last[member] == state {
		return
	}
	tl.last[member] = state
	tl.lines = append(tl.lines, fmt.Sprintf("%6.1fs %s: %s", time.Since(tl.start).Seconds(), member, state))
}

// Mark adds a line of the test's own (a phase it observed).
func (tl *timeline) Mark(what string) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.lines = append(tl.lines, fmt.Sprintf("%6.1fs -- %s", time.Since(tl.start).Seconds(), what))
}

// Log stops the sampling and logs the timeline.
func (tl *timeline) Log(t *testing.T, title string) {
	t.Helper()
	select {
	case <-tl.stop:
	default:
		close(tl.stop)
	}
	<-tl.done
	tl.mu.Lock()
	defer tl.mu.Unlock()
	t.Logf("%s:\n%s", title, strings.Join(tl.lines, "\n"))
}
