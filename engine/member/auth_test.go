package member

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// On real servers started as an older operator started them (requirepass, masterauth): the
// internal user is added, replication moved to it, and the clients' password rotated with an
// overlap, while the replica's link stays up and no error carries a password.
func TestAuthOnRealServers(t *testing.T) {
	ctx := context.Background()
	const old, internal = "old-password-4711", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	const next = `ne"w\pass`
	primary := server(t, old, "")
	host, port, _ := net.SplitHostPort(primary)
	replica := server(t, old, fmt.Sprintf("replicaof %s %s", host, port))
	waitLink(t, replica, old)

	p := NewPool()
	defer p.Close()
	for _, addr := range []string{primary, replica} {
		c := p.Client(addr, old)
		if _, found, err := GetUser(ctx, c, "internal"); err != nil || found {
			t.Fatalf("%s: internal user before: found %v, %v", addr, found, err)
		}
		if err := SetUser(ctx, c, "internal", []string{">" + internal}, "~* &* +@all"); err != nil {
			t.Fatal(err)
		}
		if u, found, err := GetUser(ctx, c, "internal"); err != nil || !found || !slices.Equal(u.Passwords, []string{sha(internal)}) {
			t.Fatalf("%s: internal user: %v %v %v", addr, u.Passwords, found, err)
		}
		if u, _, err := GetUser(ctx, c, "default"); err != nil || !slices.Equal(u.Passwords, []string{sha(old)}) {
			t.Fatalf("%s: default user: %v %v", addr, u.Passwords, err)
		}
	}
	// Replication as the internal user; the link is made anew with it.
	rc := p.ClientAs(replica, "internal", internal)
	if err := SetReplicationAuth(ctx, rc, "internal", internal); err != nil {
		t.Fatal(err)
	}
	if u, pw, err := ReplicationAuth(ctx, rc); err != nil || u != "internal" || pw != internal {
		t.Fatalf("masteruser %q (masterauth the internal password: %v) %v", u, pw == internal, err)
	}
	if err := rc.Do(ctx, "CLIENT", "KILL", "TYPE", "master").Err(); err != nil {
		t.Fatal(err)
	}
	waitLinkAs(t, rc)

	// The rotation: both passwords accepted, then only the new one; the link never drops.
	both := []string{sha(old), sha(next)}
	slices.Sort(both)
	for _, addr := range []string{primary, replica} {
		if err := SetUser(ctx, p.ClientAs(addr, "internal", internal), "default", []string{"#" + both[0], "#" + both[1]}, ""); err != nil {
			t.Fatal(err)
		}
	}
	for _, pw := range []string{old, next} {
		if _, err := Observe(ctx, primary, pw); err != nil {
			t.Errorf("during the overlap, %q refused: %v", pw, err)
		}
	}
	for _, addr := range []string{primary, replica} {
		if err := SetUser(ctx, p.ClientAs(addr, "internal", internal), "default", []string{"#" + sha(next)}, ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Observe(ctx, primary, next); err != nil {
		t.Errorf("after the overlap, the new password refused: %v", err)
	}
	_, err := Observe(ctx, primary, old)
	if !IsAuthError(err) || strings.Contains(err.Error(), old) {
		t.Errorf("after the overlap, the old password: %v; want WRONGPASS without the password", err)
	}
	if r, err := ObserveWith(ctx, rc); err != nil || !r.LinkUp {
		t.Errorf("replica after the rotation: %+v %v; want its link up", r, err)
	}
	// A refused SETUSER names no argument.
	err = setUser(ctx, rc, "default", []interface{}{"ACL", "SETUSER", "default", "#not-a-hash-" + next})
	if err == nil || strings.Contains(err.Error(), next) {
		t.Errorf("a refused SETUSER: %v", err)
	}
}

func waitLink(t *testing.T, addr, pw string) {
	t.Helper()
	p := NewPool()
	defer p.Close()
	waitLinkAs(t, p.Client(addr, pw))
}

// waitLinkAs polls a replica until its link to the primary is up, with a deadline.
func waitLinkAs(t *testing.T, c *redis.Client) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, err := ObserveWith(context.Background(), c)
		if err == nil && r.LinkUp {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica link not up: %+v %v", r, err)
		}
		time.Sleep(100 * time.Millisecond) // polling the link, with a deadline
	}
}
