package operator

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"example.com/cache-operator/e2e/framework"
)

// TestFailingServerExitsNonZero: a server that cannot serve (here /metrics, on a port already
// taken) ends the operator with a non-zero status and its error, instead of a silent exit 0.
func TestFailingServerExitsNonZero(t *testing.T) {
	c := framework.Setup(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	logPath := filepath.Join(c.Dir, "operator-exit-test.log")
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	_, hookPort, _ := net.SplitHostPort(freeAddr(t))
	cmd := exec.CommandContext(ctx, binary, "--kubeconfig", c.Kubeconfig, "--webhook-port="+hookPort, "--member-networks="+framework.MemberNetworks,
		"--metrics-bind-address", busy.Addr().String(), "--health-probe-bind-address", "127.0.0.1:0")
	cmd.Stdout, cmd.Stderr = log, log
	err = cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("the operator still ran a minute after its metrics server failed (log %s)", logPath)
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("the operator ended with %v; want a non-zero exit status", err)
	}
	out, _ := os.ReadFile(logPath)
	if !strings.Contains(string(out), "metrics server") {
		t.Errorf("the operator's log does not name the failed server:\n%s", out)
	}
	t.Logf("exit status %d after the metrics server failed", exit.ExitCode())
}
