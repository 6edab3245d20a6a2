// Package membertest runs real redis-server processes on 127.0.0.1 for tests: the member
// package's own and the end-to-end helpers' that need a server but no cluster.
package membertest

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server runs a redis-server on 127.0.0.1 until the test ends, with password for the default
// user (and as masterauth) and extra configuration lines, and returns its address once it
// answers. The configuration goes in on standard input, so the password is on no command line.
func Server(t testing.TB, password, extra string) string {
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
	waitAnswers(t, addr, password)
	return addr
}

// waitAnswers waits until the server at addr answers PING, within 10 s.
func waitAnswers(t testing.TB, addr, password string) {
	t.Helper()
	cl := redis.NewClient(&redis.Options{Addr: addr, Password: password, MaxRetries: -1, Protocol: 2, DisableIdentity: true})
	defer cl.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := cl.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s did not answer: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond) // polling a starting server, with a deadline
	}
}

// ClusterServer runs a cluster-mode redis-server on 127.0.0.1 until the test ends, like Server,
// with its cluster bus on a port of its own (cluster-port), and returns its address and bus port.
// A primary that gives its last slot away stays a primary (cluster-allow-replica-migration no): a
// shard being removed keeps its members out of the other shards until they are removed.
func ClusterServer(t testing.TB, password string) (string, int) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, bus, _ := net.SplitHostPort(l.Addr().String())
	l.Close()
	port, _ := strconv.Atoi(bus)
	addr := Server(t, password, fmt.Sprintf("cluster-enabled yes\ncluster-config-file nodes.conf\ncluster-port %d\ncluster-node-timeout 2000\ncluster-allow-replica-migration no", port))
	return addr, port
}

// Proc is a cluster-mode redis-server that a test stops and starts again, possibly on another
// loopback address, with the same data directory (its nodes.conf): a member's pod restarted at a
// new address. It announces the address it listens on (cluster-announce-ip), as members do.
type Proc struct {
	t             testing.TB
	password, dir string
	Host          string
	Port, Bus     int
	cmd           *exec.Cmd
	extra         string // more configuration lines
}

// StartCluster runs a cluster-mode redis-server on host (a loopback address) until Stop or the
// test's end, with extra configuration lines.
func StartCluster(t testing.TB, password, host string, extra ...string) *Proc {
	t.Helper()
	ports := FreePorts(t, host, 2)
	p := &Proc{t: t, password: password, dir: t.TempDir(), Port: ports[0], Bus: ports[1], extra: strings.Join(extra, "\n")}
	t.Cleanup(p.Stop)
	p.Start(host)
	return p
}

// Addr is the server's address now.
func (p *Proc) Addr() string { return net.JoinHostPort(p.Host, strconv.Itoa(p.Port)) }

// Start starts the server on host with its ports and data directory and waits until it answers.
func (p *Proc) Start(host string) {
	p.t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		p.t.Fatalf("redis-server is needed (Debian package redis-server): %v", err)
	}
	p.Host = host
	p.cmd = exec.Command(path, "-")
	p.cmd.Stdin = strings.NewReader(fmt.Sprintf("port %d\nbind %s\ndir %s\nsave \"\"\nappendonly no\nrequirepass %q\nmasterauth %q\n"+
		"cluster-enabled yes\ncluster-config-file nodes.conf\ncluster-port %d\ncluster-node-timeout 2000\ncluster-allow-replica-migration no\ncluster-announce-ip %s\n%s\n",
		p.Port, host, p.dir, p.password, p.password, p.Bus, host, p.extra))
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	waitAnswers(p.t, p.Addr(), p.password)
}

// Stop stops the server (SIGTERM: it saves its nodes.conf) and waits for it to exit. A server
// that refuses to stop (Redis 7 ignores a SIGTERM while it writes its first AOF, which a replica
// does after each full sync) is sent SIGTERM again each second, and killed after 30 s, as a
// kubelet does after the grace period.
func (p *Proc) Stop() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for stopped := false; !stopped; {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
			stopped = true
		case <-tick.C:
		case <-deadline:
			_ = p.cmd.Process.Kill()
			<-done
			stopped = true
		}
	}
	p.cmd = nil
}

// Dir is the server's data directory (its nodes.conf).
func (p *Proc) Dir() string { return p.dir }

// FreePorts returns n ports free on host now.
func FreePorts(t testing.TB, host string, n int) []int {
	t.Helper()
	var out []int
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return out
}
