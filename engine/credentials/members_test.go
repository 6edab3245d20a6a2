package credentials

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/member"
	"example.com/cache-operator/engine/member/membertest"
	"example.com/cache-operator/engine/render"
	"example.com/cache-operator/templates"
)

// templateRules are the users' permissions as the templates render them for a cache.
func templateRules(t *testing.T) Rules {
	t.Helper()
	r, err := render.NewRenderer(templates.FS)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := r.Samples("ns", "c")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetKind() == "ConfigMap" {
			text, _, _ := unstructured.NestedString(o.Object, "data", api.UsersConfigKey)
			rules, err := ParseRules(text)
			if err != nil {
				t.Fatal(err)
			}
			return rules
		}
	}
	t.Fatal("no ConfigMap rendered")
	return Rules{}
}

// AdminCommands are the commands the clients' user must be refused (issue 21's list).
var AdminCommands = [][]interface{}{
	{"CONFIG", "GET", "masterauth"}, {"CONFIG", "SET", "maxmemory", "1"}, {"ACL", "LIST"}, {"ACL", "GETUSER", "internal"},
	{"ACL", "SETUSER", "default", "+@all"}, {"ACL", "CAT"}, {"REPLICAOF", "NO", "ONE"}, {"SLAVEOF", "NO", "ONE"}, {"FAILOVER"},
	{"SHUTDOWN", "NOSAVE"}, {"MODULE", "LIST"}, {"MONITOR"}, {"CLIENT", "KILL", "TYPE", "normal"}, {"CLIENT", "LIST"},
	{"SAVE"}, {"BGSAVE"}, {"BGREWRITEAOF"}, {"MIGRATE", "127.0.0.1", "1", "k", "0", "1"}, {"SYNC"}, {"PSYNC", "?", "-1"},
	{"CLIENT", "PAUSE", "1"}, {"SWAPDB", "0", "1"}, {"ROLE"}, {"SLOWLOG", "GET"}, {"LATENCY", "LATEST"},
}

// DataCommands are what a cache's client needs and keeps.
var DataCommands = [][]interface{}{
	{"SET", "k", "v"}, {"GET", "k"}, {"KEYS", "*"}, {"SCAN", "0"}, {"INFO", "memory"}, {"EVAL", "return redis.call('GET', KEYS[1])", "1", "k"},
	{"SCRIPT", "FLUSH"}, {"WATCH", "k"}, {"UNWATCH"}, {"PUBLISH", "c", "m"}, {"SORT", "l"}, {"ACL", "WHOAMI"}, {"WAIT", "0", "0"},
	{"FLUSHDB"}, {"FLUSHALL"},
}

// On real servers started as an older operator started them (requirepass: a default user with
// every permission, replication as it): Sync gives them the internal user and the template's
// permissions, replication moves to the internal user; the clients' user is then refused every
// admin command and keeps the data commands; a second Sync changes nothing; an internal rotation
// keeps the replica's link through a reconnection, and its overlap's end refuses the old password.
func TestSyncOnRealServers(t *testing.T) {
	ctx := context.Background()
	rules := templateRules(t)
	const old = "old-clients-password"
	i1, i2 := strings.Repeat("1a", 32), strings.Repeat("2b", 32)
	primary := membertest.Server(t, old, "")
	host, port, _ := net.SplitHostPort(primary)
	replica := membertest.Server(t, old, fmt.Sprintf("replicaof %s %s", host, port))
	addrs := []string{primary, replica}

	cred := Credentials{Password: old, Internal: i1, Hashes: []string{render.PasswordHash(old)}, Revision: 1}
	legacy := member.NewPool()
	defer legacy.Close()
	for _, a := range addrs {
		if err := Sync(ctx, a, legacy.Client(a, old), cred, rules); err != nil {
			t.Fatalf("%s: first sync, as the default user: %v", a, err)
		}
	}
	internal := member.NewPool()
	defer internal.Close()
	for _, a := range addrs {
		if err := SyncReplication(ctx, a, internal.ClientAs(a, api.InternalUser, i1), cred); err != nil {
			t.Fatal(err)
		}
	}
	relink(t, internal.ClientAs(replica, api.InternalUser, i1))

	// The clients' user.
	clients := redis.NewClient(&redis.Options{Addr: primary, Password: old, Protocol: 2, DisableIdentity: true, MaxRetries: -1})
	defer clients.Close()
	for _, cmd := range AdminCommands {
		err := clients.Do(ctx, cmd...).Err()
		if err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
			t.Errorf("as the clients' user, %v: %v; want NOPERM", cmd, err)
		}
	}
	for _, cmd := range DataCommands {
		if err := clients.Do(ctx, cmd...).Err(); err != nil && err != redis.Nil {
			t.Errorf("as the clients' user, %v: %v; want it to work", cmd, err)
		}
	}
	// The internal user: no key.
	ic := internal.ClientAs(primary, api.InternalUser, i1)
	if err := ic.Do(ctx, "GET", "k").Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
		t.Errorf("as the internal user, GET: %v; want NOPERM", err)
	}
	// The next pass reaches them as the internal user (the default user could not read back the
	// permissions it was given); after it, nothing more to give.
	for _, a := range addrs {
		if err := Sync(ctx, a, internal.ClientAs(a, api.InternalUser, i1), cred, rules); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range addrs {
		for _, u := range []struct {
			name              string
			passwords, hashes []string
		}{{api.InternalUser, []string{">" + i1}, []string{render.PasswordHash(i1)}}, {"default", []string{"#" + cred.Hashes[0]}, cred.Hashes}} {
			if changed, err := syncUser(ctx, internal.ClientAs(a, api.InternalUser, i1), u.name, u.passwords, u.hashes, rules); err != nil || changed != "" {
				t.Errorf("%s: a second sync of %s changed %q (%v)", a, u.name, changed, err)
			}
		}
	}

	// An internal rotation: the members accept both, replication moves to the new one, and the
	// link is made anew with it.
	rot := cred
	rot.Internal, rot.PreviousInternal = i2, i1
	for _, a := range addrs {
		if err := Sync(ctx, a, internal.ClientAs(a, api.InternalUser, i1), rot, rules); err != nil {
			t.Fatalf("%s: rotation: %v", a, err)
		}
	}
	for _, a := range addrs {
		if err := SyncReplication(ctx, a, internal.ClientAs(a, api.InternalUser, i2), rot); err != nil {
			t.Fatal(err)
		}
	}
	relink(t, internal.ClientAs(replica, api.InternalUser, i2))
	// The overlap's end: the old one is refused.
	done := rot
	done.PreviousInternal = ""
	for _, a := range addrs {
		if err := Sync(ctx, a, internal.ClientAs(a, api.InternalUser, i2), done, rules); err != nil {
			t.Fatal(err)
		}
	}
	stale := member.NewPool()
	defer stale.Close()
	if _, err := member.ObserveWith(ctx, stale.ClientAs(primary, api.InternalUser, i1)); !member.IsAuthError(err) {
		t.Errorf("the previous internal password after the overlap: %v; want it refused", err)
	}
	relink(t, internal.ClientAs(replica, api.InternalUser, i2))
}

// relink drops a replica's link to its primary and waits until it is made again (with a
// deadline): the credentials replication holds now are accepted.
func relink(t *testing.T, c *redis.Client) {
	t.Helper()
	if err := c.Do(context.Background(), "CLIENT", "KILL", "TYPE", "master").Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, err := member.ObserveWith(context.Background(), c)
		if err == nil && r.LinkUp {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica link not up again: %+v %v", r, err)
		}
		time.Sleep(100 * time.Millisecond) // polling the link, with a deadline
	}
}
