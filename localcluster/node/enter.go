package main

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// The exec probes' fast path. `runc exec` costs about 80 ms of CPU per call on this machine (two
// Go runtimes start: runc and its init), and the members' probes make one every few seconds on
// every member, all the time: in a full end-to-end run, a fifth of all CPU went to runc exec and
// the processes it started. nsenter(1) (util-linux) costs about 8 ms: it enters the container's
// namespaces (mount, UTS, IPC, network, PID; its root and working directory) and runs the command
// as the container's user and group, with the container's environment and, when the container
// asks for it, no_new_privs. What it does not give the command: the container's seccomp filter
// and its cgroup. Probes and their commands come from the pod's spec, like the container's own
// process; a probe's few milliseconds of CPU are not charged to the container.
//
// Only probes take this path, and only for a container whose process holds no capability and is
// not root, with no supplementary group other than its own (nsenter sets one uid and one gid and
// clears the others): for anything else, and for lifecycle hooks and `kubectl exec`, runc exec
// does all of it.

// enterable is the container process's identity when the fast path can reproduce it, or nil.
func enterable(p *specs.Process) *specs.Process {
	if p == nil || p.User.UID == 0 {
		return nil
	}
	for _, g := range p.User.AdditionalGids {
		if g != p.User.GID {
			return nil
		}
	}
	if c := p.Capabilities; c != nil && (len(c.Bounding)+len(c.Effective)+len(c.Permitted)+len(c.Inheritable)+len(c.Ambient)) > 0 {
		return nil
	}
	return p
}

// enterCommand is the nsenter command line that runs command in the container whose first process
// is pid, as proc says.
func enterCommand(nsenter string, pid int, proc *specs.Process, command []string) []string {
	cwd := proc.Cwd
	if cwd == "" {
		cwd = "/"
	}
	args := []string{nsenter, "--target", strconv.Itoa(pid), "--mount", "--uts", "--ipc", "--net", "--pid",
		"--root", "--wdns=" + cwd,
		"--setgid", strconv.FormatUint(uint64(proc.User.GID), 10), "--setuid", strconv.FormatUint(uint64(proc.User.UID), 10), "--"}
	return append(args, command...)
}

// enterProbe runs a probe's command through nsenter. It reports false (and does nothing) when the
// fast path does not apply: the container is not running with a known first process, or its
// identity is more than nsenter can set.
func (r *podRuntime) enterProbe(ctx context.Context, a *attempt, command []string) (entered bool, err error) {
	proc := enterable(a.proc)
	pid := int(a.pid.Load())
	if proc == nil || pid <= 0 || r.cfg.Nsenter == "" {
		return false, nil
	}
	select {
	case <-a.done: // it exited: its PID may be another process's now
		return false, nil
	default:
	}
	argv := enterCommand(r.cfg.Nsenter, pid, proc, command)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = proc.Env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// nsenter forks the command into the container's PID namespace and waits for it; on a
	// timeout, both go, as a group (killing nsenter alone would leave the command running).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	if err := startMaybeNoNewPrivs(cmd, proc.NoNewPrivileges); err != nil {
		return true, fmt.Errorf("command %q: %v", strings.Join(command, " "), err)
	}
	err = cmd.Wait()
	if ctx.Err() == context.DeadlineExceeded {
		return true, fmt.Errorf("command %q timed out", strings.Join(command, " "))
	}
	if err != nil {
		msg := strings.TrimSpace(out.String())
		if len(msg) > 200 {
			msg = msg[:200]
		}
		return true, fmt.Errorf("command %q: %v: %s", strings.Join(command, " "), err, msg)
	}
	return true, nil
}

// startMaybeNoNewPrivs starts cmd, with no_new_privs set when asked. The flag belongs to a thread
// and its children inherit it: it is set on a locked thread that starts the command and is then
// thrown away (a goroutine that ends locked takes its thread with it), so that no other
// goroutine of the node agent ever runs with it.
func startMaybeNoNewPrivs(cmd *exec.Cmd, noNewPrivs bool) error {
	if !noNewPrivs {
		return cmd.Start()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			errc <- fmt.Errorf("setting no_new_privs: %w", err)
			return
		}
		errc <- cmd.Start()
	}()
	return <-errc
}
