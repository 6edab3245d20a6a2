package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// probe runs a container attempt's startup, readiness and liveness probes as the kubelet does:
// startup first (liveness and readiness wait for it), each with its initial delay, period,
// timeout and thresholds. A failed startup or liveness probe restarts the container.
func (r *podRuntime) probe(ctx context.Context, c *containerState, a *attempt) {
	spec := c.spec
	if spec.StartupProbe != nil {
		if !r.probeLoop(ctx, c, a, "Startup", spec.StartupProbe, func(ok bool) bool {
			if ok {
				r.mu.Lock()
				c.started = true
				if spec.ReadinessProbe == nil {
					c.ready = true
				}
				r.mu.Unlock()
				r.publish()
				return false // startup probes stop at the first success
			}
			return true
		}) {
			return
		}
	}
	if spec.ReadinessProbe != nil {
		go r.probeLoop(ctx, c, a, "Readiness", spec.ReadinessProbe, func(ok bool) bool {
			r.mu.Lock()
			changed := c.ready != ok
			c.ready = ok
			r.mu.Unlock()
			if changed {
				r.publish()
			}
			return true
		})
	}
	if spec.LivenessProbe != nil {
		go r.probeLoop(ctx, c, a, "Liveness", spec.LivenessProbe, func(bool) bool { return true })
	}
}

// probeLoop runs one probe until ctx ends. onResult gets each result after the thresholds and
// says whether to go on. A startup or liveness probe that crosses its failure threshold stops
// the container; probeLoop then reports false.
func (r *podRuntime) probeLoop(ctx context.Context, c *containerState, a *attempt, kind string, p *corev1.Probe, onResult func(bool) bool) bool {
	period := seconds(p.PeriodSeconds, 10)
	timeout := seconds(p.TimeoutSeconds, 1)
	successNeeded := int(max(p.SuccessThreshold, 1))
	failureLimit := int(max(p.FailureThreshold, 3))
	select {
	case <-ctx.Done():
		return false
	case <-time.After(time.Duration(p.InitialDelaySeconds) * time.Second):
	}
	successes, failures := 0, 0
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		err := r.runProbe(ctx, c, a, &p.ProbeHandler, timeout)
		if ctx.Err() != nil {
			return false
		}
		if err == nil {
			successes++
			failures = 0
			if successes >= successNeeded {
				if !onResult(true) {
					return true
				}
			}
		} else {
			failures++
			successes = 0
			r.event(corev1.EventTypeWarning, "Unhealthy", fmt.Sprintf("%s probe failed: %v", kind, err))
			if failures >= failureLimit {
				switch kind {
				case "Liveness", "Startup":
					msg := fmt.Sprintf("Container %s failed %s probe, will be restarted", c.spec.Name, strings.ToLower(kind))
					r.event(corev1.EventTypeNormal, "Killing", msg)
					grace := time.Duration(r.terminationGrace(p)) * time.Second
					go r.stopAttempt(c, a, msg, grace)
					return false
				default:
					onResult(false)
				}
			}
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

func (r *podRuntime) terminationGrace(p *corev1.Probe) int64 {
	if p.TerminationGracePeriodSeconds != nil {
		return *p.TerminationGracePeriodSeconds
	}
	if r.pod.Spec.TerminationGracePeriodSeconds != nil {
		return *r.pod.Spec.TerminationGracePeriodSeconds
	}
	return corev1.DefaultTerminationGracePeriodSeconds
}

func seconds(v int32, def int) time.Duration {
	if v <= 0 {
		return time.Duration(def) * time.Second
	}
	return time.Duration(v) * time.Second
}

// runProbe performs one check of a probe handler (exec, httpGet or tcpSocket).
func (r *podRuntime) runProbe(ctx context.Context, c *containerState, a *attempt, h *corev1.ProbeHandler, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch {
	case h.Exec != nil:
		if entered, err := r.enterProbe(ctx, a, h.Exec.Command); entered {
			return err
		}
		return r.execProbe(ctx, a, h.Exec.Command)
	case h.HTTPGet != nil:
		return r.httpProbe(ctx, c, h.HTTPGet)
	case h.TCPSocket != nil:
		port, err := resolvePort(c.spec, h.TCPSocket.Port)
		if err != nil {
			return err
		}
		host := h.TCPSocket.Host
		if host == "" {
			host = r.ip()
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return err
		}
		return conn.Close()
	}
	return fmt.Errorf("probe has no handler")
}

func (r *podRuntime) ip() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.podIP == nil {
		return ""
	}
	return r.podIP.String()
}

// execProbe runs a command in the container (runc exec) and succeeds on exit status 0.
func (r *podRuntime) execProbe(ctx context.Context, a *attempt, command []string) error {
	args := append([]string{"--root", r.runcRoot(), "exec", a.id}, command...)
	cmd := exec.CommandContext(ctx, r.cfg.Runc, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	if ctx.Err() == context.DeadlineExceeded {
		return fmt.Errorf("command %q timed out", strings.Join(command, " "))
	}
	if err != nil {
		msg := strings.TrimSpace(out.String())
		if len(msg) > 200 {
			msg = msg[:200]
		}
		return fmt.Errorf("command %q: %v: %s", strings.Join(command, " "), err, msg)
	}
	return nil
}

var probeClient = &http.Client{
	Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true}, //nolint:gosec // as the kubelet: probes do not verify
	CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) >= 10 {
			return http.ErrUseLastResponse
		}
		return nil
	},
}

// httpProbe succeeds on a status from 200 to 399.
func (r *podRuntime) httpProbe(ctx context.Context, c *containerState, g *corev1.HTTPGetAction) error {
	port, err := resolvePort(c.spec, g.Port)
	if err != nil {
		return err
	}
	host := g.Host
	if host == "" {
		host = r.ip()
	}
	scheme := strings.ToLower(string(g.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	path := g.Path
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s://%s%s", scheme, net.JoinHostPort(host, strconv.Itoa(port)), path), nil)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", "kube-probe/1.37")
	for _, h := range g.HTTPHeaders {
		if strings.EqualFold(h.Name, "Host") {
			req.Host = h.Value
			continue
		}
		req.Header.Add(h.Name, h.Value)
	}
	resp, err := probeClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("HTTP probe failed with statuscode: %d", resp.StatusCode)
	}
	return nil
}

// resolvePort turns a number or a named container port into a number.
func resolvePort(c *corev1.Container, p intstr.IntOrString) (int, error) {
	if p.Type == intstr.Int {
		return p.IntValue(), nil
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	if n, err := strconv.Atoi(p.StrVal); err == nil {
		return n, nil
	}
	return 0, fmt.Errorf("no container port named %q", p.StrVal)
}

// runHandler runs a lifecycle hook (postStart or preStop): exec, httpGet, tcpSocket or sleep.
func (r *podRuntime) runHandler(ctx context.Context, c *containerState, a *attempt, h *corev1.LifecycleHandler) error {
	switch {
	case h.Exec != nil:
		return r.execProbe(ctx, a, h.Exec.Command)
	case h.HTTPGet != nil:
		return r.httpProbe(ctx, c, h.HTTPGet)
	case h.Sleep != nil:
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(h.Sleep.Seconds) * time.Second):
		}
		return nil
	case h.TCPSocket != nil:
		return fmt.Errorf("tcpSocket lifecycle hooks are deprecated and not run")
	}
	return nil
}
