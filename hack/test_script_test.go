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

// runTestScript runs a copy of test.sh (in <dir>/hack/, so that its .test/ goes to <dir>) with a
// stand-in for make whose targets do what unit, build and e2e say (shell commands); e2e's output
// goes to .test/e2e.log too, as hack/e2e.sh's does. It returns the command, started, and the file
// its output goes to.
func runTestScript(t *testing.T, unit, build, e2e string) (*exec.Cmd, string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "hack"), 0o755); err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile("test.sh")
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "hack", "test.sh")
	if err := os.WriteFile(script, text, 0o755); err != nil {
		t.Fatal(err)
	}
	fake := filepath.Join(dir, "fake-make")
	body := fmt.Sprintf("#!/bin/bash\ncase \"$2\" in\ntest-unit) %s;;\ncluster-bin) %s;;\n"+
		"test-e2e) mkdir -p .test; (%s) >.test/e2e.log 2>&1; rc=$?; cat .test/e2e.log; exit $rc;;\n*) exit 9;;\nesac\n", unit, build, e2e)
	if err := os.WriteFile(fake, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command("/bin/bash", script)
	cmd.Env = append(os.Environ(), "MAKE="+fake)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its own process group, as under make
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, out
}

func exitCode(err error) int {
	if e, ok := err.(*exec.ExitError); ok {
		return e.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// make test fails when either half fails, and says which; the unit tests' FAIL lines are shown.
func TestTestScriptFailsWhenEitherHalfFails(t *testing.T) {
	for _, tc := range []struct {
		name, unit, e2e string
		ok              bool
		want            []string
	}{
		{"both pass", "echo 'ok  \tpkg/a\t0.1s'", "true", true, []string{"unit tests passed", "ok  \tpkg/a", "build and end-to-end passed"}},
		{"unit fails", "echo '--- FAIL: TestX'; echo 'FAIL\tpkg/b'; exit 1", "true", false, []string{"unit tests FAILED", "--- FAIL: TestX", "FAIL\tpkg/b", "build and end-to-end passed"}},
		{"e2e fails", "true", "exit 2", false, []string{"unit tests passed", "end-to-end tests failed (exit 2)", "build and end-to-end FAILED"}},
		// The end of the output says why each failed test failed.
		{"e2e fails and says why", "true", `printf '=== RUN   TestA\n    a_test.go:7: the reason\n--- FAIL: TestA (1.00s)\n=== RUN   TestB\n    b_test.go:1: fine\n--- PASS: TestB (0.10s)\n'; exit 1`,
			false, []string{"TestA failed; its last lines:\n      a_test.go:7: the reason", "build and end-to-end FAILED"}},
		// Tests run side by side: each line goes to the test its "=== NAME" header names, and a
		// helper's line (not in a _test.go file) counts too.
		{"parallel tests", "true", `printf '=== RUN   TestA\n=== PAUSE TestA\n=== RUN   TestB\n=== PAUSE TestB\n=== CONT  TestA\n=== CONT  TestB\n    b_test.go:3: b is fine\n=== NAME  TestA\n    helpers.go:9: a helper says why\n=== NAME  TestB\n    b_test.go:4: b is still fine\n--- PASS: TestB (0.10s)\n=== NAME  TestA\n    a_test.go:8: a failed\n--- FAIL: TestA (1.00s)\n'; exit 1`,
			false, []string{"TestA failed; its last lines:\n      helpers.go:9: a helper says why\n      a_test.go:8: a failed\ntest: "}},
		// A panic ends the test binary without a "--- FAIL" line; the summary prints it.
		{"panic", "true", `printf '=== RUN   TestP\npanic: runtime error: index out of range\n\ngoroutine 7 [running]:\nexample.com/x.TestP(0xc000)\n'; exit 1`,
			false, []string{"a test panicked:\n  panic: runtime error: index out of range", "example.com/x.TestP"}},
		// The end of the output gives each end-to-end package's wall time, slowest first.
		{"package times", "true", `printf 'ok  \tpkg/fast\t7.032s\nFAIL\tpkg/slow\t199.608s\nok  \tpkg/mid\t61.5s\n'`, true,
			[]string{"packages by wall time:\n      200 s  FAIL pkg/slow\n       62 s  ok   pkg/mid\n        7 s  ok   pkg/fast\n      268 s  in all (3 packages)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd, out := runTestScript(t, tc.unit, "true", tc.e2e)
			err := cmd.Wait()
			b, _ := os.ReadFile(out)
			if (exitCode(err) == 0) != tc.ok {
				t.Errorf("exit %d (%v); want success %v:\n%s", exitCode(err), err, tc.ok, b)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(b), w) {
					t.Errorf("output lacks %q:\n%s", w, b)
				}
			}
		})
	}
}

// A SIGTERM to make test (a CI timeout) stops the unit tests and the end-to-end run at once, not
// after they end.
func TestTestScriptStopsItsChildrenOnSIGTERM(t *testing.T) {
	marker := fmt.Sprintf("test-script-child-%d", time.Now().UnixNano())
	cmd, out := runTestScript(t, "exec -a "+marker+"-unit sleep 300", "true", "exec -a "+marker+"-e2e sleep 300")
	running := func() []string { // processes whose command line holds the marker (from /proc)
		var pids []string
		cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, p := range cmdlines {
			if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), marker) {
				pids = append(pids, filepath.Base(filepath.Dir(p)))
			}
		}
		return pids
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(running()) < 2 {
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(out)
			t.Fatalf("the stand-ins did not start: %v\n%s", running(), b)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		t.Fatal("test.sh still running 10 s after SIGTERM")
	}
	deadline = time.Now().Add(5 * time.Second)
	for len(running()) > 0 {
		if time.Now().After(deadline) {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			t.Fatalf("after SIGTERM, still running: %v", running())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
