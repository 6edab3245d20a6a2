package operator

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"example.com/cache-operator/e2e/framework"
)

// authLoad writes through the read-write Service and reads through the read-only one with one
// password, from a fresh connection (a new AUTH) every 20 operations, paced and bounded in count
// and time, counting what fails.
type authLoad struct {
	name         string
	ops, failed  atomic.Int64
	mu           sync.Mutex
	errs         map[string]int
	stop, done   chan struct{}
	firstFailure atomic.Value // time.Time
}

func startAuthLoad(name, rw, ro, pw string, maxOps int, limit time.Duration) *authLoad {
	l := &authLoad{name: name, errs: map[string]int{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		ctx := context.Background()
		end := time.Now().Add(limit)
		tick := time.NewTicker(5 * time.Millisecond) // pacing, not synchronisation
		defer tick.Stop()
		var w, r *redis.Client
		defer func() {
			if w != nil {
				w.Close()
				r.Close()
			}
		}()
		for i := 0; i < maxOps && time.Now().Before(end); i++ {
			select {
			case <-l.stop:
				return
			case <-tick.C:
			}
			if i%20 == 0 {
				if w != nil {
					w.Close()
					r.Close()
				}
				w, r = bulkClient(rw, pw), bulkClient(ro, pw)
			}
			key := fmt.Sprintf("%s:%d", name, i)
			err := w.Set(ctx, key, i, 0).Err()
			if err == nil {
				if err = r.Get(ctx, key).Err(); err == redis.Nil {
					err = nil // not replicated yet: not a failure
				}
			}
			l.ops.Add(1)
			if err != nil {
				l.failed.Add(1)
				l.firstFailure.CompareAndSwap(nil, time.Now())
				l.mu.Lock()
				l.errs[authErrKind(err.Error())]++
				l.mu.Unlock()
			}
		}
	}()
	return l
}

func authErrKind(s string) string {
	for _, k := range []string{"WRONGPASS", "NOAUTH"} {
		if strings.Contains(s, k) {
			return k
		}
	}
	return errKind(s)
}

func (l *authLoad) finish() string {
	close(l.stop)
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprintf("%s: %d operations, %d failed %v", l.name, l.ops.Load(), l.failed.Load(), l.errs)
}

// linkWatch samples every replica's link (INFO replication, as the given user) until stopped and
// counts the samples that found one down.
type linkWatch struct {
	samples, down atomic.Int64
	stop, done    chan struct{}
	last          atomic.Value // string
}

func watchLinks(t *testing.T, c *framework.Cluster, ns, cache, user, pw string) *linkWatch {
	w := &linkWatch{stop: make(chan struct{}), done: make(chan struct{})}
	pods := memberPods(t, c, ns, cache)
	go func() {
		defer close(w.done)
		ctx := context.Background()
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for n := 0; n < 4*60*10; n++ { // at most 10 minutes
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
			up, replicas := 0, 0
			for _, p := range pods {
				cl := redis.NewClient(&redis.Options{Addr: net.JoinHostPort(p.Status.PodIP, "6379"), Username: user, Password: pw,
					DialTimeout: 2 * time.Second, ReadTimeout: 5 * time.Second, MaxRetries: -1, PoolSize: 1, Protocol: 2, DisableIdentity: true})
				info, err := cl.Info(ctx, "replication").Result()
				cl.Close()
				if err != nil || strings.Contains(info, "role:master") {
					continue
				}
				replicas++
				if strings.Contains(info, "master_link_status:up") {
					up++
				}
			}
			w.samples.Add(1)
			w.last.Store(fmt.Sprintf("%d of %d replicas linked", up, replicas))
			if up != len(pods)-1 {
				w.down.Add(1)
			}
		}
	}()
	return w
}

func (w *linkWatch) finish() (samples, down int64) {
	close(w.stop)
	<-w.done
	return w.samples.Load(), w.down.Load()
}

// secretOf reads the cache's Secret: its data decoded, and its annotations.
func secretOf(t *testing.T, c *framework.Cluster, ns, cache string) (map[string]string, map[string]string) {
	t.Helper()
	s, err := c.Kube.CoreV1().Secrets(ns).Get(context.Background(), cache+"-auth", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	data := map[string]string{}
	for k, v := range s.Data {
		data[k] = string(v)
	}
	return data, s.Annotations
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func setSecretPassword(t *testing.T, c *framework.Cluster, ns, cache, pw string) {
	t.Helper()
	patch := fmt.Sprintf(`{"data":{"password":%q}}`, base64.StdEncoding.EncodeToString([]byte(pw)))
	if _, err := c.Kube.CoreV1().Secrets(ns).Patch(context.Background(), cache+"-auth", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// passwordCondition returns the PasswordApplied condition ("status/reason: message") and each
// member's passwordRevision.
func passwordCondition(c *framework.Cluster, ns, cache string) (string, []int64, error) {
	mc, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Get(context.Background(), cache, metav1.GetOptions{})
	if err != nil {
		return "", nil, err
	}
	cond := ""
	conds, _, _ := unstructured.NestedSlice(mc.Object, "status", "conditions")
	for _, cd := range conds {
		if m, _ := cd.(map[string]interface{}); m["type"] == "PasswordApplied" {
			cond = fmt.Sprintf("%v/%v: %v", m["status"], m["reason"], m["message"])
		}
	}
	var revs []int64
	members, _, _ := unstructured.NestedSlice(mc.Object, "status", "members")
	for _, m := range members {
		r, _, _ := unstructured.NestedInt64(m.(map[string]interface{}), "passwordRevision")
		revs = append(revs, r)
	}
	return cond, revs, nil
}

func waitPasswordApplied(t *testing.T, c *framework.Cluster, ns, cache string, revision int64) {
	t.Helper()
	framework.Eventually(t, time.Minute, fmt.Sprintf("PasswordApplied True at revision %d on every member", revision), func() (bool, string, error) {
		cond, revs, err := passwordCondition(c, ns, cache)
		ok := strings.HasPrefix(cond, "True/") && strings.Contains(cond, fmt.Sprintf("revision %d", revision)) && len(revs) == 3
		for _, r := range revs {
			ok = ok && r == revision
		}
		return ok, fmt.Sprintf("%s; member revisions %v", cond, revs), err
	})
}

// authRefused reports whether a fresh connection to addr with pw is refused as a wrong password.
func authRefused(addr, pw string) (bool, error) {
	cl := newClient(addr, pw)
	defer cl.Close()
	err := cl.Ping(context.Background()).Err()
	if err == nil {
		return false, nil
	}
	return strings.Contains(err.Error(), "WRONGPASS"), err
}

// TestPasswordRotation: a user changes the Secret's password (to one with a quote and a
// backslash) under a steady writer and reader that use the old password and then the new one.
// During the overlap no operation fails with either, every replica's link stays up and no pod
// restarts; after it the old password is refused on every member. Then hostile values (a newline,
// a line that would add replicaof, whitespace) are refused with a condition and an Event, the
// members keep the accepted password and the cache serves on, and a member restarted meanwhile
// starts with the accepted password and nothing injected. Last, the rotate-password annotation
// has the operator generate a new password.
func TestPasswordRotation(t *testing.T) {
	parallel(t)
	ctx := context.Background()
	c := framework.Setup(t)
	const overlap = 40 * time.Second
	ns := c.RealNamespace(t, "rotate")
	startOperatorIn(t, c, ns, "--password-overlap="+overlap.String())
	deleteCachesOnCleanup(t, c, ns)
	createCache(t, c, ns, "r", map[string]interface{}{"size": int64(3), "version": "7.2", "storageGi": int64(1)})
	waitWhole(t, c, ns, "r", 3, 3*time.Minute)
	waitPasswordApplied(t, c, ns, "r", 1)
	oldPW, internal := password(t, c, ns, "r"), internalPassword(t, c, ns, "r")
	rw := net.JoinHostPort(clusterIP(t, c, ns, "r-rw"), "6379")
	ro := net.JoinHostPort(clusterIP(t, c, ns, "r-ro"), "6379")
	before := restartsByPod(memberPods(t, c, ns, "r"))
	sts, err := c.Kube.AppsV1().StatefulSets(ns).Get(ctx, "r", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	revision := sts.Status.UpdateRevision

	links := watchLinks(t, c, ns, "r", "internal", internal)
	oldLoad := startAuthLoad("old", rw, ro, oldPW, 100_000, 3*time.Minute)
	framework.Eventually(t, 30*time.Second, "the old-password load to run", func() (bool, string, error) {
		return oldLoad.ops.Load() >= 100, fmt.Sprint(oldLoad.ops.Load()), nil
	})

	newPW := fmt.Sprintf(`n"ew\pass-%d`, time.Now().UnixNano())
	start := time.Now()
	setSecretPassword(t, c, ns, "r", newPW)
	framework.Eventually(t, time.Minute, "every member to accept the new password", func() (bool, string, error) {
		var seen []string
		all := true
		for _, p := range memberPods(t, c, ns, "r") {
			cl := newClient(net.JoinHostPort(p.Status.PodIP, "6379"), newPW)
			err := cl.Ping(ctx).Err()
			cl.Close()
			seen = append(seen, fmt.Sprintf("%s: %v", p.Name, err))
			all = all && err == nil
		}
		return all, strings.Join(seen, "; "), nil
	})
	accepted := time.Since(start)
	waitPasswordApplied(t, c, ns, "r", 2)
	applied := time.Since(start)
	_, ann := secretOf(t, c, ns, "r")
	until, err := time.Parse(time.RFC3339, ann["cache.example.com/previous-password-until"])
	if err != nil {
		t.Fatalf("the overlap's end: %q %v", ann["cache.example.com/previous-password-until"], err)
	}
	newLoad := startAuthLoad("new", rw, ro, newPW, 100_000, 3*time.Minute)
	// Both run until shortly before the overlap ends.
	framework.Eventually(t, overlap+10*time.Second, "the overlap to be nearly over", func() (bool, string, error) {
		return time.Until(until) < 3*time.Second, time.Until(until).String() + " left", nil
	})
	oldSummary := oldLoad.finish()
	t.Logf("password changed in the Secret; every member accepts it %v later, status says so %v later; overlap until %s",
		accepted.Round(10*time.Millisecond), applied.Round(10*time.Millisecond), until.Format(time.RFC3339))
	t.Logf("during the overlap: %s", oldSummary)
	if oldLoad.failed.Load() != 0 {
		t.Errorf("the old password's operations failed during the overlap: %s", oldSummary)
	}

	// After the overlap: the old password is refused everywhere, the new one works.
	framework.Eventually(t, time.Minute, "the old password refused on every member", func() (bool, string, error) {
		var seen []string
		all := true
		for _, p := range memberPods(t, c, ns, "r") {
			refused, err := authRefused(net.JoinHostPort(p.Status.PodIP, "6379"), oldPW)
			seen = append(seen, fmt.Sprintf("%s refused=%v (%v)", p.Name, refused, err))
			all = all && refused
		}
		return all, strings.Join(seen, "; "), nil
	})
	data, ann := secretOf(t, c, ns, "r")
	if _, ok := data["previous-password-sha256"]; ok || ann["cache.example.com/previous-password-until"] != "" {
		t.Errorf("the Secret still holds the previous password's hash after the overlap: %v", ann)
	}
	newSummary := newLoad.finish()
	samples, down := links.finish()
	t.Logf("new password throughout: %s; replica links: %d samples, %d with a link down", newSummary, samples, down)
	if newLoad.failed.Load() != 0 {
		t.Errorf("the new password's operations failed: %s", newSummary)
	}
	if down != 0 || samples == 0 {
		t.Errorf("replication links: %d of %d samples found a link down (last: %v)", down, samples, links.last.Load())
	}
	if after := restartsByPod(memberPods(t, c, ns, "r")); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("members restarted or replaced: before %v, after %v", before, after)
	}
	if sts, err = c.Kube.AppsV1().StatefulSets(ns).Get(ctx, "r", metav1.GetOptions{}); err != nil || sts.Status.UpdateRevision != revision {
		t.Errorf("the StatefulSet's revision moved (%v): a rotation must not touch the pod template", err)
	}

	// Hostile values: refused, reported, nothing changes on the members.
	hostile := map[string]string{
		"newline":  "two\nlines",
		"injected": "x\nreplicaof 198.18.0.1 6379",
		"space":    "with space",
	}
	rejections := func() (int, error) {
		events, err := c.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=PasswordRejected"})
		if err != nil {
			return 0, err
		}
		return len(events.Items), nil
	}
	refusedSoFar := 0
	for name, bad := range hostile {
		setSecretPassword(t, c, ns, "r", bad)
		// The condition is already False after the first value, so wait for this value's own
		// Event: then the operator has seen it before the next one overwrites it.
		refusedSoFar++
		framework.Eventually(t, 30*time.Second, name+": PasswordApplied False/PasswordRejected and its Event", func() (bool, string, error) {
			cond, _, err := passwordCondition(c, ns, "r")
			if err != nil {
				return false, cond, err
			}
			n, err := rejections()
			return strings.HasPrefix(cond, "False/PasswordRejected") && n >= refusedSoFar, fmt.Sprintf("%s; %d PasswordRejected Events", cond, n), err
		})
		data, _ := secretOf(t, c, ns, "r")
		if want := sha256Hex(newPW); data["password-sha256"] != want {
			t.Errorf("%s: the accepted hash changed", name)
		}
		if refused, err := authRefused(rw, newPW); refused || err != nil {
			t.Errorf("%s: the accepted password no longer works through r-rw: %v", name, err)
		}
		if refused, _ := authRefused(rw, bad); !refused {
			t.Errorf("%s: the refused value authenticates", name)
		}
	}
	events, err := c.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=PasswordRejected"})
	if err != nil || len(events.Items) < len(hostile) {
		t.Errorf("PasswordRejected Events: %d (%v); want one per refused value", len(events.Items), err)
	} else {
		t.Logf("refused with an Event each, e.g. %q", events.Items[0].Message)
	}
	for _, e := range events.Items {
		if strings.Contains(e.Message, "replicaof") || strings.Contains(e.Message, "lines") {
			t.Errorf("an Event carries the refused value: %q", e.Message)
		}
	}
	// A member restarted while the Secret holds a hostile value starts with the accepted password
	// and nothing injected: it is a replica of the cache's primary, not of 198.18.0.1.
	replica := ""
	for _, p := range memberPods(t, c, ns, "r") {
		if p.Labels["cache.example.com/role"] == "replica" {
			replica = p.Name
		}
	}
	if err := c.Kube.CoreV1().Pods(ns).Delete(ctx, replica, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitWhole(t, c, ns, "r", 3, 2*time.Minute)
	framework.Eventually(t, time.Minute, replica+" back, accepting the password of revision 2 and linked to the primary", func() (bool, string, error) {
		p, err := c.Kube.CoreV1().Pods(ns).Get(ctx, replica, metav1.GetOptions{})
		if err != nil || p.Status.PodIP == "" || p.Status.Phase != corev1.PodRunning {
			return false, "not running yet", err
		}
		cl := newClient(net.JoinHostPort(p.Status.PodIP, "6379"), newPW)
		defer cl.Close()
		info, err := cl.Info(ctx, "replication").Result()
		if err != nil {
			return false, "", nil
		}
		return strings.Contains(info, "master_link_status:up") && !strings.Contains(info, "198.18.0.1"), info, nil
	})

	// The annotation: the operator generates a new password.
	patch := `{"metadata":{"annotations":{"cache.example.com/rotate-password":"2026-12-01"}}}`
	if _, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Patch(ctx, "r", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPasswordApplied(t, c, ns, "r", 3)
	generated := password(t, c, ns, "r")
	if generated == newPW || len(generated) != 64 {
		t.Errorf("the annotation's password: %d characters, same as before %v", len(generated), generated == newPW)
	}
	cl := bulkClient(rw, generated)
	defer cl.Close()
	if err := cl.Set(ctx, "after-rotation", "1", 0).Err(); err != nil {
		t.Errorf("writing with the generated password: %v", err)
	}
}
