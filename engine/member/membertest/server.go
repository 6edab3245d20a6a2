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
	cl := redis.NewClient(&redis.Options{Addr: addr, Password: password, MaxRetries: -1, Protocol: 2, DisableIdentity: true})
	defer cl.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := cl.Ping(ctx).Err()
		cancel()
		if err == nil {
			return addr
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
