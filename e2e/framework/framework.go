// Package framework is what the end-to-end tests share: the connection to the local test cluster
// that `make test-e2e` creates (localcluster/cluster.sh), polling with deadlines, kubectl, and the
// API audit log. It is test support only; nothing in the operator imports it.
//
// The tests run only when CACHE_E2E=1 (the Makefile sets it after creating the cluster); in a plain
// `go test ./...` they skip, so unit tests never need a cluster.
package framework

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Cluster is a connection to the local test cluster.
type Cluster struct {
	// Root is the repository's root folder.
	Root string
	// Dir is the cluster's state folder (kubeconfig, audit log, PID files).
	Dir string
	// Name is the kwokctl cluster name.
	Name string
	// Kubeconfig is the path of the cluster's admin kubeconfig.
	Kubeconfig string
	// Config is the admin client configuration, with rate limits lifted for tests.
	Config *rest.Config
	// Kube is a typed client.
	Kube kubernetes.Interface
	// Dynamic is a dynamic client.
	Dynamic dynamic.Interface
}

// RepoRoot returns the repository's root folder: the nearest folder at or above the working
// directory (a test's package folder, or where `go run ./bench` started) whose go.mod is this
// module's. Source paths are not used: builds are -trimpath (see the Makefile).
func RepoRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		panic(fmt.Sprintf("framework: the working directory: %v", err))
	}
	for {
		if mod, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.HasPrefix(mod, []byte("module "+modulePath+"\n")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			panic("framework: no folder at or above the working directory holds the go.mod of " + modulePath)
		}
		dir = parent
	}
}

// modulePath is the repository's Go module.
const modulePath = "example.com/cache-operator"

// Setup connects to the test cluster, or skips the test when end-to-end tests are not enabled.
func Setup(t testing.TB) *Cluster {
	t.Helper()
	if os.Getenv("CACHE_E2E") != "1" {
		t.Skip("end-to-end test: run with `make test-e2e` (CACHE_E2E=1 and a running test cluster)")
	}
	root := RepoRoot()
	c, err := Connect(envOr("CACHE_E2E_CLUSTER_DIR", filepath.Join(root, ".cluster-test")), envOr("CACHE_E2E_CLUSTER_NAME", "cache-test"), "cache-operator-e2e")
	if err != nil {
		t.Fatalf("%v (is it running? `make test-e2e` creates it)", err)
	}
	return c
}

// Connect connects to the local cluster name whose state folder is dir, as userAgent, with the
// client's rate limits lifted (200 QPS, burst 400). The benchmark (bench/) uses it too.
func Connect(dir, name, userAgent string) (*Cluster, error) {
	c := &Cluster{Root: RepoRoot(), Dir: dir, Name: name}
	c.Kubeconfig = filepath.Join(c.Dir, "kubeconfig")
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading the cluster's kubeconfig %s: %w", c.Kubeconfig, err)
	}
	// The certificates inline, not by path: client-go shares one transport per set of TLS file
	// paths, and a cluster made anew at the same folder has new certificates there.
	if err := rest.LoadTLSFiles(cfg); err != nil {
		return nil, fmt.Errorf("reading the cluster's certificates: %w", err)
	}
	cfg.CAFile, cfg.CertFile, cfg.KeyFile = "", "", ""
	cfg.QPS, cfg.Burst = 200, 400
	cfg.UserAgent = userAgent
	c.Config = cfg
	if c.Kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if c.Dynamic, err = dynamic.NewForConfig(cfg); err != nil {
		return nil, err
	}
	return c, nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// Bin returns the path of a binary built by `make cluster-bin`.
func (c *Cluster) Bin(name string) string { return filepath.Join(c.Root, "bin", "cluster", name) }

// KubectlCmd returns a kubectl command against the test cluster. It has a discovery cache of its
// own: a recreated cluster may reuse a port, and a shared cache would answer with the previous
// cluster's API versions.
func (c *Cluster) KubectlCmd(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, c.Bin("kubectl"), append([]string{"--kubeconfig", c.Kubeconfig,
		"--cache-dir", filepath.Join(c.Dir, "kubectl-cache")}, args...)...)
}

// Kubectl runs the cluster's kubectl against the test cluster and returns its combined output.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := c.KubectlCmd(ctx, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

// MemberNetworks is the operator's --member-networks in tests: the real nodes' pod range. The
// KWOK nodes' pods have addresses that lead nowhere (and outside the ranges tests may target), so
// the operator never dials them; their caches are not observed.
const MemberNetworks = "198.18.0.0/15"

// MemberIPNets is MemberNetworks parsed, for an operator wired in-process.
func MemberIPNets() []*net.IPNet {
	_, n, err := net.ParseCIDR(MemberNetworks)
	if err != nil {
		panic(err)
	}
	return []*net.IPNet{n}
}

// KwokNamespaceAnnotations are the placement annotations of a namespace whose pods run on the KWOK nodes (see
// localcluster/kwok-namespace.yaml): the API server's PodNodeSelector and PodTolerationRestriction
// admission plugins add the node selector and the toleration of the KWOK taint to every pod.
var KwokNamespaceAnnotations = map[string]string{
	"scheduler.alpha.kubernetes.io/node-selector":      "type=kwok",
	"scheduler.alpha.kubernetes.io/defaultTolerations": `[{"key":"kwok.x-k8s.io/node","operator":"Equal","value":"fake","effect":"NoSchedule"}]`,
}

// Namespace creates a namespace whose pods run on the KWOK nodes (simulated, Ready at once), with a
// random suffix, and deletes it when the test ends. Tests of the control plane use it; anything
// about Redis itself needs RealNamespace.
func (c *Cluster) Namespace(t testing.TB, prefix string) string {
	t.Helper()
	return c.namespace(t, prefix, KwokNamespaceAnnotations)
}

// RealNamespace creates a namespace whose pods run on the real nodes (localcluster/node: processes under
// runc), with a random suffix, and deletes it when the test ends.
func (c *Cluster) RealNamespace(t testing.TB, prefix string) string {
	t.Helper()
	return c.namespace(t, prefix, nil)
}

func (c *Cluster) namespace(t testing.TB, prefix string, annotations map[string]string) string {
	t.Helper()
	name := prefix + "-" + rand.String(5)
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}}
	if _, err := c.Kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		err := c.Kube.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Logf("deleting namespace %s: %v", name, err)
		}
	})
	c.WaitDefaultServiceAccount(t, name)
	return name
}

// WaitDefaultServiceAccount waits until the controller manager has made the namespace's default
// ServiceAccount: until then the API server refuses pods in it (the admission plugin looks it up).
func (c *Cluster) WaitDefaultServiceAccount(t testing.TB, ns string) {
	t.Helper()
	Eventually(t, 30*time.Second, "the default ServiceAccount of namespace "+ns, func() (bool, string, error) {
		_, err := c.Kube.CoreV1().ServiceAccounts(ns).Get(context.Background(), "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, "not found", nil
		}
		return err == nil, "found", err
	})
}

// Eventually polls cond every interval until it reports done or the timeout passes. cond returns
// whether it is done and a description of what it saw; on timeout the test fails with that
// description (and the last error), so a failure says what state the cluster was in.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() (done bool, seen string, err error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	interval := 100 * time.Millisecond
	var seen string
	var err error
	for {
		var done bool
		done, seen, err = cond()
		if done && err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; last seen: %s; last error: %v", timeout, what, seen, err)
		}
		time.Sleep(interval)
		if interval < time.Second {
			interval *= 2
		}
	}
}

// ApplyServerSide applies the YAML doc with `kubectl apply --server-side` as field manager
// "user", as a person would.
func (c *Cluster) ApplyServerSide(ctx context.Context, doc string) error {
	cmd := c.KubectlCmd(ctx, "apply", "--server-side", "--field-manager=user", "-f", "-")
	cmd.Stdin = strings.NewReader(doc)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("kubectl apply --server-side: %w: %s", err, out)
	}
	return nil
}

// BuildOperator builds bin/cache-operator as make build does: static (no cgo), so that it runs on
// the image cache-operator's empty root on the real nodes, and -trimpath, so that it shares the
// Go build cache with make. It returns the binary's path.
func BuildOperator() (string, error) {
	root := RepoRoot()
	binary := filepath.Join(root, "bin", "cache-operator")
	build := exec.Command("go", "build", "-trimpath", "-o", binary, ".")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the operator: %v\n%s", err, out)
	}
	return binary, nil
}
