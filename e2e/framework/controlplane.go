package framework

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// RestartComponent stops one control-plane component of the test cluster (etcd or
// kube-apiserver, ...) with SIGTERM, waits for it to exit, and starts it again through kwokctl
// (which starts the components that are not running), then waits until the API server is ready.
// It returns how long the API was unavailable to this process's checks.
func (c *Cluster) RestartComponent(t testing.TB, component string) time.Duration {
	t.Helper()
	work := filepath.Join(c.Dir, "kwok")
	pidFile := filepath.Join(work, "clusters", c.Name, "pids", component+".pid")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("restarting %s: %v", component, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("restarting %s: pid file %s: %v", component, pidFile, err)
	}
	start := time.Now()
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatalf("stopping %s (PID %d): %v", component, pid, err)
	}
	Eventually(t, 30*time.Second, component+" to exit", func() (bool, string, error) {
		err := syscall.Kill(pid, 0)
		return err != nil, fmt.Sprintf("PID %d: %v", pid, err), nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(c.Root, "bin", "cluster", "kwokctl"), "start", "cluster", "--name", c.Name)
	cmd.Env = append(os.Environ(), "KWOK_WORKDIR="+work)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("starting %s again: %v\n%s", component, err, out)
	}
	Eventually(t, time.Minute, "the API server ready after restarting "+component, func() (bool, string, error) {
		rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer rcancel()
		body, err := c.Kube.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(rctx)
		return err == nil && string(body) == "ok", string(body), nil
	})
	return time.Since(start)
}
