package operator

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"example.com/cache-operator/e2e/framework"
)

// The commands the clients' user must be refused (NOPERM), and the ones it keeps.
var (
	adminCommands = [][]interface{}{
		{"CONFIG", "GET", "masterauth"}, {"CONFIG", "SET", "maxmemory", "1"}, {"ACL", "LIST"}, {"ACL", "GETUSER", "internal"},
		{"ACL", "SETUSER", "default", "+@all"}, {"ACL", "USERS"}, {"REPLICAOF", "NO", "ONE"}, {"SLAVEOF", "NO", "ONE"}, {"FAILOVER"},
		{"SHUTDOWN", "NOSAVE"}, {"MODULE", "LIST"}, {"MONITOR"}, {"CLIENT", "KILL", "TYPE", "normal"}, {"CLIENT", "LIST"},
		{"SAVE"}, {"BGSAVE"}, {"BGREWRITEAOF"}, {"MIGRATE", "127.0.0.1", "1", "k", "0", "1"}, {"SYNC"}, {"PSYNC", "?", "-1"},
		{"CLIENT", "PAUSE", "1"}, {"ROLE"},
	}
	dataCommands = [][]interface{}{
		{"SET", "acl:k", "v"}, {"GET", "acl:k"}, {"KEYS", "acl:*"}, {"SCAN", "0", "MATCH", "acl:*"}, {"INFO", "memory"},
		{"EVAL", "return redis.call('GET', KEYS[1])", "1", "acl:k"}, {"SCRIPT", "FLUSH"}, {"WATCH", "acl:k"}, {"UNWATCH"},
		{"PUBLISH", "acl:c", "m"}, {"ACL", "WHOAMI"}, {"FLUSHDB"},
	}
)

// TestClientsUserHasNoAdmin: on a real cache, the clients' user (default) is refused every admin
// command with NOPERM, through the read-write Service and on each member; no command it may run
// shows the internal password; the data commands work. DEBUG is refused too (the server refuses it
// before the ACL does: enable-debug-command is off), and the ACL says so (ACL DRYRUN).
func TestClientsUserHasNoAdmin(t *testing.T) {
	parallel(t)
	rc := newRealCache(t, "acl", "a")
	c, ns, pw := rc.c, rc.ns, rc.password
	ctx := context.Background()
	internal := internalPassword(t, c, ns, "a")
	targets := []string{rc.addr}
	for _, p := range memberPods(t, c, ns, "a") {
		targets = append(targets, net.JoinHostPort(p.Status.PodIP, "6379"))
	}
	refused := 0
	for _, addr := range targets {
		cl := bulkClient(addr, pw)
		for _, cmd := range adminCommands {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			err := cl.Do(cctx, cmd...).Err()
			cancel()
			if err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
				t.Errorf("%s: as the clients' user, %v: %v; want NOPERM", addr, cmd, err)
				continue
			}
			refused++
		}
		if err := cl.Do(ctx, "DEBUG", "SLEEP", "0").Err(); err == nil {
			t.Errorf("%s: DEBUG SLEEP was accepted", addr)
		}
		info, err := cl.Info(ctx, "everything").Result()
		if err != nil || strings.Contains(info, internal) {
			t.Errorf("%s: INFO everything: %v (shows the internal password: %v)", addr, err, strings.Contains(info, internal))
		}
		cl.Close()
	}
	primary := bulkClient(rc.addr, pw)
	defer primary.Close()
	for _, cmd := range dataCommands {
		if err := primary.Do(ctx, cmd...).Err(); err != nil && err != redis.Nil {
			t.Errorf("as the clients' user, %v: %v; want it to work", cmd, err)
		}
	}
	admin := adminClient(t, c, ns, "a", rc.primary.Status.PodIP)
	defer admin.Close()
	for _, cmd := range [][]interface{}{{"debug", "sleep", "0"}, {"config", "get", "masterauth"}, {"role"}} {
		out, err := admin.Do(ctx, append([]interface{}{"ACL", "DRYRUN", "default"}, cmd...)...).Text()
		if err != nil || !strings.Contains(out, "no permissions") {
			t.Errorf("ACL DRYRUN default %v: %q %v; want no permissions", cmd, out, err)
		}
	}
	// The internal user reads no key.
	ic := internalClient(t, c, ns, "a", rc.primary.Status.PodIP)
	defer ic.Close()
	if err := ic.Get(ctx, "acl:k").Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
		t.Errorf("as the internal user, GET: %v; want NOPERM", err)
	}
	t.Logf("the clients' user was refused %d admin commands (%d per endpoint, through a-rw and on %d members) with NOPERM; %d data commands worked",
		refused, len(adminCommands), len(targets)-1, len(dataCommands))
}

// TestInternalPasswordRotation: rotating the internal password (the annotation) under a writer
// gives every member the new one with an overlap and moves replication to it, with no restart, no
// new revision, no replica link down and no acknowledged write lost; after the overlap the old one
// is refused, and the probes (which read the mounted Secret) keep every member Ready.
func TestInternalPasswordRotation(t *testing.T) {
	parallel(t)
	const overlap = 40 * time.Second
	rc := newRealCache(t, "irot", "i", "--password-overlap="+overlap.String())
	c, ns, pw, rw := rc.c, rc.ns, rc.password, rc.addr
	ctx := context.Background()
	old := internalPassword(t, c, ns, "i")
	before := restartsByPod(memberPods(t, c, ns, "i"))
	sts, err := c.Kube.AppsV1().StatefulSets(ns).Get(ctx, "i", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	revision := sts.Status.UpdateRevision
	w := startWriter(t, rw, pw, 2_000_000, 5*time.Minute)
	w.waitOK(t, time.Now(), time.Minute)
	links := watchLinks(t, c, ns, "i", "default", pw)

	patch := `{"metadata":{"annotations":{"cache.example.com/rotate-internal-password":"r1"}}}`
	if _, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Patch(ctx, "i", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var next string
	framework.Eventually(t, 30*time.Second, "a new internal password in the Secret", func() (bool, string, error) {
		data, _ := secretOf(t, c, ns, "i")
		next = data["internal-password"]
		return next != old && data["previous-internal-password"] == old, "", nil
	})
	framework.Eventually(t, time.Minute, "every member to accept both internal passwords and replicate with the new one", func() (bool, string, error) {
		var seen []string
		all := true
		for _, p := range memberPods(t, c, ns, "i") {
			ok, why := internalState(ctx, p.Status.PodIP, next, old)
			seen = append(seen, p.Name+": "+why)
			all = all && ok
		}
		return all, strings.Join(seen, "; "), nil
	})
	applied := time.Since(start)
	_, ann := secretOf(t, c, ns, "i")
	until, err := time.Parse(time.RFC3339, ann["cache.example.com/previous-internal-password-until"])
	if err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, overlap+time.Minute, "the old internal password refused on every member", func() (bool, string, error) {
		var seen []string
		all := true
		for _, p := range memberPods(t, c, ns, "i") {
			refused, err := internalRefused(net.JoinHostPort(p.Status.PodIP, "6379"), old)
			seen = append(seen, fmt.Sprintf("%s refused=%v (%v)", p.Name, refused, err))
			all = all && refused
		}
		return all, strings.Join(seen, "; "), nil
	})
	refusedAt := time.Now()
	// The probes run every 5 s and a member is unready after 3 failures: 20 s past the overlap,
	// a probe still holding the old password would have made a member unready.
	framework.Eventually(t, 2*time.Minute, "20 s past the overlap, every member Ready", func() (bool, string, error) {
		return time.Since(refusedAt) > 20*time.Second, time.Since(refusedAt).String(), nil
	})
	for _, p := range memberPods(t, c, ns, "i") {
		if !framework.PodReady(&p) {
			t.Errorf("%s is not Ready after the overlap: its probes do not have the new internal password", p.Name)
		}
	}
	samples, down := links.finish()
	w.halt()
	lost := w.lost(t, rw, pw)
	// The replication links reconnect with the new password.
	for _, p := range memberPods(t, c, ns, "i") {
		if p.Labels[roleLabel] != "replica" {
			continue
		}
		ic := redis.NewClient(&redis.Options{Addr: net.JoinHostPort(p.Status.PodIP, "6379"), Username: "internal", Password: next, Protocol: 2, DisableIdentity: true})
		if err := ic.Do(ctx, "CLIENT", "KILL", "TYPE", "master").Err(); err != nil {
			t.Errorf("%s: dropping the replication link: %v", p.Name, err)
		}
		ic.Close()
		framework.Eventually(t, 30*time.Second, p.Name+" linked again with the new internal password", func() (bool, string, error) {
			ok, why := internalState(ctx, p.Status.PodIP, next, "")
			return ok, why, nil
		})
	}
	t.Logf("internal password rotated: every member had it and replicated with it %v after the annotation; overlap until %s; %d writes acknowledged, %d lost; replica links: %d samples, %d with a link down",
		applied.Round(10*time.Millisecond), until.Format(time.RFC3339), w.ackedCount(), len(lost), samples, down)
	if len(lost) != 0 {
		t.Errorf("%d acknowledged writes lost", len(lost))
	}
	if down != 0 || samples == 0 {
		t.Errorf("replication links: %d of %d samples found a link down (last: %v)", down, samples, links.last.Load())
	}
	if after := restartsByPod(memberPods(t, c, ns, "i")); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("members restarted or replaced: before %v, after %v", before, after)
	}
	if sts, err = c.Kube.AppsV1().StatefulSets(ns).Get(ctx, "i", metav1.GetOptions{}); err != nil || sts.Status.UpdateRevision != revision {
		t.Errorf("the StatefulSet's revision moved (%v): a rotation must not touch the pod template", err)
	}
}

// internalState says whether the member at ip accepts the internal password pw (and prev, when
// given) and authenticates to its primary with pw.
func internalState(ctx context.Context, ip, pw, prev string) (bool, string) {
	addr := net.JoinHostPort(ip, "6379")
	if prev != "" {
		if refused, err := internalRefused(addr, prev); refused || err != nil {
			return false, fmt.Sprintf("previous refused=%v (%v)", refused, err)
		}
	}
	cl := redis.NewClient(&redis.Options{Addr: addr, Username: "internal", Password: pw, DialTimeout: time.Second, ReadTimeout: time.Second,
		MaxRetries: -1, PoolSize: 1, Protocol: 2, DisableIdentity: true})
	defer cl.Close()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	auth, err := cl.ConfigGet(cctx, "masterauth").Result()
	if err != nil {
		return false, err.Error()
	}
	if auth["masterauth"] != pw {
		return false, "masterauth is not the new password"
	}
	info, err := cl.Info(cctx, "replication").Result()
	if err != nil {
		return false, err.Error()
	}
	if strings.Contains(info, "role:master") || strings.Contains(info, "master_link_status:up") {
		return true, "ok"
	}
	return false, "replica link down"
}

// internalRefused reports whether the server at addr refuses the internal user with pw.
func internalRefused(addr, pw string) (bool, error) {
	cl := redis.NewClient(&redis.Options{Addr: addr, Username: "internal", Password: pw, DialTimeout: time.Second, ReadTimeout: time.Second,
		MaxRetries: -1, PoolSize: 1, Protocol: 2, DisableIdentity: true})
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := cl.Ping(ctx).Err()
	if err == nil {
		return false, nil
	}
	if s := err.Error(); strings.Contains(s, "WRONGPASS") || strings.Contains(s, "NOAUTH") {
		return true, nil
	}
	return false, err
}

// editBeforeApply holds the operator's first server-side apply of one object, once armed, until
// edit (a user's write of the same object) has run, and records the apply's status.
type editBeforeApply struct {
	next   http.RoundTripper
	path   string
	armed  atomic.Bool
	edit   func()
	mu     sync.Mutex
	status []int
}

func (e *editBeforeApply) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodPatch || r.URL.Path != e.path || r.Header.Get("Content-Type") != "application/apply-patch+yaml" || !e.armed.CompareAndSwap(true, false) {
		return e.next.RoundTrip(r)
	}
	e.edit()
	resp, err := e.next.RoundTrip(r)
	e.mu.Lock()
	defer e.mu.Unlock()
	if err == nil {
		e.status = append(e.status, resp.StatusCode)
	}
	return resp, err
}

// TestSecretEditRacingAnOperatorWriteWins: a user's password edit injected between the operator's
// read of the Secret and its write (a rotation by annotation) is not overwritten: the write
// carries the resourceVersion it read and conflicts (409), and the next reconcile accepts the
// user's password as the rotation the annotation asked for.
func TestSecretEditRacingAnOperatorWriteWins(t *testing.T) {
	c := framework.Setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	ns := c.Namespace(t, "race")
	users := fmt.Sprintf("users-own-%d", time.Now().UnixNano())
	edited := make(chan struct{})
	hold := &editBeforeApply{path: "/api/v1/namespaces/" + ns + "/secrets/r-auth"}
	hold.edit = func() {
		patch := fmt.Sprintf(`{"data":{"password":%q}}`, base64.StdEncoding.EncodeToString([]byte(users)))
		if _, err := c.Kube.CoreV1().Secrets(ns).Patch(context.Background(), "r-auth", types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: "kubectl-edit"}); err != nil {
			t.Errorf("the user's edit: %v", err)
		}
		close(edited)
	}
	startInProcess(t, c, ctx, cancel, func(rt http.RoundTripper) http.RoundTripper { hold.next = rt; return hold })
	deleteCachesOnCleanup(t, c, ns)
	createCache(t, c, ns, "r", map[string]interface{}{"version": "7.2", "size": int64(1)})
	framework.Eventually(t, time.Minute, "the Secret at revision 1", func() (bool, string, error) {
		s, err := c.Kube.CoreV1().Secrets(ns).Get(ctx, "r-auth", metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		return s.Annotations["cache.example.com/password-revision"] == "1", fmt.Sprint(s.Annotations), nil
	})
	generated := password(t, c, ns, "r")

	hold.armed.Store(true)
	patch := `{"metadata":{"annotations":{"cache.example.com/rotate-password":"race-1"}}}`
	if _, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Patch(ctx, "r", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-edited:
	case <-time.After(time.Minute):
		t.Fatal("the operator did not write the Secret within a minute of the annotation")
	}
	framework.Eventually(t, time.Minute, "the Secret at revision 2 for race-1", func() (bool, string, error) {
		_, ann := secretOf(t, c, ns, "r")
		return ann["cache.example.com/password-revision"] == "2" && ann["cache.example.com/password-rotated-for"] == "race-1", fmt.Sprint(ann), nil
	})
	data, _ := secretOf(t, c, ns, "r")
	hold.mu.Lock()
	status := fmt.Sprint(hold.status)
	hold.mu.Unlock()
	t.Logf("the operator's write after the injected edit answered %s; the Secret now holds the user's password: %v", status, data["password"] == users)
	if status != "[409]" {
		t.Errorf("the operator's write after the user's edit answered %s; want [409] (a conflict: the write carries the version it read)", status)
	}
	if data["password"] != users || data["password-sha256"] != sha256Hex(users) {
		t.Errorf("the user's edit was reverted or not accepted: password is the user's %v, the generated one %v; accepted hash is the user's %v",
			data["password"] == users, data["password"] == generated, data["password-sha256"] == sha256Hex(users))
	}
	if data["previous-password-sha256"] != sha256Hex(generated) {
		t.Errorf("the previous password's hash is not the generated password's: the overlap would lock its clients out")
	}
}
