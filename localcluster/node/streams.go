package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/creack/pty"
	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	corev1 "k8s.io/api/core/v1"
	utilexec "k8s.io/utils/exec"

	"example.com/cache-operator/localcluster/node/images"
)

func (r *podRuntime) container(name string) (*containerState, error) {
	for _, c := range r.containers {
		if c.spec.Name == name || (name == "" && len(r.containers) == 1) {
			return c, nil
		}
	}
	return nil, errdefs.NotFoundf("container %q is not in pod %s/%s", name, r.pod.Namespace, r.pod.Name)
}

// bundleInput gathers what buildSpec needs for container c.
func (r *podRuntime) bundleInput(c *containerState, image *images.Image, args, env []string) (bundleInput, error) {
	mounts, err := r.volumes.mountsFor(c.spec)
	if err != nil {
		return bundleInput{}, err
	}
	hostname, _ := r.hostname()
	etc := filepath.Join(r.dir, "etc")
	return bundleInput{
		pod: r.pod, container: c.spec, image: image, args: args, env: env, hostname: hostname,
		netns:      filepath.Join("/run/netns", r.netns),
		etcFiles:   map[string]string{"hosts": filepath.Join(etc, "hosts"), "resolv.conf": filepath.Join(etc, "resolv.conf"), "hostname": filepath.Join(etc, "hostname")},
		mounts:     mounts,
		cgroupPath: r.cgroupPath(c.spec),
	}, nil
}

// logs serves a container's log: the current attempt, or with Previous the one before it.
func (r *podRuntime) logs(ctx context.Context, name string, opts api.ContainerLogOpts) (io.ReadCloser, error) {
	c, err := r.container(name)
	if err != nil {
		return nil, err
	}
	// As the kubelet: the current log is the newest attempt's (running or exited), --previous
	// the one before it.
	r.mu.Lock()
	number := c.lastAttempt
	running := c.cur
	r.mu.Unlock()
	if opts.Previous {
		number--
		running = nil
	}
	if number < 0 {
		if opts.Previous {
			return nil, errdefs.InvalidInputf("previous terminated container %q in pod %q not found", name, r.pod.Name)
		}
		return nil, errdefs.InvalidInputf("container %q in pod %q is waiting to start", name, r.pod.Name)
	}
	path := filepath.Join(r.dir, "logs", c.spec.Name, strconv.Itoa(int(number))+".log")
	f, err := os.Open(path)
	if err != nil {
		return nil, errdefs.NotFoundf("no log for container %q (attempt %d) yet", name, number)
	}
	pr, pw := io.Pipe()
	go func() {
		defer f.Close()
		pw.CloseWithError(streamLog(ctx, f, pw, opts, func() bool {
			if running == nil || !opts.Follow {
				return true
			}
			select {
			case <-running.done:
				return true
			default:
				return false
			}
		}))
	}()
	return pr, nil
}

// streamLog copies CRI-format log lines to w, honouring tail, since, timestamps, limitBytes and
// follow (it polls the file until finished reports true).
func streamLog(ctx context.Context, f *os.File, w io.Writer, opts api.ContainerLogOpts, finished func() bool) error {
	var since time.Time
	if opts.SinceSeconds > 0 {
		since = time.Now().Add(-time.Duration(opts.SinceSeconds) * time.Second)
	}
	if !opts.SinceTime.IsZero() {
		since = opts.SinceTime
	}
	written := 0
	emit := func(line string) (bool, error) {
		ts, rest, ok := strings.Cut(line, " ")
		if !ok {
			return true, nil
		}
		_, rest, _ = strings.Cut(rest, " ") // stream
		tag, msg, _ := strings.Cut(rest, " ")
		if tag == "P" {
			msg = strings.TrimSuffix(msg, "\n")
		}
		if !since.IsZero() {
			if t, err := time.Parse(time.RFC3339Nano, ts); err == nil && t.Before(since) {
				return true, nil
			}
		}
		out := msg
		if opts.Timestamps {
			out = ts + " " + msg
		}
		if opts.LimitBytes > 0 && written+len(out) > opts.LimitBytes {
			out = out[:opts.LimitBytes-written]
		}
		n, err := io.WriteString(w, out)
		written += n
		if err != nil {
			return false, err
		}
		return !(opts.LimitBytes > 0 && written >= opts.LimitBytes), nil
	}
	br := bufio.NewReader(f)
	// tail: read everything once, keep the last N lines.
	if opts.Tail > 0 {
		var lines []string
		for {
			line, err := br.ReadString('\n')
			if len(line) > 0 && strings.HasSuffix(line, "\n") {
				lines = append(lines, line)
			}
			if err != nil {
				break
			}
		}
		if len(lines) > opts.Tail {
			lines = lines[len(lines)-opts.Tail:]
		}
		for _, l := range lines {
			if more, err := emit(l); err != nil || !more {
				return err
			}
		}
	}
	var partial string
	for {
		line, err := br.ReadString('\n')
		partial += line
		if err == nil {
			if more, werr := emit(partial); werr != nil || !more {
				return werr
			}
			partial = ""
			continue
		}
		if !errors.Is(err, io.EOF) {
			return err
		}
		if finished() {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// exec runs a command in a running container (runc exec), with a pseudo-terminal when asked.
func (r *podRuntime) exec(ctx context.Context, name string, command []string, attach api.AttachIO) error {
	c, err := r.container(name)
	if err != nil {
		return err
	}
	r.mu.Lock()
	a := c.cur
	r.mu.Unlock()
	if a == nil {
		return errdefs.InvalidInputf("container %q is not running", c.spec.Name)
	}
	args := []string{"--root", r.runcRoot(), "exec"}
	if attach.TTY() {
		args = append(args, "--tty")
	}
	args = append(append(args, a.id), command...)
	cmd := exec.CommandContext(ctx, r.cfg.Runc, args...)
	if attach.TTY() {
		f, err := pty.Start(cmd)
		if err != nil {
			return err
		}
		defer f.Close()
		go func() {
			for size := range attach.Resize() {
				_ = pty.Setsize(f, &pty.Winsize{Rows: size.Height, Cols: size.Width})
			}
		}()
		if in := attach.Stdin(); in != nil {
			go func() { _, _ = io.Copy(f, in) }()
		}
		if out := attach.Stdout(); out != nil {
			_, _ = io.Copy(out, f)
		}
		return exitError(cmd.Wait())
	}
	if in := attach.Stdin(); in != nil {
		cmd.Stdin = in
	}
	if out := attach.Stdout(); out != nil {
		cmd.Stdout = out
	}
	if e := attach.Stderr(); e != nil {
		cmd.Stderr = e
	}
	var runcErr bytes.Buffer
	if cmd.Stderr == nil {
		cmd.Stderr = &runcErr
	}
	cmd.WaitDelay = 2 * time.Second
	return exitError(cmd.Run())
}

// exitError gives a command's exit status to the exec stream, so kubectl exec exits with it.
func exitError(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return utilexec.CodeExitError{Err: fmt.Errorf("command terminated with exit code %d", ee.ExitCode()), Code: ee.ExitCode()}
	}
	return err
}

// portForward connects a kubectl port-forward stream to the pod's IP and port.
func (r *podRuntime) portForward(ctx context.Context, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	ip := r.ip()
	if ip == "" {
		return fmt.Errorf("pod %s/%s has no IP yet", r.pod.Namespace, r.pod.Name)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(ip, strconv.Itoa(int(port))))
	if err != nil {
		return err
	}
	defer conn.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(conn, stream); done <- struct{}{} }()
	go func() { _, _ = io.Copy(stream, conn); done <- struct{}{} }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	return nil
}

// event records an Event on the pod.
func (r *podRuntime) event(eventType, reason, msg string) {
	r.mu.Lock()
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: r.pod.Namespace, Name: r.pod.Name, UID: r.pod.UID}
	r.mu.Unlock()
	if r.p.recorder != nil {
		r.p.recorder.Event(ref, eventType, reason, msg)
	}
}
