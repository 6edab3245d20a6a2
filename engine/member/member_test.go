package member

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// server runs a redis-server on 127.0.0.1 until the test ends; its configuration goes in on
// standard input, so the password is on no command line.
func server(t *testing.T, password, extra string) string {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is needed (Debian package redis-server): %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	l.Close()
	cmd := exec.Command(path, "-")
	cmd.Stdin = strings.NewReader(fmt.Sprintf("port %s\nbind 127.0.0.1\ndir %s\nsave \"\"\nappendonly no\nrequirepass %q\nmasterauth %q\n%s\n",
		port, t.TempDir(), password, password, extra))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := Observe(context.Background(), addr, password); err == nil {
			return addr
		} else if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s did not answer: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond) // polling a starting server, with a deadline
	}
}

func TestObserveRealServers(t *testing.T) {
	ctx := context.Background()
	const pw = "test-password-4711"
	primary := server(t, pw, "")
	host, port, _ := net.SplitHostPort(primary)
	replica := server(t, pw, fmt.Sprintf("replicaof %s %s", host, port))

	var r Replication
	deadline := time.Now().Add(20 * time.Second)
	for {
		var err error
		if r, err = Observe(ctx, replica, pw); err != nil {
			t.Fatal(err)
		}
		if r.LinkUp || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // polling the sync, with a deadline
	}
	if r.Role != Replica || !r.LinkUp || r.PrimaryHost != host {
		t.Errorf("replica: %+v; want a replica of %s with its link up", r, host)
	}
	p, err := Observe(ctx, primary, pw)
	if err != nil || p.Role != Primary || p.Replicas != 1 {
		t.Errorf("primary: %+v %v; want a primary with one replica", p, err)
	}
	if p.Offset < r.Offset {
		t.Errorf("primary offset %d below the replica's %d", p.Offset, r.Offset)
	}

	_, err = Observe(ctx, primary, "wrong-password")
	if err == nil || strings.Contains(err.Error(), "wrong-password") || strings.Contains(err.Error(), pw) {
		t.Errorf("wrong password: %v; want an error that names no password", err)
	}
	// Nothing listens: the call ends within its bound.
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := l.Addr().String()
	l.Close()
	start := time.Now()
	if _, err := Observe(ctx, closed, pw); err == nil {
		t.Error("no server: no error")
	}
	if took := time.Since(start); took > 3*Timeout {
		t.Errorf("a call to a closed port took %v; want at most %v", took, 3*Timeout)
	}
}

func TestParseReplication(t *testing.T) {
	r, err := ParseReplication("# Replication\r\nrole:slave\r\nmaster_host:c-0.c.ns.svc.cluster.local\r\nmaster_link_status:down\r\nmaster_sync_in_progress:0\r\nslave_repl_offset:42\r\n")
	if err != nil || r.Role != Replica || r.LinkUp || r.Offset != 42 || r.PrimaryHost != "c-0.c.ns.svc.cluster.local" {
		t.Errorf("%+v %v", r, err)
	}
	if _, err := ParseReplication("role:sentinel\r\n"); err == nil {
		t.Error("an unknown role parsed")
	}
}
