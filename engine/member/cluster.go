package member

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterView is a cluster-mode member's own view of its cluster (CLUSTER NODES, CLUSTER INFO).
type ClusterView struct {
	ID        string
	Primary   bool           // it says master
	PrimaryID string         // the node it replicates ("" for a primary)
	Slots     [][2]int       // the slots it serves, ranges with both ends included
	Migrating map[int]string // slot → the node ID it migrates the slot to
	Importing map[int]string // slot → the node ID it imports the slot from
	Known     map[string]string
	Serving   map[string]bool // of the nodes it knows, those it sees serving slots
	State     string          // cluster_state: ok or fail
}

// ParseClusterNodes reads the text of CLUSTER NODES into the view of the member that answered
// (the line flagged myself). Nodes still in a handshake are left out: their IDs are temporary.
func ParseClusterNodes(text string) (ClusterView, error) {
	v := ClusterView{Migrating: map[int]string{}, Importing: map[int]string{}, Known: map[string]string{}, Serving: map[string]bool{}}
	self := false
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return ClusterView{}, fmt.Errorf("CLUSTER NODES: a line of %d fields: %q", len(f), line)
		}
		id, flags := f[0], ","+f[2]+","
		addr, _, _ := strings.Cut(f[1], "@")
		if strings.Contains(flags, ",handshake,") {
			continue
		}
		var slots [][2]int
		migrating, importing := map[int]string{}, map[int]string{}
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") {
				inner := strings.Trim(s, "[]")
				if slot, other, ok := strings.Cut(inner, "->-"); ok {
					n, err := strconv.Atoi(slot)
					if err != nil {
						return ClusterView{}, fmt.Errorf("CLUSTER NODES: %q: %w", s, err)
					}
					migrating[n] = other
				} else if slot, other, ok := strings.Cut(inner, "-<-"); ok {
					n, err := strconv.Atoi(slot)
					if err != nil {
						return ClusterView{}, fmt.Errorf("CLUSTER NODES: %q: %w", s, err)
					}
					importing[n] = other
				}
				continue
			}
			lo, hi, isRange := strings.Cut(s, "-")
			a, err := strconv.Atoi(lo)
			b := a
			if err == nil && isRange {
				b, err = strconv.Atoi(hi)
			}
			if err != nil {
				return ClusterView{}, fmt.Errorf("CLUSTER NODES: slots %q: %w", s, err)
			}
			slots = append(slots, [2]int{a, b})
		}
		if strings.Contains(flags, ",myself,") {
			self = true
			v.ID, v.Primary, v.Slots = id, strings.Contains(flags, ",master,"), slots
			v.Migrating, v.Importing = migrating, importing
			if f[3] != "-" {
				v.PrimaryID = f[3]
			}
			continue
		}
		v.Known[id] = addr
		v.Serving[id] = len(slots) > 0
	}
	if !self {
		return ClusterView{}, fmt.Errorf("CLUSTER NODES: no line flagged myself")
	}
	return v, nil
}

// ObserveCluster reads a cluster-mode member's view: CLUSTER NODES and cluster_state.
func ObserveCluster(ctx context.Context, c *redis.Client) (ClusterView, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	nodes, err := c.ClusterNodes(ctx).Result()
	if err != nil {
		return ClusterView{}, fmt.Errorf("member %s: CLUSTER NODES: %w", c.Options().Addr, err)
	}
	v, err := ParseClusterNodes(nodes)
	if err != nil {
		return ClusterView{}, fmt.Errorf("member %s: %w", c.Options().Addr, err)
	}
	info, err := c.ClusterInfo(ctx).Result()
	if err != nil {
		return ClusterView{}, fmt.Errorf("member %s: CLUSTER INFO: %w", c.Options().Addr, err)
	}
	for _, line := range strings.Split(info, "\n") {
		if s, ok := strings.CutPrefix(strings.TrimSpace(line), "cluster_state:"); ok {
			v.State = s
		}
	}
	return v, nil
}

// KeysInSlot counts the member's keys in slot (CLUSTER COUNTKEYSINSLOT).
func KeysInSlot(ctx context.Context, c *redis.Client, slot int) (int64, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	return c.ClusterCountKeysInSlot(ctx, slot).Result()
}

// clusterDo runs one CLUSTER command on the member, bounded in time.
func clusterDo(ctx context.Context, c *redis.Client, args ...interface{}) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	if err := c.Do(ctx, append([]interface{}{"CLUSTER"}, args...)...).Err(); err != nil {
		return fmt.Errorf("member %s: CLUSTER %v: %w", c.Options().Addr, args[0], err)
	}
	return nil
}

// Meet introduces the member to the node at addr (host:port; the bus port is the node's own,
// given with busPort when it is not port+10000: 0 for the default).
func Meet(ctx context.Context, c *redis.Client, addr string, busPort int) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if busPort > 0 {
		return clusterDo(ctx, c, "MEET", host, port, busPort)
	}
	return clusterDo(ctx, c, "MEET", host, port)
}

// AddSlots makes the member serve the slots from to to (CLUSTER ADDSLOTSRANGE).
func AddSlots(ctx context.Context, c *redis.Client, from, to int) error {
	return clusterDo(ctx, c, "ADDSLOTSRANGE", from, to)
}

// AddSlotRanges has the member serve every range ([from, to] each) in one CLUSTER ADDSLOTSRANGE
// per 1,000 ranges: the server saves its configuration once per command, not once per range (a
// restored shard's slots without keys can be thousands of ranges).
func AddSlotRanges(ctx context.Context, c *redis.Client, ranges [][2]int) error {
	for len(ranges) > 0 {
		n := min(len(ranges), 1000)
		args := make([]interface{}, 0, 2*n+1)
		args = append(args, "ADDSLOTSRANGE")
		for _, r := range ranges[:n] {
			args = append(args, r[0], r[1])
		}
		if err := clusterDo(ctx, c, args...); err != nil {
			return err
		}
		ranges = ranges[n:]
	}
	return nil
}

// ReplicateNode makes the member a replica of the node id (CLUSTER REPLICATE).
func ReplicateNode(ctx context.Context, c *redis.Client, id string) error {
	return clusterDo(ctx, c, "REPLICATE", id)
}

// ClusterFailover makes the member, a replica, take its primary's slots in a coordinated handover
// (CLUSTER FAILOVER, neither FORCE nor TAKEOVER): its primary stops taking writes, the replica
// catches up with its offset, is elected and the cluster's configuration moves to it; nothing the
// primary acknowledged is lost.
func ClusterFailover(ctx context.Context, c *redis.Client) error {
	return clusterDo(ctx, c, "FAILOVER")
}

// ForgetNode makes the member forget the node id for a minute (CLUSTER FORGET); every member must.
func ForgetNode(ctx context.Context, c *redis.Client, id string) error {
	return clusterDo(ctx, c, "FORGET", id)
}

// FlushAll drops every key of the member (FLUSHALL): for a master that serves no slot, whose keys
// no client reaches, before it follows its shard's primary.
func FlushAll(ctx context.Context, c *redis.Client) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	if err := c.FlushAll(ctx).Err(); err != nil {
		return fmt.Errorf("member %s: FLUSHALL: %w", c.Options().Addr, err)
	}
	return nil
}

// SetSlotStable closes an open slot on the member (CLUSTER SETSLOT slot STABLE).
func SetSlotStable(ctx context.Context, c *redis.Client, slot int) error {
	return clusterDo(ctx, c, "SETSLOT", slot, "STABLE")
}

// Migration is how MoveSlots carries keys.
type Migration struct {
	// User and Password authenticate the MIGRATEs on the target (User "": default).
	User, Password string
	// Batch is the most keys one MIGRATE carries (0: 100).
	Batch int
	// For is how long one MIGRATE should block the two servers (0: no bound): a MIGRATE that took
	// longer halves the keys of the next, one that took less than half of it doubles them (up to
	// Batch), so that a client's command waits about For at most, whatever the values' sizes.
	For time.Duration
	// Pace, when not nil, is called after each MIGRATE with the time it took (the caller's pacing).
	Pace func(time.Duration)
}

// MoveSlots moves slots and their keys from the member src (node srcID) to dst (node dstID, at
// dstAddr): dst imports every one, src migrates every one, the keys go with MIGRATE as mig says,
// then dst and then src say dst serves them. A write to a key that has already moved is
// redirected (ASK) to dst, which a cluster client follows: nothing acknowledged is lost. Each
// SETSLOT step is one pipeline per member, so that a server takes the step's SETSLOTs in one turn
// of its event loop and saves its cluster configuration (nodes.conf, fsynced) once for them all,
// not once a slot: the saves stalled the primaries' clients, slot after slot. The MIGRATEs go one
// at a time, each of one slot's keys: both servers serve their other clients between two of them,
// so a client's command waits for one MIGRATE at most (a pipeline of them held a write behind all
// of them: the writes' p99 during a move was 10× the idle one), and mig.For bounds how long that
// is. It is safe to run again after a stop in the middle (slots left open are closed the right
// way by the next pass). It returns how many keys moved.
func MoveSlots(ctx context.Context, src, dst *redis.Client, srcID, dstID, dstAddr string, slots []int, mig Migration) (int, error) {
	host, port, err := net.SplitHostPort(dstAddr)
	if err != nil {
		return 0, err
	}
	batch := mig.Batch
	if batch <= 0 {
		batch = 100
	}
	if err := setSlots(ctx, dst, slots, "IMPORTING", srcID); err != nil {
		return 0, err
	}
	if err := setSlots(ctx, src, slots, "MIGRATING", dstID); err != nil {
		return 0, err
	}
	moved, per := 0, batch
	for {
		// The keys still on src in every slot, batch at most per slot.
		cctx, cancel := bounded(ctx)
		cmds, err := src.Pipelined(cctx, func(p redis.Pipeliner) error {
			for _, slot := range slots {
				p.ClusterGetKeysInSlot(cctx, slot, batch)
			}
			return nil
		})
		cancel()
		if err != nil {
			return moved, fmt.Errorf("member %s: CLUSTER GETKEYSINSLOT: %w", src.Options().Addr, err)
		}
		found := false
		// One slot's keys at a time (a MIGRATE's keys must hash to one slot), per keys a MIGRATE.
		for _, c := range cmds {
			keys := c.(*redis.StringSliceCmd).Val()
			for len(keys) > 0 {
				found = true
				n := min(per, len(keys))
				args := []interface{}{"MIGRATE", host, port, "", 0, Timeout.Milliseconds()}
				if mig.User != "" {
					args = append(args, "AUTH2", mig.User, mig.Password)
				} else if mig.Password != "" {
					args = append(args, "AUTH", mig.Password)
				}
				args = append(args, "KEYS")
				for _, k := range keys[:n] {
					args = append(args, k)
				}
				start := time.Now()
				cctx, cancel = bounded(ctx)
				err := src.Do(cctx, args...).Err()
				cancel()
				if err != nil && err != redis.Nil { // NOKEY (all expired meanwhile) is not an error
					return moved, fmt.Errorf("member %s: MIGRATE to %s: %w", src.Options().Addr, dstAddr, err)
				}
				took := time.Since(start)
				moved += n
				keys = keys[n:]
				switch {
				case mig.For > 0 && took > mig.For && per > 1:
					per /= 2
				case mig.For > 0 && took < mig.For/2 && per < batch:
					per = min(batch, per*2)
				}
				if mig.Pace != nil {
					mig.Pace(took)
				}
			}
		}
		if !found {
			break
		}
	}
	// The importing side first: once it owns the slots, the source's redirections point at it.
	if err := setSlots(ctx, dst, slots, "NODE", dstID); err != nil {
		return moved, err
	}
	return moved, setSlots(ctx, src, slots, "NODE", dstID)
}

// setSlots runs CLUSTER SETSLOT <slot> <state> <id> for every slot on the member, in one pipeline.
func setSlots(ctx context.Context, c *redis.Client, slots []int, state, id string) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, slot := range slots {
			p.Do(ctx, "CLUSTER", "SETSLOT", slot, state, id)
		}
		return nil
	})
	if err != nil {
		for i, cmd := range cmds {
			if cmd.Err() != nil {
				return fmt.Errorf("member %s: CLUSTER SETSLOT %d %s: %w", c.Options().Addr, slots[i], state, cmd.Err())
			}
		}
		return fmt.Errorf("member %s: CLUSTER SETSLOT %s: %w", c.Options().Addr, state, err)
	}
	return nil
}
