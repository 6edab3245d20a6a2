package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"example.com/cache-operator/e2e/framework"
)

// operatorProcess is the operator under measurement.
type operatorProcess struct {
	cmd     *exec.Cmd
	metrics string
	log     string
}

func startOperator(cfg runConfig, kubeconfig string) (*operatorProcess, error) {
	var ports [3]string
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	if err := os.MkdirAll(cfg.logDir, 0o755); err != nil {
		return nil, err
	}
	logPath := filepath.Join(cfg.logDir, fmt.Sprintf("operator-n%d-f%d-run%d.log", cfg.n, cfg.foreign, cfg.run))
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// Default flags, except where the local cluster needs its own: the pods of KWOK nodes have
	// addresses that lead nowhere, so the operator may dial only the real nodes' range (as make up).
	args := append([]string{"--kubeconfig", kubeconfig, "--member-networks", framework.MemberNetworks,
		"--webhook-port", ports[0], "--metrics-bind-address", "127.0.0.1:" + ports[1],
		"--health-probe-bind-address", "127.0.0.1:" + ports[2]}, cfg.operatorArgs...)
	if cfg.profile {
		args = append(args, "--profiling")
	}
	cmd := exec.Command(cfg.operatorBin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	// If the bench dies, the operator goes with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	op := &operatorProcess{cmd: cmd, metrics: "127.0.0.1:" + ports[1], log: logPath}
	err = poll(time.Minute, "the operator to serve (/readyz)", func() (bool, string, error) {
		if cmd.ProcessState != nil {
			return false, "exited", fmt.Errorf("the operator exited; see %s", logPath)
		}
		resp, err := http.Get("http://127.0.0.1:" + ports[2] + "/readyz")
		if err != nil {
			return false, "", err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status, nil
	})
	if err != nil {
		op.stop()
	}
	return op, err
}

// saveProfile saves the operator's heap profile (it serves them with --profiling).
func saveProfile(op *operatorProcess, path string) {
	resp, err := http.Get("http://" + op.metrics + "/debug/pprof/heap")
	if err != nil {
		logf("heap profile: %v", err)
		return
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		logf("heap profile: %v", err)
		return
	}
	defer f.Close()
	if _, err := io.Copy(f, resp.Body); err != nil {
		logf("heap profile: %v", err)
		return
	}
	logf("heap profile saved: %s", path)
}

func (o *operatorProcess) stop() {
	_ = o.cmd.Process.Signal(syscall.SIGTERM)
	_ = o.cmd.Wait()
}

// sampler follows the peak of the operator's Go heap (its /metrics, every second).
type sampler struct {
	mu       sync.Mutex
	pid      int
	metrics  string
	peakHeap float64
	stopped  chan struct{}
	done     chan struct{}
}

func startSampler(op *operatorProcess) *sampler {
	s := &sampler{pid: op.cmd.Process.Pid, metrics: op.metrics, stopped: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			if heap, err := framework.Metric(s.metrics, "go_memstats_heap_inuse_bytes"); err == nil {
				s.mu.Lock()
				s.peakHeap = max(s.peakHeap, heap/(1<<20))
				s.mu.Unlock()
			}
			select {
			case <-s.stopped:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *sampler) stop() float64 {
	close(s.stopped)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peakHeap
}

// quiet waits until the operator has sent no request for the given time (it may still be
// writing the last statuses when the last cache turns Ready), and returns when its last request
// was received.
func quiet(audit *auditReader, after time.Time, still, timeout time.Duration) (time.Time, error) {
	var last time.Time
	err := poll(timeout, fmt.Sprintf("the operator to send no request for %s", still), func() (bool, string, error) {
		if _, err := audit.poll(); err != nil {
			return false, "", err
		}
		last = audit.last()
		if last.Before(after) {
			last = after
		}
		return time.Since(last) >= still, fmt.Sprintf("last request %s ago", time.Since(last).Round(time.Second)), nil
	})
	return last.Add(time.Millisecond), err
}
