// Package member talks to the members of caches, redis-server or valkey-server processes, over
// the network: it reads a member's replication state (INFO replication and keyspace) and changes
// its role (REPLICAOF, FAILOVER, CLIENT PAUSE), with the cache's password and every call bounded
// in time. Valkey speaks the same protocol.
//
// It is not for deciding roles or writing to the cluster: callers (the controller) do that. It
// does not log itself (the client library's own messages, such as failed dials, go to klog at
// verbosity 4), and neither they nor its errors carry the password.
package member

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/klog/v2"
)

// libraryLogger sends the client library's messages to klog at verbosity 4: a member that is down
// is the controller's to report, once, not the library's on every dial.
type libraryLogger struct{}

func (libraryLogger) Printf(_ context.Context, format string, v ...interface{}) {
	klog.V(4).InfoS("redis client: " + fmt.Sprintf(format, v...))
}

func init() { redis.SetLogger(libraryLogger{}) }

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
	// replica (1 while it has never synced since it started).
	Offset int64
	// ReplID is the replication history the member is on (master_replid): offsets compare only
	// between members on the same history.
	ReplID string
	// ReplID2 and SecondOffset are, on a member that was promoted, the history it continued
	// (master_replid2) and the first offset of its own (second_repl_offset; -1: none).
	ReplID2      string
	SecondOffset int64
	// PrimaryHost and PrimaryPort are the primary a replica follows (master_host, master_port).
	PrimaryHost string
	PrimaryPort int
	// LinkUp reports, on a replica, that its link to the primary is up and no sync is in progress.
	LinkUp bool
	// Replicas is the number of replicas connected to a primary.
	Replicas int
	// Keys is the number of keys in all databases (INFO keyspace).
	Keys int64
	// From INFO persistence: Loading, the server is loading its data; AOFOff, its AOF is off (a
	// restored snapshot it loaded and does not persist yet); AOFRewriting, an AOF rewrite runs or
	// waits to (a member whose AOF was just turned on has no AOF to restart from until it ends).
	Loading, AOFOff, AOFRewriting bool
	// Stats are the member's memory, eviction and client figures (INFO memory, stats, clients),
	// read in the same INFO, for the operator's per-member metrics.
	Stats Stats
}

// Stats are a member's figures that the operator exports and decides nothing by.
type Stats struct {
	// UsedMemory is used_memory; MaxMemory is maxmemory (0: no limit).
	UsedMemory, MaxMemory int64
	// EvictedKeys and ExpiredKeys count since the server started (evicted_keys, expired_keys).
	EvictedKeys, ExpiredKeys int64
	// Clients is connected_clients: the clients' connections and the operator's own.
	Clients int64
}

// Pool keeps one connection per member address, so that polling does not dial every time. A
// client is replaced when the user or password it was made with changes.
type Pool struct {
	mu      sync.Mutex
	clients map[string]pooled
	// guard, when set, is asked before every command that changes a member (Mutates).
	guard func() error
	// name is the connections' client name (CLIENT SETNAME; "": none).
	name string
}

type pooled struct {
	c                      *redis.Client
	user, password, tlsKey string
}

// NewPool returns an empty pool.
func NewPool() *Pool { return &Pool{clients: map[string]pooled{}} }

// NewGuardedPool returns an empty pool whose clients ask guard (nil: none) before every command
// that changes a member (Mutates), and fail it with guard's error. Its connections carry the client
// name given ("": none), so that a member's CLIENT LIST tells which process holds them.
func NewGuardedPool(guard func() error, name string) *Pool {
	return &Pool{clients: map[string]pooled{}, guard: guard, name: name}
}

// Client returns the client of the member at addr (host:port), authenticating as the default user.
func (p *Pool) Client(addr, password string) *redis.Client { return p.ClientAs(addr, "", password) }

// ClientAs returns the client of the member at addr (host:port), authenticating as user ("": the
// default user) with password.
func (p *Pool) ClientAs(addr, user, password string) *redis.Client {
	return p.ClientTLS(addr, user, password, nil, "")
}

// ClientTLS returns the client of the member at addr as user with password, over TLS with cfg
// (nil: plain text); tlsKey names cfg, so that a client is replaced when it changes.
func (p *Pool) ClientTLS(addr, user, password string, cfg *tls.Config, tlsKey string) *redis.Client {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.clients[addr]; ok {
		if e.user == user && e.password == password && e.tlsKey == tlsKey {
			return e.c
		}
		_ = e.c.Close()
	}
	c := redis.NewClient(&redis.Options{
		Addr: addr, Username: user, Password: password, ClientName: p.name, TLSConfig: cfg,
		DialTimeout: Timeout, ReadTimeout: Timeout, WriteTimeout: Timeout,
		MaxRetries: -1, PoolSize: 1, MaxIdleConns: 1, ConnMaxIdleTime: time.Minute,
		Protocol: 2, DisableIdentity: true,
		// The replies read are a few hundred bytes; the library's default buffers (hundreds of
		// KiB per connection) would cost most of a gigabyte at 3,000 members.
		ReadBufferSize: 4096, WriteBufferSize: 4096, PipelineReadBufferSize: 4096, PipelineWriteBufferSize: 4096,
	})
	if p.guard != nil {
		c.AddHook(guardHook{guard: p.guard})
	}
	p.clients[addr] = pooled{c: c, user: user, password: password, tlsKey: tlsKey}
	return c
}

// Retain closes the clients of every address not in keep.
func (p *Pool) Retain(keep func(addr string) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for addr, e := range p.clients {
		if !keep(addr) {
			_ = e.c.Close()
			delete(p.clients, addr)
		}
	}
}

// Len is the number of open clients.
func (p *Pool) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.clients)
}

// Close closes every client.
func (p *Pool) Close() { p.Retain(func(string) bool { return false }) }

// bounded is ctx limited to a few Timeouts: no call waits longer, whatever its caller does.
func bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, 3*Timeout)
}

// Observe reads the replication state of the member at addr (host:port) with a client of its own.
func Observe(ctx context.Context, addr, password string) (Replication, error) {
	p := NewPool()
	defer p.Close()
	return ObserveWith(ctx, p.Client(addr, password))
}

// ObserveWith reads the replication state, key count and persistence of the member c talks to.
func ObserveWith(ctx context.Context, c *redis.Client) (Replication, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	// One command for every section (INFO with several sections: Redis 7.0, Valkey): one round
	// trip on the member's one connection, a reply of about 4 KiB.
	info, err := c.Info(ctx, "replication", "keyspace", "persistence", "memory", "stats", "clients").Result()
	if err != nil {
		return Replication{}, fmt.Errorf("member %s: INFO: %w", c.Options().Addr, err)
	}
	r, err := ParseReplication(info)
	if err != nil {
		return r, fmt.Errorf("member %s: %w", c.Options().Addr, err)
	}
	return r, nil
}

// EnableAOF turns the member's AOF on (CONFIG SET appendonly yes): the server writes its dataset
// as the AOF's base in the background (a fork) and appends every write from then on.
func EnableAOF(ctx context.Context, c *redis.Client) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	if err := c.ConfigSet(ctx, "appendonly", "yes").Err(); err != nil {
		return fmt.Errorf("member %s: CONFIG SET appendonly yes: %w", c.Options().Addr, err)
	}
	return nil
}

// Promote makes the member a primary (REPLICAOF NO ONE). Its dataset and offset are kept.
func Promote(ctx context.Context, c *redis.Client) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	if err := c.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		return fmt.Errorf("member %s: REPLICAOF NO ONE: %w", c.Options().Addr, err)
	}
	return nil
}

// Follow makes the member a replica of the primary at host:port (REPLICAOF host port). A member
// that already follows it is left as it is.
func Follow(ctx context.Context, c *redis.Client, host string, port int) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	if err := c.Do(ctx, "REPLICAOF", host, strconv.Itoa(port)).Err(); err != nil {
		return fmt.Errorf("member %s: REPLICAOF %s: %w", c.Options().Addr, net.JoinHostPort(host, strconv.Itoa(port)), err)
	}
	return nil
}

// AbortFailover stops a handover in progress (FAILOVER ABORT); none in progress is not an error.
func AbortFailover(ctx context.Context, c *redis.Client) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	err := c.Do(ctx, "FAILOVER", "ABORT").Err()
	if err != nil && !strings.Contains(err.Error(), "No failover in progress") {
		return fmt.Errorf("member %s: FAILOVER ABORT: %w", c.Options().Addr, err)
	}
	return nil
}

// PauseWrites makes the member hold every write command for d (CLIENT PAUSE d WRITE): a fence for
// a primary that must stop taking writes before another is promoted.
func PauseWrites(ctx context.Context, c *redis.Client, d time.Duration) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	if err := c.Do(ctx, "CLIENT", "PAUSE", strconv.FormatInt(d.Milliseconds(), 10), "WRITE").Err(); err != nil {
		return fmt.Errorf("member %s: CLIENT PAUSE: %w", c.Options().Addr, err)
	}
	return nil
}

// DisconnectClients closes the member's normal client connections (CLIENT KILL TYPE normal; not
// this one, not its replicas'), so that its clients reconnect through a Service. It returns how
// many it closed.
func DisconnectClients(ctx context.Context, c *redis.Client) (int64, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	n, err := c.Do(ctx, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Int64()
	if err != nil {
		return 0, fmt.Errorf("member %s: CLIENT KILL TYPE normal: %w", c.Options().Addr, err)
	}
	return n, nil
}

// Settings reads the member's values of the named settings (CONFIG GET, one per name, pipelined
// in one round trip). A name the server does not know is missing from the result.
func Settings(ctx context.Context, c *redis.Client, names []string) (map[string]string, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	cmds := make([]*redis.MapStringStringCmd, len(names))
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, n := range names {
			cmds[i] = p.ConfigGet(ctx, n)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("member %s: CONFIG GET: %w", c.Options().Addr, err)
	}
	out := make(map[string]string, len(names))
	for i, n := range names {
		if v, ok := cmds[i].Val()[n]; ok {
			out[n] = v
		}
	}
	return out, nil
}

// ApplySettings sets each setting on the member while it runs (CONFIG SET, pipelined in one round
// trip), in the order of names.
func ApplySettings(ctx context.Context, c *redis.Client, names []string, settings map[string]string) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	cmds := make([]*redis.StatusCmd, len(names))
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, n := range names {
			cmds[i] = p.ConfigSet(ctx, n, settings[n])
		}
		return nil
	})
	if err != nil {
		for i, cmd := range cmds {
			if cmd.Err() != nil {
				return fmt.Errorf("member %s: CONFIG SET %s: %w", c.Options().Addr, names[i], cmd.Err())
			}
		}
		return fmt.Errorf("member %s: CONFIG SET: %w", c.Options().Addr, err)
	}
	return nil
}

// ParseSettings reads redis.conf lines ("name value"; blank lines and # comments skipped) into
// settings and their names in order. A line without a value, or a name given twice, is an error.
func ParseSettings(text string) (map[string]string, []string, error) {
	settings := map[string]string{}
	var names []string
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, " ")
		name, value = strings.ToLower(name), strings.TrimSpace(value)
		if !ok || value == "" {
			return nil, nil, fmt.Errorf("line %d: %q has no value", i+1, name)
		}
		if _, dup := settings[name]; dup {
			return nil, nil, fmt.Errorf("line %d: %q given twice", i+1, name)
		}
		settings[name] = value
		names = append(names, name)
	}
	return settings, names, nil
}

// ParseReplication reads the text of INFO replication (and persistence, memory, stats, clients
// and keyspace, when there), in one pass over the text that keeps no field it does not use.
func ParseReplication(info string) (Replication, error) {
	var r Replication
	var role, loading, aofEnabled, rewriting, scheduled, linkStatus, syncing string
	var primaryOffset, replicaOffset int64
	number := func(v string) int64 { n, _ := strconv.ParseInt(v, 10, 64); return n }
	eachField(info, func(k, v string) {
		switch k {
		case "role":
			role = v
		case "loading":
			loading = v
		case "aof_enabled":
			aofEnabled = v
		case "aof_rewrite_in_progress":
			rewriting = v
		case "aof_rewrite_scheduled":
			scheduled = v
		case "master_replid":
			r.ReplID = v
		case "master_replid2":
			r.ReplID2 = v
		case "second_repl_offset":
			r.SecondOffset = number(v)
		case "master_repl_offset":
			primaryOffset = number(v)
		case "slave_repl_offset":
			replicaOffset = number(v)
		case "connected_slaves":
			r.Replicas = int(number(v))
		case "master_host":
			r.PrimaryHost = v
		case "master_port":
			r.PrimaryPort = int(number(v))
		case "master_link_status":
			linkStatus = v
		case "master_sync_in_progress":
			syncing = v
		case "used_memory":
			r.Stats.UsedMemory = number(v)
		case "maxmemory":
			r.Stats.MaxMemory = number(v)
		case "evicted_keys":
			r.Stats.EvictedKeys = number(v)
		case "expired_keys":
			r.Stats.ExpiredKeys = number(v)
		case "connected_clients":
			r.Stats.Clients = number(v)
		default:
			if strings.HasPrefix(k, "db") {
				r.Keys += dbKeys(v)
			}
		}
	})
	r.Loading = loading == "1"
	r.AOFOff = aofEnabled == "0"
	r.AOFRewriting = rewriting == "1" || scheduled == "1"
	switch Role(role) {
	case Primary:
		r.Role, r.Offset = Primary, primaryOffset
	case Replica:
		r.Role, r.Offset = Replica, replicaOffset
		r.LinkUp = linkStatus == "up" && syncing == "0"
	default:
		return r, fmt.Errorf("INFO replication: unknown role %q", role)
	}
	return r, nil
}

// ParseKeys sums the keys of every database in the text of INFO keyspace
// (db0:keys=3,expires=0,avg_ttl=0).
func ParseKeys(info string) int64 {
	var n int64
	eachField(info, func(k, v string) {
		if strings.HasPrefix(k, "db") {
			n += dbKeys(v)
		}
	})
	return n
}

// dbKeys is the keys= count of one INFO keyspace line's value.
func dbKeys(v string) int64 {
	for part := range strings.SplitSeq(v, ",") {
		if name, val, ok := strings.Cut(part, "="); ok && name == "keys" {
			c, _ := strconv.ParseInt(val, 10, 64)
			return c
		}
	}
	return 0
}

// eachField calls f with each "key:value" line of an INFO reply (comments and blank lines
// skipped); key and value are slices of info, not copies.
func eachField(info string, f func(k, v string)) {
	for line := range strings.SplitSeq(info, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			f(k, v)
		}
	}
}

// Forget closes the client of the member at addr, if there is one.
func (p *Pool) Forget(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.clients[addr]; ok {
		_ = e.c.Close()
		delete(p.clients, addr)
	}
}
