// Package operator holds the end-to-end tests of cache-operator: the operator binary runs as a
// separate process against the local test cluster, and the tests check what a user would see
// with kubectl, plus the audit log for the writes the operator made.
package operator

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/redis/go-redis/v9"

	"example.com/cache-operator/e2e/framework"
	"example.com/cache-operator/engine/conversion"
	"example.com/cache-operator/engine/render"
)

var (
	mcGVR   = schema.GroupVersionResource{Group: "cache.example.com", Version: "v1", Resource: "managedcaches"}
	mcV2GVR = schema.GroupVersionResource{Group: "cache.example.com", Version: "v2", Resource: "managedcaches"}
	binary  string
)

func TestMain(m *testing.M) {
	if os.Getenv("CACHE_E2E") == "1" {
		root := framework.RepoRoot()
		var err error
		if binary, err = framework.BuildOperator(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		kubectl := exec.Command(filepath.Join(root, "bin", "cluster", "kubectl"), "--kubeconfig",
			filepath.Join(os.Getenv("CACHE_E2E_CLUSTER_DIR"), "kubeconfig"), "apply", "--server-side", "--force-conflicts", "-k", filepath.Join(root, "crd"))
		if out, err := kubectl.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "installing the CRD: %v\n%s", err, out)
			os.Exit(1)
		}
		ns := exec.Command(filepath.Join(root, "bin", "cluster", "kubectl"), "--kubeconfig",
			filepath.Join(os.Getenv("CACHE_E2E_CLUSTER_DIR"), "kubeconfig"), "create", "namespace", "cache-operator-system")
		if out, err := ns.CombinedOutput(); err != nil && !strings.Contains(string(out), "AlreadyExists") {
			fmt.Fprintf(os.Stderr, "creating the operator's namespace: %v\n%s", err, out)
			os.Exit(1)
		}
	}
	code := m.Run()
	stopSharedWebhooks()
	os.Exit(code)
}

// operatorSeq numbers the operator processes, one log file each.
var operatorSeq atomic.Int64

// operator is a running cache-operator process.
type operator struct {
	t           *testing.T
	cmd         *exec.Cmd
	log         string
	webhookAddr string // where it serves its webhooks
	mu          sync.Mutex
}

// startOperator runs the operator against the test cluster until the test ends. Confined to a
// namespace (--watch-namespace among args) it serves no webhooks (parallel_test.go).
func startOperator(t *testing.T, c *framework.Cluster, args ...string) *operator {
	t.Helper()
	confined := false
	for _, a := range args {
		confined = confined || strings.HasPrefix(a, "--watch-namespace=")
	}
	if _, side := parallelTests.Load(t.Name()); side && !confined {
		// An operator that serves webhooks registers itself as the CRD's conversion webhook and
		// takes it away when it stops: every test beside it then fails to read v1 objects.
		t.Fatal("a test that runs side by side must confine its operator: startOperator(t, c, confined(t, c, ns)...)")
	}
	op, err := launch(c, strings.ReplaceAll(t.Name(), "/", "_"), !confined, args...)
	if err != nil {
		t.Fatal(err)
	}
	op.t = t
	t.Cleanup(func() { op.stop(syscall.SIGTERM) })
	return op
}

// launch starts an operator process, logging to operator-NAME-SEQ.log in the cluster's folder,
// and returns once it serves: its webhooks, or, without webhooks, its readiness probe.
func launch(c *framework.Cluster, name string, webhooks bool, args ...string) (*operator, error) {
	logPath := filepath.Join(c.Dir, fmt.Sprintf("operator-%s-%d.log", name, operatorSeq.Add(1)))
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	givenHealth := ""
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--health-probe-bind-address="); ok {
			givenHealth = v
		}
	}
	// Each process serves its webhooks on a port of its own (a `make up` operator may hold 9443
	// on this machine) and registers that address; metrics and probes on free ports unless args
	// say otherwise (a later flag wins), since a server that cannot listen ends the operator. A
	// process without webhooks (confined to a namespace) is polled on its readiness probe.
	// The port is found free and then given to the operator, so another process can take it in
	// between (an outgoing connection's ephemeral port: after a whole cluster restart, in one
	// campaign run): an operator that exits on that is started again on another port.
	for attempt := 1; ; attempt++ {
		addr, err := listenable()
		if err != nil {
			return nil, err
		}
		_, port, _ := net.SplitHostPort(addr)
		base := []string{"--kubeconfig", c.Kubeconfig, "-v=3", "--member-networks=" + framework.MemberNetworks,
			"--metrics-bind-address=127.0.0.1:0"}
		served := func() error { _, err := servedSerial(addr); return err }
		if !webhooks {
			health := givenHealth
			if health == "" {
				health = addr
			}
			base = append(base, "--webhook-port=0", "--health-probe-bind-address="+health)
			served = func() error { return healthy(health) }
		} else {
			base = append(base, "--webhook-port="+port, "--health-probe-bind-address=127.0.0.1:0")
		}
		// This attempt's lines start here: an earlier attempt's "address already in use" is not
		// this one's (read whole, the log made every attempt after a collision look taken at once,
		// and the third failed: seen in a full run).
		from, _ := f.Seek(0, io.SeekEnd)
		cmd := exec.Command(binary, append(base, args...)...)
		cmd.Stdout, cmd.Stderr = f, f
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("starting the operator: %w", err)
		}
		op := &operator{cmd: cmd, log: logPath, webhookAddr: addr}
		// It registers its webhooks before it listens: once it answers TLS, the API server can use it.
		taken := false
		for deadline := time.Now().Add(30 * time.Second); !taken && time.Now().Before(deadline); {
			if err = served(); err == nil {
				return op, nil
			}
			logged, _ := os.ReadFile(logPath)
			if taken = bytes.Contains(logged[min(from, int64(len(logged))):], []byte("bind: address already in use")); !taken {
				time.Sleep(100 * time.Millisecond) // polling its port, with the deadline above
			}
		}
		op.stop(syscall.SIGKILL)
		if !taken || attempt == 3 {
			return nil, fmt.Errorf("the operator did not serve on %s (attempt %d, port taken: %v): %v; its log: %s", addr, attempt, taken, err, logPath)
		}
		fmt.Fprintf(f, "e2e: the operator could not listen on %s (taken since it was found free); starting it again on another port\n", addr)
	}
}

// listenable returns a loopback address that was free a moment ago.
func listenable() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// healthy reports whether the operator's /readyz at addr answers 200.
func healthy(addr string) error {
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: %s", resp.Status)
	}
	return nil
}

// stop signals the operator and waits for it to exit.
func (o *operator) stop(sig syscall.Signal) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cmd == nil {
		return
	}
	_ = o.cmd.Process.Signal(sig)
	_ = o.cmd.Wait()
	o.cmd = nil
}

// resume continues a paused (SIGSTOP) operator that has lost its lease and waits up to timeout
// for it to exit on its own; it returns how it exited.
func (o *operator) resume(timeout time.Duration) error {
	o.t.Helper()
	if err := o.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		o.t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- o.cmd.Wait() }()
	select {
	case err := <-exited:
		o.mu.Lock()
		o.cmd = nil
		o.mu.Unlock()
		return err
	case <-time.After(timeout):
		o.t.Fatalf("the resumed operator still runs %v after it lost the lease", timeout)
		return nil
	}
}

// reconciles counts the operator's "Reconciled" log lines for the cache ns/name.
func (o *operator) reconciles(ns, name string) int {
	b, _ := os.ReadFile(o.log)
	return bytes.Count(b, []byte(fmt.Sprintf(`"Reconciled" managedcache="%s/%s"`, ns, name)))
}

// waitReconciled waits until the operator logged more than n reconciles of ns/name.
func (o *operator) waitReconciled(ns, name string, n int) {
	o.t.Helper()
	framework.Eventually(o.t, 30*time.Second, "a reconcile of "+ns+"/"+name, func() (bool, string, error) {
		got := o.reconciles(ns, name)
		return got > n, fmt.Sprintf("%d reconciles logged", got), nil
	})
}

func cacheObject(ns, name string, spec map[string]interface{}) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "cache.example.com/v1", "kind": "ManagedCache",
		"metadata": map[string]interface{}{"name": name, "namespace": ns},
		"spec":     spec,
	}}
}

// createCache creates a cache from a v1 spec. It is sent as v2, the stored version (converted here
// with the operator's own conversion), so that it needs no webhook and works with no operator up.
func createCache(t *testing.T, c *framework.Cluster, ns, name string, spec map[string]interface{}) {
	t.Helper()
	v2, err := conversion.ToV2(cacheObject(ns, name, spec).Object)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Create(context.Background(), &unstructured.Unstructured{Object: v2}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating ManagedCache %s/%s: %v", ns, name, err)
	}
}

// readyReason returns the Ready condition's status and reason.
func readyReason(mc *unstructured.Unstructured) (string, string, string) {
	conds, _, _ := unstructured.NestedSlice(mc.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]interface{})
		if m["type"] == "Ready" {
			return fmt.Sprint(m["status"]), fmt.Sprint(m["reason"]), fmt.Sprint(m["message"])
		}
	}
	return "", "", ""
}

// waitReady waits until the cache is Ready with want ready replicas.
func waitReady(t *testing.T, c *framework.Cluster, ns, name string, want int64, timeout time.Duration) *unstructured.Unstructured {
	t.Helper()
	var mc *unstructured.Unstructured
	framework.Eventually(t, timeout, fmt.Sprintf("%s/%s Ready with %d replicas", ns, name, want), func() (bool, string, error) {
		var err error
		mc, err = c.Dynamic.Resource(mcGVR).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		status, reason, msg := readyReason(mc)
		ready, _, _ := unstructured.NestedInt64(mc.Object, "status", "readyReplicas")
		observed, _, _ := unstructured.NestedInt64(mc.Object, "status", "observedGeneration")
		return status == "True" && ready == want && observed == mc.GetGeneration(),
			fmt.Sprintf("Ready=%s reason=%s message=%q readyReplicas=%d", status, reason, msg, ready), nil
	})
	return mc
}

// child is one of a cache's children.
type child struct {
	gvr  schema.GroupVersionResource
	name func(cache string) string
	// count is how many of the kind a cache has (Services: headless, read-write, read-only).
	count int
}

var children = map[string]child{
	"Secret":              {schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, func(n string) string { return n + "-auth" }, 1},
	"ConfigMap":           {schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, func(n string) string { return n + "-config" }, 1},
	"Service":             {schema.GroupVersionResource{Version: "v1", Resource: "services"}, func(n string) string { return n }, 3},
	"StatefulSet":         {schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}, func(n string) string { return n }, 1},
	"PodDisruptionBudget": {schema.GroupVersionResource{Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"}, func(n string) string { return n }, 1},
}

func getChild(c *framework.Cluster, kind, ns, cache string) (*unstructured.Unstructured, error) {
	ch := children[kind]
	return c.Dynamic.Resource(ch.gvr).Namespace(ns).Get(context.Background(), ch.name(cache), metav1.GetOptions{})
}

// resourceVersions returns kind=resourceVersion of the cache and its children.
func resourceVersions(t *testing.T, c *framework.Cluster, ns, cache string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for kind := range children {
		obj, err := getChild(c, kind, ns, cache)
		if err != nil {
			t.Fatalf("%s of %s/%s: %v", kind, ns, cache, err)
		}
		out[kind] = obj.GetResourceVersion()
	}
	mc, err := c.Dynamic.Resource(mcGVR).Namespace(ns).Get(context.Background(), cache, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out["ManagedCache"] = mc.GetResourceVersion()
	return out
}

func password(t *testing.T, c *framework.Cluster, ns, cache string) string {
	t.Helper()
	s, err := getChild(c, "Secret", ns, cache)
	if err != nil {
		t.Fatalf("password Secret of %s/%s: %v", ns, cache, err)
	}
	enc, _, _ := unstructured.NestedString(s.Object, "data", "password")
	dec, err := base64.StdEncoding.DecodeString(enc)
	if err != nil || len(dec) < 32 {
		t.Fatalf("password of %s/%s is not a generated password (%d bytes, err %v)", ns, cache, len(dec), err)
	}
	return string(dec)
}

// internalPassword returns the internal user's password from a cache's Secret.
func internalPassword(t *testing.T, c *framework.Cluster, ns, cache string) string {
	t.Helper()
	s, err := getChild(c, "Secret", ns, cache)
	if err != nil {
		t.Fatalf("password Secret of %s/%s: %v", ns, cache, err)
	}
	enc, _, _ := unstructured.NestedString(s.Object, "data", "internal-password")
	dec, err := base64.StdEncoding.DecodeString(enc)
	if err != nil || len(dec) != 64 {
		t.Fatalf("internal password of %s/%s is not a generated password (%d bytes, err %v)", ns, cache, len(dec), err)
	}
	return string(dec)
}

// operatorWrites returns the mutating requests an operator (user agent cache-operator/IDENTITY;
// the tests' own client is cache-operator-e2e) made in namespace ns since the time since, from
// the audit log.
func operatorWrites(t *testing.T, c *framework.Cluster, ns string, since time.Time) []string {
	t.Helper()
	events, err := c.AuditEvents()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range events {
		if !strings.HasPrefix(ev.UserAgent, "cache-operator/") || ev.ObjectRef == nil || ev.ObjectRef.Namespace != ns ||
			ev.RequestReceivedTimestamp.Before(since) {
			continue
		}
		out = append(out, fmt.Sprintf("%s %s/%s %s", ev.Verb, ev.ObjectRef.Resource, ev.ObjectRef.Subresource, ev.ObjectRef.Name))
	}
	return out
}

func isGone(c *framework.Cluster, gvr schema.GroupVersionResource, ns, name string) (bool, error) {
	_, err := c.Dynamic.Resource(gvr).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	return false, err
}

// deleteCachesOnCleanup deletes every ManagedCache in ns when the test ends (through v2, the
// stored version, so that no operator needs to run), and waits until they are gone.
func deleteCachesOnCleanup(t *testing.T, c *framework.Cluster, ns string) {
	t.Cleanup(func() {
		ctx := context.Background()
		ri := c.Dynamic.Resource(mcV2GVR).Namespace(ns)
		if err := ri.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			t.Errorf("deleting the caches of %s: %v", ns, err)
			return
		}
		framework.Eventually(t, time.Minute, "the caches of "+ns+" to be deleted", func() (bool, string, error) {
			l, err := ri.List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, "", err
			}
			return len(l.Items) == 0, fmt.Sprintf("%d left", len(l.Items)), nil
		})
	})
}

// dumpMembersOnFailure logs, if the test failed, what each member of the cache shows: its role
// label, restarts, the last lines of its current and previous container's log and its data
// directory. Register it after deleteCachesOnCleanup: cleanups run last first.
func dumpMembersOnFailure(t *testing.T, c *framework.Cluster, ns, cache string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		pods, err := c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + cache})
		if err != nil {
			t.Logf("members of %s/%s: %v", ns, cache, err)
			return
		}
		for _, p := range pods.Items {
			restarts := int32(0)
			for _, cs := range p.Status.ContainerStatuses {
				restarts += cs.RestartCount
			}
			t.Logf("member %s: role label %q, IP %s, node %s, %d restarts", p.Name, p.Labels["cache.example.com/role"], p.Status.PodIP, p.Spec.NodeName, restarts)
			for _, args := range [][]string{
				{"logs", "-n", ns, p.Name, "-c", "redis", "--tail", "15"},
				{"logs", "-n", ns, p.Name, "-c", "redis", "--tail", "15", "--previous"},
				{"exec", "-n", ns, p.Name, "-c", "redis", "--", "ls", "-la", "/data", "/data/appendonlydir"},
			} {
				out, err := c.Kubectl(ctx, args...)
				t.Logf("member %s: kubectl %s (%v):\n%s", p.Name, strings.Join(args[:1], " "), err, out)
			}
		}
	})
}

var netDialer = net.Dialer{Timeout: 5 * time.Second}

const sigterm = syscall.SIGTERM

// parseLeaf parses the first PEM certificate.
func parseLeaf(b []byte) (*x509.Certificate, []byte, bool) {
	blk, rest := pem.Decode(b)
	if blk == nil {
		return nil, nil, false
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	return cert, rest, err == nil
}

func readFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	return string(b), err
}

// internalClient is a client of the member at ip as the internal user (the operator's: INFO, ROLE,
// CONFIG, REPLICAOF, CLIENT KILL, ACL SETUSER, and no key).
func internalClient(t *testing.T, c *framework.Cluster, ns, cache, ip string) *redis.Client {
	t.Helper()
	return redis.NewClient(&redis.Options{Addr: net.JoinHostPort(ip, "6379"), Username: "internal", Password: internalPassword(t, c, ns, cache),
		DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: time.Second, MaxRetries: -1, PoolSize: 1, Protocol: 2, DisableIdentity: true})
}

// testAdminUser is a user with every permission that a test makes on a member for what neither
// the clients' user nor the internal user may do (CLIENT LIST, MONITOR): the internal user makes
// it (ACL SETUSER), and it lasts until the member's server restarts.
const testAdminUser = "e2e-admin"

// adminOn makes the test's admin user on the member at ip and returns its password.
func adminOn(t *testing.T, c *framework.Cluster, ns, cache, ip string) string {
	t.Helper()
	pw := render.PasswordHash("e2e-admin:" + internalPassword(t, c, ns, cache))
	ic := internalClient(t, c, ns, cache, ip)
	defer ic.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := ic.Do(ctx, "ACL", "SETUSER", testAdminUser, "on", "resetpass", ">"+pw, "~*", "&*", "+@all").Err(); err != nil {
		t.Fatalf("making the test's admin user on %s: %v", ip, err)
	}
	return pw
}

// adminClient is a client of the member at ip as the test's admin user (adminOn).
func adminClient(t *testing.T, c *framework.Cluster, ns, cache, ip string) *redis.Client {
	t.Helper()
	pw := adminOn(t, c, ns, cache, ip)
	return redis.NewClient(&redis.Options{Addr: net.JoinHostPort(ip, "6379"), Username: testAdminUser, Password: pw,
		DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: time.Second, MaxRetries: -1, PoolSize: 1, Protocol: 2, DisableIdentity: true})
}
