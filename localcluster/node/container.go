package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"example.com/cache-operator/localcluster/node/images"
)

const (
	initialBackoff = 10 * time.Second
	// DefaultMaxBackoff is the kubelet's default longest CrashLoopBackOff delay; --max-container-restart-period
	// lowers it, as the kubelet's crashLoopBackOff.maxContainerRestartPeriod does.
	DefaultMaxBackoff = 5 * time.Minute
	// backoffReset: a container that ran this long without failing restarts without delay.
	backoffReset = 10 * time.Minute
)

// nextBackoff is the delay before the restart after the one that waited delay: none before the
// first restart, then 10 s (or max, if lower) doubling up to max, as the kubelet does.
func nextBackoff(delay, max time.Duration) time.Duration {
	if max <= 0 {
		max = DefaultMaxBackoff
	}
	switch {
	case delay == 0:
		delay = initialBackoff
	case delay < max:
		delay *= 2
	}
	return min(delay, max)
}

// containerState is one container of a pod across its restarts. Fields are guarded by the pod's mu.
type containerState struct {
	spec         *corev1.Container
	init         bool
	restartCount int32
	state        corev1.ContainerState
	lastState    corev1.ContainerState
	ready        bool
	started      bool
	everStarted  bool
	imageID      string
	// lastAttempt is the number of the newest attempt (its log is the current log); -1 before any.
	lastAttempt int32
	// startFailure is why the last attempt never ran the container's process (the runtime is
	// missing or failed: a missing executable, a bad mount), as the waiting reason and message to
	// show during the back-off after it ("" when the last attempt ran).
	startFailure, startFailureMsg string

	// The attempt running now (nil between attempts).
	cur *attempt
	// exited is closed (and replaced) around each attempt; waitExited waits for the last one.
	idle chan struct{}
}

// attempt is one run of a container under runc.
type attempt struct {
	id       string // runc container ID, also the containerID "runc://<id>"
	number   int32  // the restart count when it started; names its log file
	logPath  string
	done     chan struct{}
	exitCode int
	killMsg  string // why the node stopped it (liveness, deletion)
	stopOnce sync.Once
	// proc is the container's process as its bundle gives it, and pid its first process's PID
	// (0 until runc has exec'd it): what the probes' fast path (enter.go) needs.
	proc *specs.Process
	pid  atomic.Int64
}

func newContainerState(c *corev1.Container, init bool) *containerState {
	idle := make(chan struct{})
	close(idle)
	return &containerState{
		spec: c, init: init, idle: idle, lastAttempt: -1,
		state: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}},
	}
}

func (c *containerState) waitExited() { <-c.idle }

// statusLocked is the container's status. Call with the pod's mu held.
func (c *containerState) statusLocked() corev1.ContainerStatus {
	started := c.started
	cs := corev1.ContainerStatus{
		Name:                 c.spec.Name,
		Image:                c.spec.Image,
		ImageID:              c.imageID,
		State:                *c.state.DeepCopy(),
		LastTerminationState: *c.lastState.DeepCopy(),
		Ready:                c.ready,
		RestartCount:         c.restartCount,
		Started:              &started,
	}
	if c.cur != nil {
		cs.ContainerID = "runc://" + c.cur.id
	} else if c.state.Terminated != nil {
		cs.ContainerID = c.state.Terminated.ContainerID
	}
	return cs
}

// runInit runs an init container to completion, restarting it on failure unless the pod's
// restartPolicy is Never. It reports whether the pod may go on.
func (r *podRuntime) runInit(c *containerState) bool {
	backoff := time.Duration(0)
	for {
		exit, ok := r.runOnce(c)
		if !ok {
			return false
		}
		if exit == 0 {
			return true
		}
		if r.pod.Spec.RestartPolicy == corev1.RestartPolicyNever {
			r.mu.Lock()
			r.phase, r.reason, r.msg = corev1.PodFailed, "InitContainerFailed", fmt.Sprintf("init container %s exited with %d", c.spec.Name, exit)
			r.mu.Unlock()
			r.publish()
			<-r.stopped()
			return false
		}
		if !r.backoff(c, &backoff, 0) {
			return false
		}
	}
}

// supervise runs a regular container, restarting it as the pod's restartPolicy says, with the
// kubelet's CrashLoopBackOff delays (10 s doubling to --max-container-restart-period, 5 min by
// default, reset after 10 min of running).
func (r *podRuntime) supervise(c *containerState) {
	backoff := time.Duration(0)
	for {
		start := time.Now()
		exit, ok := r.runOnce(c)
		if !ok {
			return
		}
		restart := false
		switch r.pod.Spec.RestartPolicy {
		case corev1.RestartPolicyNever:
		case corev1.RestartPolicyOnFailure:
			restart = exit != 0
		default:
			restart = true
		}
		if !restart || r.isStopping() {
			return
		}
		if !r.backoff(c, &backoff, time.Since(start)) {
			return
		}
	}
}

// backoff waits before a restart, showing CrashLoopBackOff. It reports false if the pod stopped.
func (r *podRuntime) backoff(c *containerState, delay *time.Duration, ran time.Duration) bool {
	if ran >= backoffReset {
		*delay = 0
	}
	if *delay > 0 {
		r.mu.Lock()
		waiting := &corev1.ContainerStateWaiting{
			Reason:  "CrashLoopBackOff",
			Message: fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)", *delay, c.spec.Name, r.pod.Name, r.pod.Namespace, r.uid),
		}
		if c.startFailure != "" {
			// The container never ran: keep saying why, as the kubelet's RunContainerError does.
			waiting.Reason, waiting.Message = c.startFailure, c.startFailureMsg+"; "+waiting.Message
		}
		c.state = corev1.ContainerState{Waiting: waiting}
		r.mu.Unlock()
		r.event(corev1.EventTypeWarning, "BackOff", "Back-off restarting failed container "+c.spec.Name+" in pod "+r.pod.Name)
		r.publish()
		select {
		case <-r.stopped():
			return false
		case <-time.After(*delay):
		}
	}
	*delay = nextBackoff(*delay, r.cfg.MaxBackoff)
	r.mu.Lock()
	c.restartCount++
	r.mu.Unlock()
	return true
}

// waiting shows why a container cannot start yet and waits a little before the next try.
func (r *podRuntime) waiting(c *containerState, reason, msg string, retry time.Duration) bool {
	r.mu.Lock()
	c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}
	r.mu.Unlock()
	r.publish()
	select {
	case <-r.stopped():
		return false
	case <-time.After(retry):
		return true
	}
}

// runOnce starts one attempt of a container and waits for it to exit. ok is false when the pod
// stopped before or during the attempt.
func (r *podRuntime) runOnce(c *containerState) (exitCode int, ok bool) {
	var image *images.Image
	var args, env []string
	var spec bundleInput
	for {
		if r.isStopping() {
			return 0, false
		}
		var err error
		image, err = r.cfg.Images.Lookup(c.spec.Image)
		if err != nil {
			if !r.waiting(c, "ErrImagePull", err.Error(), 20*time.Second) {
				return 0, false
			}
			continue
		}
		root, ok := r.pull(c, image)
		if !ok {
			return 0, false
		}
		env, err = r.containerEnv(c.spec)
		if err == nil {
			args, err = commandLine(c.spec, image, env)
		}
		if err == nil {
			spec, err = r.bundleInput(c, image, args, env)
			spec.root = root
		}
		if err != nil {
			if !r.waiting(c, "CreateContainerConfigError", err.Error(), 5*time.Second) {
				return 0, false
			}
			continue
		}
		break
	}

	r.mu.Lock()
	number := c.restartCount
	r.mu.Unlock()
	a := &attempt{
		id:      fmt.Sprintf("%s-%s-%d", r.uid, c.spec.Name, number),
		number:  number,
		logPath: filepath.Join(r.dir, "logs", c.spec.Name, strconv.Itoa(int(number))+".log"),
		done:    make(chan struct{}),
	}
	bundle := filepath.Join(r.dir, "bundles", fmt.Sprintf("%s-%d", c.spec.Name, number))
	_ = os.RemoveAll(bundle)
	if err := os.MkdirAll(bundle, 0o755); err != nil {
		r.failedToStart(c, "CreateContainerError", err.Error())
		return 1, !r.isStopping()
	}
	oci, err := buildSpec(bundle, spec)
	if err == nil {
		a.proc = oci.Process
		var data []byte
		data, err = json.Marshal(oci)
		if err == nil {
			err = os.WriteFile(filepath.Join(bundle, "config.json"), data, 0o600)
		}
	}
	if err != nil {
		if !r.waiting(c, "CreateContainerConfigError", err.Error(), 5*time.Second) {
			return 0, false
		}
		return r.runOnce(c)
	}
	if err := os.MkdirAll(filepath.Dir(a.logPath), 0o755); err != nil {
		r.failedToStart(c, "CreateContainerError", err.Error())
		return 1, !r.isStopping()
	}
	logFile, err := os.OpenFile(a.logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o640)
	if err != nil {
		r.failedToStart(c, "CreateContainerError", err.Error())
		return 1, !r.isStopping()
	}
	lw := &logWriter{f: logFile}
	stdoutR, stdoutW, _ := os.Pipe()
	stderrR, stderrW, _ := os.Pipe()
	runtimeLog := filepath.Join(bundle, "runtime.log")
	cmd := runtimeCommand(r.cfg.Runc, r.runcRoot(), runtimeLog, "run", "--bundle", bundle, a.id)
	cmd.Stdout, cmd.Stderr = stdoutW, stderrW
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var copiers sync.WaitGroup
	copiers.Add(2)
	go func() { defer copiers.Done(); lw.copyFrom(stdoutR, "stdout") }()
	go func() { defer copiers.Done(); lw.copyFrom(stderrR, "stderr") }()

	idle := make(chan struct{})
	r.mu.Lock()
	c.idle = idle
	r.mu.Unlock()
	defer close(idle)

	if r.isStopping() {
		stdoutW.Close()
		stderrW.Close()
		copiers.Wait()
		logFile.Close()
		return 0, false
	}
	startErr := cmd.Start()
	stdoutW.Close()
	stderrW.Close()
	if startErr != nil {
		copiers.Wait()
		logFile.Close()
		r.failedToStart(c, "RunContainerError", runtimeFailure(startErr, ""))
		return 1, !r.isStopping()
	}
	go func() {
		if err := cmd.Wait(); err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				a.exitCode = ee.ExitCode()
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					a.exitCode = 128 + int(ws.Signal())
				}
			} else {
				a.exitCode = 128
			}
		}
		close(a.done)
	}()
	// Running only once the container's own process runs: an attempt runc fails to start stays
	// waiting, as the kubelet shows it.
	execd := r.waitExec(a)
	startedAt := metav1.Now()
	r.mu.Lock()
	if c.state.Terminated != nil {
		c.lastState = corev1.ContainerState{Terminated: c.state.Terminated}
	}
	c.imageID = imageID(image, spec.root)
	c.cur = a
	c.lastAttempt = a.number
	if execd {
		c.state = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: startedAt}}
		c.everStarted = true
		c.started = c.spec.StartupProbe == nil
		c.ready = c.spec.ReadinessProbe == nil && c.started && !c.init
	}
	r.mu.Unlock()
	attemptCtx, cancelAttempt := context.WithCancel(context.Background())
	if execd {
		r.publish()
		klog.InfoS("Started container", "pod", klog.KObj(r.pod), "container", c.spec.Name, "id", a.id, "restartCount", number)
		if c.spec.Lifecycle != nil && c.spec.Lifecycle.PostStart != nil {
			go func() {
				if err := r.runHandler(attemptCtx, c, a, c.spec.Lifecycle.PostStart); err != nil {
					r.event(corev1.EventTypeWarning, "FailedPostStartHook", fmt.Sprintf("container %s: %v", c.spec.Name, err))
					r.stopAttempt(c, a, "FailedPostStartHook", 0)
				}
			}()
		}
		if !c.init {
			go r.probe(attemptCtx, c, a)
		}
	}
	go func() {
		select {
		case <-a.done:
		case <-r.terminating:
			r.stopAttempt(c, a, "pod deleted", r.remainingGrace())
		case <-r.killed:
			r.stopAttempt(c, a, "node agent stopped", 0)
		}
	}()

	<-a.done
	cancelAttempt()
	copiers.Wait()
	logFile.Close()
	oomKilled := r.oomKilled(c, a)
	failure := runtimeFailure(nil, runtimeLog)
	_ = exec.Command(r.cfg.Runc, "--root", r.runcRoot(), "delete", "--force", a.id).Run()
	_ = os.RemoveAll(bundle)
	if failure != "" {
		// runc itself failed: the container's process never ran (a missing executable, a bad
		// mount, a runtime error). The kubelet reports this as RunContainerError, not as an exit.
		r.mu.Lock()
		c.cur, c.ready, c.started = nil, false, false
		r.mu.Unlock()
		r.failedToStart(c, "RunContainerError", failure)
		return 1, !r.isStopping()
	}
	r.mu.Lock()
	c.startFailure, c.startFailureMsg = "", ""
	c.everStarted = true
	r.mu.Unlock()

	reason := "Completed"
	if a.exitCode != 0 {
		reason = "Error"
	}
	if oomKilled {
		reason = "OOMKilled"
	}
	msg := a.killMsg
	if msg == "" && a.exitCode != 0 && c.spec.TerminationMessagePolicy == corev1.TerminationMessageFallbackToLogsOnError {
		msg = logTail(a.logPath) // as the kubelet: the log's end, when the container wrote no message
	}
	finished := metav1.Now()
	r.mu.Lock()
	c.cur = nil
	c.ready = false
	c.started = false
	c.state = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: int32(a.exitCode), Reason: reason, Message: msg,
		StartedAt: startedAt, FinishedAt: finished, ContainerID: "runc://" + a.id,
	}}
	r.mu.Unlock()
	r.publish()
	klog.InfoS("Container exited", "pod", klog.KObj(r.pod), "container", c.spec.Name, "exitCode", a.exitCode, "reason", reason)
	return a.exitCode, !r.isStopping()
}

// failedToStart records an attempt that never ran the container's process, as the kubelet does:
// the container waits with reason (CreateContainerError or RunContainerError) and the error text,
// its last state is a StartError with the same text, and the pod gets a Warning Event Failed.
func (r *podRuntime) failedToStart(c *containerState, reason, msg string) {
	if len(msg) > 1024 {
		msg = msg[:1021] + "..."
	}
	r.mu.Lock()
	c.startFailure, c.startFailureMsg = reason, msg
	now := metav1.Now()
	c.lastState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: 128, Reason: "StartError", Message: msg, StartedAt: now, FinishedAt: now,
	}}
	c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}
	r.mu.Unlock()
	r.publish()
	r.event(corev1.EventTypeWarning, "Failed", "Error: "+msg)
	klog.InfoS("Container failed to start", "pod", klog.KObj(r.pod), "container", c.spec.Name, "reason", reason, "err", msg)
}

func (r *podRuntime) runcRoot() string { return filepath.Join(r.cfg.StateDir, "runc") }

func (r *podRuntime) cgroupPath(c *corev1.Container) string {
	return fmt.Sprintf("%s/%s/%s", r.cfg.CgroupParent, r.uid, c.Name)
}

// oomKilled reads the memory cgroup's OOM-kill counter before runc deletes the cgroup.
func (r *podRuntime) oomKilled(c *containerState, a *attempt) bool {
	if a.exitCode != 137 {
		return false
	}
	data, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory", r.cgroupPath(c.spec), "memory.oom_control"))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "oom_kill" && f[1] != "0" {
			return true
		}
	}
	return false
}

func (r *podRuntime) remainingGrace() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := time.Until(r.graceUntil)
	if d < 0 {
		d = 0
	}
	return d
}

// stopAttempt runs the preStop hook, sends SIGTERM, waits up to grace, then sends SIGKILL.
func (r *podRuntime) stopAttempt(c *containerState, a *attempt, why string, grace time.Duration) {
	a.stopOnce.Do(func() {
		a.killMsg = why
		deadline := time.Now().Add(grace)
		if grace > 0 && c.spec.Lifecycle != nil && c.spec.Lifecycle.PreStop != nil {
			ctx, cancel := context.WithDeadline(context.Background(), deadline)
			if err := r.runHandler(ctx, c, a, c.spec.Lifecycle.PreStop); err != nil {
				r.event(corev1.EventTypeWarning, "FailedPreStopHook", fmt.Sprintf("container %s: %v", c.spec.Name, err))
			}
			cancel()
		}
		if grace > 0 {
			_ = exec.Command(r.cfg.Runc, "--root", r.runcRoot(), "kill", a.id, "TERM").Run()
			select {
			case <-a.done:
				return
			case <-r.killed:
			case <-time.After(time.Until(deadline)):
			}
		}
		_ = exec.Command(r.cfg.Runc, "--root", r.runcRoot(), "kill", a.id, "KILL").Run()
	})
}

// commandLine is the container's argv: command and args as Kubernetes combines them with the
// image's entrypoint, with $(VAR) references expanded.
func commandLine(c *corev1.Container, image *images.Image, env []string) ([]string, error) {
	vars := map[string]string{}
	for _, kv := range env {
		if i := strings.IndexByte(kv, '='); i > 0 {
			vars[kv[:i]] = kv[i+1:]
		}
	}
	var argv []string
	switch {
	case len(c.Command) > 0:
		argv = append(expandAll(c.Command, vars), expandAll(c.Args, vars)...)
	case len(c.Args) > 0:
		if len(image.Entrypoint) == 0 {
			return nil, fmt.Errorf("image %s has no entrypoint in the image table and the container gives no command", c.Image)
		}
		argv = append([]string{image.Entrypoint[0]}, expandAll(c.Args, vars)...)
	default:
		argv = append([]string{}, image.Entrypoint...)
	}
	if len(argv) == 0 {
		return nil, fmt.Errorf("no command to run: the container gives none and image %s has no entrypoint", c.Image)
	}
	return argv, nil
}

func expandAll(in []string, vars map[string]string) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = expand(s, vars)
	}
	return out
}
