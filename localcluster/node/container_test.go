package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
)

// A runtime that fails writes its error to the log runtimeCommand gives it, as runc does with
// --log-format json; runtimeFailure reads it back. A runtime that cannot be started at all, and
// one whose container ran and exited, are told apart.
func TestRuntimeFailure(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "fake-runc")
	// Writes runc's JSON log lines to the file after --log, then fails as runc does.
	script := `#!/bin/sh
while [ $# -gt 0 ]; do [ "$1" = --log ] && log=$2; shift; done
echo '{"level":"warning","msg":"a warning is not a failure","time":"2026-12-02T02:00:00Z"}' >>"$log"
echo '{"level":"error","msg":"runc run failed: unable to start container process: exec: \"nosuch\": executable file not found in $PATH","time":"2026-12-02T02:00:00Z"}' >>"$log"
exit 1
`
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "runtime.log")
	cmd := runtimeCommand(fake, filepath.Join(dir, "root"), log, "run", "--bundle", dir, "id")
	if err := cmd.Run(); err == nil {
		t.Fatal("the failing runtime succeeded")
	}
	got := runtimeFailure(nil, log)
	if !strings.Contains(got, `exec: "nosuch": executable file not found`) || strings.Contains(got, "warning") {
		t.Errorf("runtimeFailure = %q; want runc's error and not its warning", got)
	}

	missing := runtimeCommand(filepath.Join(dir, "no-such-runc"), dir, log, "run")
	startErr := missing.Start()
	if startErr == nil {
		t.Fatal("a missing runtime started")
	}
	if got := runtimeFailure(startErr, ""); !strings.Contains(got, "no-such-runc") || !strings.HasPrefix(got, "failed to start the container runtime") {
		t.Errorf("runtimeFailure of a missing runtime = %q", got)
	}
	if got := runtimeFailure(nil, filepath.Join(dir, "no-log")); got != "" {
		t.Errorf("a container that ran (no runtime log) reported %q", got)
	}
	clean := filepath.Join(dir, "clean.log")
	_ = os.WriteFile(clean, []byte(`{"level":"info","msg":"ok"}`+"\n"), 0o644)
	if got := runtimeFailure(nil, clean); got != "" {
		t.Errorf("a runtime log without errors reported %q", got)
	}
}

// A container that never started shows the kubelet's reason with the error text while it waits,
// keeps it through the back-off, has a StartError as its last state, and its pod gets Warning
// Events Failed and BackOff.
func TestFailedToStartIsReported(t *testing.T) {
	recorder := record.NewFakeRecorder(10)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
	}
	r := newPodRuntime(&Provider{recorder: recorder}, pod)
	c := r.containers[0]
	r.failedToStart(c, "RunContainerError", "failed to start the container runtime: "+errors.New(`exec: "runc": executable file not found in $PATH`).Error())
	r.mu.Lock()
	cs := c.statusLocked()
	r.mu.Unlock()
	if w := cs.State.Waiting; w == nil || w.Reason != "RunContainerError" || !strings.Contains(w.Message, "executable file not found") {
		t.Errorf("state %+v; want waiting RunContainerError with the error", cs.State)
	}
	if l := cs.LastTerminationState.Terminated; l == nil || l.Reason != "StartError" || l.ExitCode != 128 || !strings.Contains(l.Message, "runc") {
		t.Errorf("last state %+v; want a StartError with the error", cs.LastTerminationState)
	}
	delay := time.Millisecond
	if !r.backoff(c, &delay, 0) {
		t.Fatal("back-off reported the pod stopped")
	}
	r.mu.Lock()
	cs = c.statusLocked()
	r.mu.Unlock()
	if w := cs.State.Waiting; w == nil || w.Reason != "RunContainerError" || !strings.Contains(w.Message, "executable file not found") || !strings.Contains(w.Message, "back-off") {
		t.Errorf("state during the back-off %+v; want RunContainerError with the error and the back-off", cs.State)
	}
	var events []string
	for len(recorder.Events) > 0 {
		events = append(events, <-recorder.Events)
	}
	if len(events) != 2 || !strings.HasPrefix(events[0], "Warning Failed Error: failed to start the container runtime") || !strings.HasPrefix(events[1], "Warning BackOff") {
		t.Errorf("events %q; want Warning Failed with the error, then Warning BackOff", events)
	}
}

// The restart delays follow the kubelet's: none, then 10 s doubling to the cap, which
// --max-container-restart-period lowers (and which then also bounds the first delay).
func TestNextBackoff(t *testing.T) {
	for _, tc := range []struct {
		max  time.Duration
		want []time.Duration
	}{
		{0, []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second, 5 * time.Minute, 5 * time.Minute}},
		{30 * time.Second, []time.Duration{10 * time.Second, 20 * time.Second, 30 * time.Second, 30 * time.Second}},
		{5 * time.Second, []time.Duration{5 * time.Second, 5 * time.Second}},
	} {
		var got []time.Duration
		delay := time.Duration(0)
		for range tc.want {
			delay = nextBackoff(delay, tc.max)
			got = append(got, delay)
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("max %s: delays %v; want %v", tc.max, got, tc.want)
		}
	}
}

// FallbackToLogsOnError takes the end of the container's log, without the CRI prefixes, as the
// kubelet does.
func TestLogTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	var b strings.Builder
	for i := 0; i < 100; i++ {
		fmt.Fprintf(&b, "2026-12-03T02:00:00.000000000Z stdout F line %d\n", i)
	}
	b.WriteString("2026-12-03T02:00:00.000000000Z stderr P partial \n")
	b.WriteString("2026-12-03T02:00:00.000000000Z stderr F restore failed: corrupt\n")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	got := logTail(path)
	if !strings.HasSuffix(got, "line 99\npartial restore failed: corrupt") || strings.Contains(got, "line 21\n") || strings.Contains(got, "stdout") {
		t.Errorf("logTail = %q", got)
	}
	if logTail(filepath.Join(t.TempDir(), "none")) != "" {
		t.Error("a missing log gave a message")
	}
}
