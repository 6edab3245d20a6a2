package framework

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RestartComponent stops one control-plane component of the test cluster (etcd or
// kube-apiserver, ...) with SIGTERM, waits for it to exit, and starts it again through kwokctl
// (which starts the components that are not running), then waits until the API server is ready.
// It returns how long the API was unavailable to this process's checks.
func (c *Cluster) RestartComponent(t testing.TB, component string) time.Duration {
	t.Helper()
	proc, pid, err := c.componentProcess(component)
	if err != nil {
		t.Fatalf("restarting %s: %v", component, err)
	}
	defer proc.Release()
	start := time.Now()
	if err := proc.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("stopping %s (PID %d): %v", component, pid, err)
	}
	// A graceful stop: the local cluster's API server closes its watches within 5 s
	// (shutdown-watch-termination-grace-period; without it, it waited out its 60 s HTTP
	// shutdown timeout). After 30 s the restart becomes a hard one (SIGKILL), as a kubelet's
	// does after the grace period.
	deadline := time.Now().Add(30 * time.Second)
	for alive(proc) {
		if time.Now().After(deadline) {
			t.Logf("%s (PID %d) still running 30 s after SIGTERM; SIGKILL", component, pid)
			_ = proc.Signal(syscall.SIGKILL)
			Eventually(t, 30*time.Second, component+" to exit after SIGKILL", func() (bool, string, error) {
				return !alive(proc), fmt.Sprintf("PID %d", pid), nil
			})
			break
		}
		time.Sleep(100 * time.Millisecond) // polling the process's exit, with a deadline
	}
	c.startControlPlane(t)
	took := time.Since(start)
	// The controller-manager and the scheduler exit when they cannot renew their leases while
	// the API is away; a kubelet would restart their static pods. Watch them for twice their
	// renew deadline (10 s) and start whichever exits.
	deadline = time.Now().Add(25 * time.Second)
	for time.Now().Before(deadline) {
		c.EnsureControlPlane(t)
		time.Sleep(time.Second) // a supervisor's check interval, bounded by the deadline above
	}
	return took
}

// EnsureControlPlane starts again any control-plane component of the test cluster whose process
// is gone (as a kubelet restarts a static pod), and waits for the API server to be ready.
func (c *Cluster) EnsureControlPlane(t testing.TB) {
	t.Helper()
	if dead := c.stoppedComponents(); len(dead) > 0 {
		t.Logf("control-plane components not running: %v; starting them", dead)
		c.startControlPlane(t)
	}
	c.waitLeaders(t)
}

// waitLeaders waits until kube-controller-manager and kube-scheduler lead: each one's lease was
// renewed after its running process started. A component that restarted waits out the lease of
// the process it replaced (15 s by default) before it acts: until then no Service endpoint
// changes and no pod is scheduled, which a test's next step must not take for the system's own
// slowness.
func (c *Cluster) waitLeaders(t testing.TB) {
	t.Helper()
	start := time.Now()
	for _, component := range []string{"kube-controller-manager", "kube-scheduler"} {
		b, err := os.ReadFile(filepath.Join(c.Dir, "kwok", "clusters", c.Name, "pids", component+".pid"))
		if err != nil {
			continue // not a component of this cluster
		}
		began, ok := processStart(strings.TrimSpace(string(b)))
		if !ok {
			continue
		}
		Eventually(t, 90*time.Second, component+" to lead (its lease renewed by the running process)", func() (bool, string, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			l, err := c.Kube.CoordinationV1().Leases("kube-system").Get(ctx, component, metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			if l.Spec.RenewTime == nil {
				return false, "lease never renewed", nil
			}
			renewed := l.Spec.RenewTime.Time
			return renewed.After(began), fmt.Sprintf("renewed %s, process started %s", renewed.Format(time.StampMilli), began.Format(time.StampMilli)), nil
		})
	}
	if d := time.Since(start); d > time.Second {
		t.Logf("waited %v for the control plane's leaders", d.Round(100*time.Millisecond))
	}
}

// stoppedComponents names the control-plane components whose process is gone (or a zombie).
func (c *Cluster) stoppedComponents() []string {
	pids, _ := filepath.Glob(filepath.Join(c.Dir, "kwok", "clusters", c.Name, "pids", "*.pid"))
	var dead []string
	for _, f := range pids {
		b, err := os.ReadFile(f)
		pid, perr := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || perr != nil || !running(pid) {
			dead = append(dead, strings.TrimSuffix(filepath.Base(f), ".pid"))
		}
	}
	return dead
}

// startControlPlane starts the components that are not running (kwokctl start cluster) until
// every one runs and the API server is ready. kwokctl takes a component whose process has exited
// but not yet been reaped for a running one, so it is asked again while one is missing.
func (c *Cluster) startControlPlane(t testing.TB) {
	t.Helper()
	start := func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(c.Root, "bin", "cluster", "kwokctl"), "start", "cluster", "--name", c.Name)
		cmd.Env = append(os.Environ(), "KWOK_WORKDIR="+filepath.Join(c.Dir, "kwok"))
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Sprintf("kwokctl start cluster: %v: %s", err, out)
		}
		return ""
	}
	failed := start()
	Eventually(t, 90*time.Second, "every control-plane component running and the API server ready", func() (bool, string, error) {
		if dead := c.stoppedComponents(); len(dead) > 0 {
			failed = start()
			return false, fmt.Sprintf("not running: %v %s", dead, failed), nil
		}
		rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer rcancel()
		body, err := c.Kube.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(rctx)
		return err == nil && string(body) == "ok", fmt.Sprintf("readyz %q %v %s", body, err, failed), nil
	})
}

// processStart is when process pid started: its start time in clock ticks after boot
// (/proc/<pid>/stat, field 22; USER_HZ is 100 on Linux) plus the boot time (/proc/stat btime).
func processStart(pid string) (time.Time, bool) {
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return time.Time{}, false
	}
	s := string(stat)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // fields from the state on (field 3)
	if len(fields) < 20 {
		return time.Time{}, false
	}
	ticks, err := strconv.ParseInt(fields[19], 10, 64) // field 22
	if err != nil {
		return time.Time{}, false
	}
	boot, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}, false
	}
	for _, line := range strings.Split(string(boot), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			btime, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return time.Time{}, false
			}
			return time.Unix(btime, 0).Add(time.Duration(ticks) * 10 * time.Millisecond), true
		}
	}
	return time.Time{}, false
}

// componentProcess returns a handle on the process of a control-plane component, from kwokctl's
// PID file: a pidfd (os.FindProcess takes one on Linux), which keeps naming that process even if
// its PID is reused, taken before the process's command line is checked to be the component's
// binary of this cluster. Signals go through the handle, so they cannot reach another process.
func (c *Cluster) componentProcess(component string) (*os.Process, int, error) {
	pidFile := filepath.Join(c.Dir, "kwok", "clusters", c.Name, "pids", component+".pid")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return nil, 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, 0, fmt.Errorf("pid file %s: %w", pidFile, err)
	}
	proc, err := os.FindProcess(pid)
	if err != nil {
		return nil, pid, err
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	bin := filepath.Join(c.Dir, "kwok", "clusters", c.Name, "bin", component)
	if err != nil || !alive(proc) || !strings.HasPrefix(string(cmdline), bin+"\x00") {
		proc.Release()
		return nil, pid, fmt.Errorf("PID %d (from %s) is not %s of this cluster: not signalling it", pid, pidFile, bin)
	}
	return proc, pid, nil
}

// alive reports whether the process behind a handle has not exited.
func alive(p *os.Process) bool {
	return !errors.Is(p.Signal(syscall.Signal(0)), os.ErrProcessDone)
}

// running reports whether the process pid exists and is not a zombie.
func running(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses: "pid (comm) S ...".
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
