package hack

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// pidsSh runs script with hack/pids.sh sourced and returns its output.
func pidsSh(t *testing.T, script string) string {
	t.Helper()
	out, err := exec.Command("bash", "-c", "set -euo pipefail; . ./pids.sh; "+script).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", script, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestPIDFilesNeverSignalAReusedPID: a PID file records the start time with the PID; a file whose
// PID now belongs to a process started at another time (a reused PID: simulated by a wrong start
// time) is not alive and is not signalled; a bare PID (an older file) is trusted only when the
// process's command line names what pid_trust says.
func TestPIDFilesNeverSignalAReusedPID(t *testing.T) {
	victim := exec.Command("sleep", "60")
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = victim.Process.Kill(); _, _ = victim.Process.Wait() }()
	pid := victim.Process.Pid
	dir := t.TempDir()
	good, reused, bare := filepath.Join(dir, "good.pid"), filepath.Join(dir, "reused.pid"), filepath.Join(dir, "bare.pid")
	pidsSh(t, fmt.Sprintf("write_pid %s %d", good, pid))
	if got := pidsSh(t, "pid_of "+good); got != fmt.Sprint(pid) {
		t.Fatalf("pid_of a file just written: %q, want %d", got, pid)
	}
	if err := os.WriteFile(reused, []byte(fmt.Sprintf("%d 1\n", pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bare, []byte(fmt.Sprintf("%d\n", pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := pidsSh(t, "pid_of "+reused+"; pid_alive "+reused+" && echo alive || true"); got != "" {
		t.Errorf("a PID with another start time: %q, want nothing", got)
	}
	if got := pidsSh(t, "pid_of "+bare); got != "" {
		t.Errorf("a bare PID with nothing trusted: %q, want nothing", got)
	}
	if got := pidsSh(t, "pid_trust=(sleep); pid_of "+bare); got != fmt.Sprint(pid) {
		t.Errorf("a bare PID whose command line is trusted: %q, want %d", got, pid)
	}
	pidsSh(t, "pid_kill "+reused+" KILL; pid_kill "+bare+" KILL")
	if err := victim.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the process of a reused or untrusted PID file was killed: %v", err)
	}
	pidsSh(t, "pid_kill "+good+" KILL")
	done := make(chan error, 1)
	go func() { _, err := victim.Process.Wait(); done <- err }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("pid_kill of its own PID file did not stop the process")
	}
}
