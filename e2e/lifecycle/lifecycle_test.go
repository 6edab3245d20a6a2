// Package lifecycle tests that the local cluster's scripts are safe to repeat and clean up after
// themselves. It deletes the test cluster, so `make test-e2e` runs it last and on its own
// (CACHE_E2E_LIFECYCLE=1); otherwise it skips.
package lifecycle

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"example.com/cache-operator/e2e/framework"
)

// clusterProcesses returns "pid cmdline" of every running process of the test cluster: started
// from bin/cluster/ (or from the copies kwokctl keeps in the cluster's folder) with the cluster's
// folder on its command line. A development cluster started by `make up` is not counted.
func clusterProcesses(t *testing.T, c *framework.Cluster) []string {
	t.Helper()
	prefix := filepath.Join(c.Root, "bin", "cluster") + "/"
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatalf("reading /proc: %v", err)
	}
	var found []string
	for _, e := range entries {
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(raw) == 0 {
			continue
		}
		cmdline := strings.ReplaceAll(strings.TrimRight(string(raw), "\x00"), "\x00", " ")
		fromOurs := strings.HasPrefix(cmdline, prefix) || strings.HasPrefix(cmdline, c.Dir+"/")
		if fromOurs && strings.Contains(cmdline, c.Dir+"/") {
			found = append(found, e.Name()+" "+cmdline)
		}
	}
	return found
}

func runScript(t *testing.T, c *framework.Cluster, arg string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(c.Root, "hack", "cluster", "cluster.sh"), arg)
	cmd.Env = append(os.Environ(), "CLUSTER_NAME="+c.Name, "CLUSTER_DIR="+c.Dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cluster.sh %s: %v\n%s", arg, err, out)
	}
	return string(out)
}

func TestClusterLifecycle(t *testing.T) {
	if os.Getenv("CACHE_E2E_LIFECYCLE") != "1" {
		t.Skip("deletes the test cluster: run by `make test-e2e` after every other end-to-end test")
	}
	c := framework.Setup(t)
	ctx := context.Background()
	before := clusterProcesses(t, c)
	if len(before) < 6 {
		t.Fatalf("expected the running cluster's processes (etcd, apiserver, controller-manager, scheduler, kwok, provisioner), found %d: %v", len(before), before)
	}
	if _, err := c.Kubectl(ctx, "create", "namespace", "survives-rerun"); err != nil {
		t.Fatal(err)
	}

	// A second `up` on a running cluster is harmless: same processes, same data.
	out := runScript(t, c, "up")
	t.Logf("second up:\n%s", out)
	after := clusterProcesses(t, c)
	if strings.Join(before, "\n") != strings.Join(after, "\n") {
		t.Fatalf("a second up changed the cluster's processes:\nbefore:\n%s\nafter:\n%s", strings.Join(before, "\n"), strings.Join(after, "\n"))
	}
	if _, err := c.Kubectl(ctx, "get", "namespace", "survives-rerun"); err != nil {
		t.Fatalf("data lost by a second up: %v", err)
	}

	// down leaves no process and no files behind.
	out = runScript(t, c, "down")
	t.Logf("down:\n%s", out)
	if left := clusterProcesses(t, c); len(left) > 0 {
		t.Fatalf("processes left after down:\n%s", strings.Join(left, "\n"))
	}
	if _, err := os.Stat(c.Dir); !os.IsNotExist(err) {
		t.Fatalf("cluster folder %s still exists after down (stat: %v)", c.Dir, err)
	}
}
