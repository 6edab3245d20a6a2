package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// runtimeCommand is the command line of one runc call: its own errors go to logPath as JSON lines,
// apart from the container's output.
func runtimeCommand(runc, root, logPath string, args ...string) *exec.Cmd {
	return exec.Command(runc, append([]string{"--root", root, "--log", logPath, "--log-format", "json"}, args...)...)
}

// runtimeFailure says why an attempt never ran the container's process: startErr, the runtime
// could not be started at all (runc missing), or the errors runc logged to logPath (the process's
// executable missing, a mount that failed). "" when the process ran: its exit is its own.
func runtimeFailure(startErr error, logPath string) string {
	if startErr != nil {
		return "failed to start the container runtime: " + startErr.Error()
	}
	data, err := os.ReadFile(logPath)
	if err != nil {
		return ""
	}
	var msgs []string
	for _, line := range strings.Split(string(data), "\n") {
		var entry struct{ Level, Msg string }
		if json.Unmarshal([]byte(line), &entry) == nil && (entry.Level == "error" || entry.Level == "fatal") && entry.Msg != "" {
			msgs = append(msgs, entry.Msg)
		}
	}
	return strings.Join(msgs, "; ")
}

// execTimeout bounds waitExec: past it the attempt is taken as running (a slow machine must not
// hold a container in Waiting for ever).
const execTimeout = 10 * time.Second

// waitExec waits until runc has exec'd the container's own process: runc reports the container
// running and its init process no longer runs runc's own code ("runc:[2:INIT]"). It reports false
// when the attempt ended first: runc failed to start it (a missing executable, a bad mount), or
// the process ran and exited at once.
func (r *podRuntime) waitExec(a *attempt) bool {
	deadline := time.Now().Add(execTimeout)
	for time.Now().Before(deadline) {
		out, err := exec.Command(r.cfg.Runc, "--root", r.runcRoot(), "state", a.id).Output()
		var st struct {
			Status string `json:"status"`
			Pid    int    `json:"pid"`
		}
		if err == nil && json.Unmarshal(out, &st) == nil && st.Status == "running" && st.Pid > 0 {
			comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", st.Pid))
			if err == nil && !strings.HasPrefix(string(comm), "runc:") {
				a.pid.Store(int64(st.Pid))
				return true
			}
		}
		select {
		case <-a.done:
			return false
		case <-time.After(5 * time.Millisecond):
		}
	}
	return true
}
