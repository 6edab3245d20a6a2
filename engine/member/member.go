// Package member talks to one member of a cache, a redis-server or valkey-server, over the
// network: it reads the member's replication state (INFO replication) with the cache's password,
// with every call bounded in time. Valkey speaks the same protocol.
//
// It is not for deciding roles or writing to the cluster: callers (the controller) do that. It
// never logs, and its errors never carry the password.
package member

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Timeout bounds each call to a member: dial, write and read.
const Timeout = time.Second

// Role is a member's replication role as the server reports it.
type Role string

// Roles.
const (
	Primary Role = "master"
	Replica Role = "slave"
)

// Replication is a member's replication state.
type Replication struct {
	// Role is master or slave.
	Role Role
	// Offset is the replication offset: master_repl_offset on a primary, slave_repl_offset on a
	// replica.
	Offset int64
	// PrimaryHost is the primary a replica follows (master_host); empty on a primary.
	PrimaryHost string
	// LinkUp reports, on a replica, that its link to the primary is up and no sync is in progress.
	LinkUp bool
	// Replicas is the number of replicas connected to a primary.
	Replicas int
}

// Observe reads the replication state of the member at addr (host:port).
func Observe(ctx context.Context, addr, password string) (Replication, error) {
	c := redis.NewClient(&redis.Options{
		Addr: addr, Password: password,
		DialTimeout: Timeout, ReadTimeout: Timeout, WriteTimeout: Timeout,
		MaxRetries: -1, PoolSize: 1, Protocol: 2, DisableIdentity: true,
	})
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 3*Timeout)
	defer cancel()
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return Replication{}, fmt.Errorf("member %s: INFO replication: %w", addr, err)
	}
	return ParseReplication(info)
}

// ParseReplication reads the text of INFO replication.
func ParseReplication(info string) (Replication, error) {
	fields := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, "#") {
			fields[k] = v
		}
	}
	var r Replication
	switch Role(fields["role"]) {
	case Primary:
		r.Role = Primary
		r.Offset, _ = strconv.ParseInt(fields["master_repl_offset"], 10, 64)
		r.Replicas, _ = strconv.Atoi(fields["connected_slaves"])
	case Replica:
		r.Role = Replica
		r.Offset, _ = strconv.ParseInt(fields["slave_repl_offset"], 10, 64)
		r.PrimaryHost = fields["master_host"]
		r.LinkUp = fields["master_link_status"] == "up" && fields["master_sync_in_progress"] == "0"
	default:
		return r, fmt.Errorf("INFO replication: unknown role %q", fields["role"])
	}
	return r, nil
}
