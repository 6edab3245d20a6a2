package operator

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"example.com/cache-operator/e2e/framework"
)

// roleOf asks a member's server for its role (INFO replication, which the clients' user may read;
// ROLE is an admin command), bounded to a second: "master" or "slave".
func roleOf(ip, pw string) (string, error) {
	cl := newClient(net.JoinHostPort(ip, "6379"), pw)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	info, err := cl.Info(ctx, "replication").Result()
	if err != nil {
		return "", fmt.Errorf("INFO replication: %v", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "role:"); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("INFO replication has no role")
}

// assertOnePrimary checks that at most one member is labelled primary and at most one member's
// server (of those that answer) says master and takes writes. A master that its fence holds
// (fewer replicas in sync than min-replicas-to-write: it answers NOREPLICAS to every write) does
// not count: a primary that restarted by itself just as the operator replaced it is one, until the
// operator makes it a replica; it is logged.
func assertOnePrimary(t *testing.T, c *framework.Cluster, ns, cache, pw, step string) {
	t.Helper()
	var labelled, masters, fenced []string
	for _, p := range memberPods(t, c, ns, cache) {
		if p.Labels[roleLabel] == "primary" {
			labelled = append(labelled, p.Name)
		}
		if p.Status.PodIP == "" {
			continue
		}
		if role, err := roleOf(p.Status.PodIP, pw); err == nil && role == "master" {
			ic := internalClient(t, c, ns, cache, p.Status.PodIP)
			held := isFenced(ic)
			ic.Close()
			if held {
				name := p.Name
				if p.Labels[roleLabel] == "primary" {
					name += " (the labelled primary, its replicas not yet in sync)"
				}
				fenced = append(fenced, name)
			} else {
				masters = append(masters, p.Name)
			}
		}
	}
	if len(fenced) > 0 {
		t.Logf("after %s: masters held by their fence (no write accepted): %v", step, fenced)
	}
	if len(labelled) > 1 || len(masters) > 1 {
		t.Fatalf("after %s: two primaries: labelled %v, servers saying master and taking writes %v (fenced: %v)", step, labelled, masters, fenced)
	}
}

// isFenced reports whether the master cl reaches refuses writes for want of replicas in sync
// (min_slaves_good_slaves below min-replicas-to-write). cl must be allowed CONFIG GET: on a
// member, the internal user (the clients' user gets NOPERM).
func isFenced(cl *redis.Client) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	cfg, err := cl.ConfigGet(ctx, "min-replicas-to-write").Result()
	if err != nil {
		return false
	}
	want, _ := strconv.Atoi(cfg["min-replicas-to-write"])
	info, err := cl.Info(ctx, "replication").Result()
	if err != nil || want == 0 {
		return false
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "min_slaves_good_slaves:"); ok {
			good, _ := strconv.Atoi(v)
			return good < want
		}
	}
	return false
}
