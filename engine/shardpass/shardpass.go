// Package shardpass is a sharded cache's member pass: it reads each member's view of the cluster
// (CLUSTER NODES, CLUSTER INFO and INFO, and its keys in any slot left open), asks shards.Decide
// what the cluster needs next, and carries out that one phase with the member package's cluster
// commands. It decides
// nothing itself and reads no Kubernetes object: the caller gives it the members (from their pods)
// and a client for each, and takes back what it saw (each member's role, the cluster's state) for
// the labels, the status and the metrics. The next pass, after gossip has spread the change, reads
// the members again.
package shardpass

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"example.com/cache-operator/engine/member"
	"example.com/cache-operator/engine/shards"
)

// Member is one member of a sharded cache, from its pod.
type Member struct {
	Name    string // the pod's name
	Shard   int    // the shard its StatefulSet serves
	Ordinal int    // its ordinal in that StatefulSet
	Addr    string // ip:port of its server ("": no address yet)
	Host    string // the node its pod runs on ("": not known)
	// BusPort is its cluster bus port when that is not the server's port + 10000 (0: it is).
	BusPort int
	// Leaving: its pod is being deleted; a primary hands its slots over first.
	Leaving bool
}

// Seen is a member as the pass read it.
type Seen struct {
	Member
	View member.ClusterView
	// Repl is its INFO (replication, keyspace, memory, stats, clients: the metrics' figures), and
	// Keys its keys (what tells a drained shard).
	Repl member.Replication
	Keys int64
	// Err: its server did not answer (View is empty).
	Err error
}

// Result is what a pass saw and did.
type Result struct {
	Seen []Seen
	// Steps is the phase the pass carried out, or the Wait that held it (none: the cluster needs
	// nothing).
	Steps []shards.Step
	// Whole: nothing to do, and every member says cluster_state:ok.
	Whole bool
	// Serving: every member says cluster_state:ok and the cluster needs nothing but a reshard's
	// moves or the spread of its primaries (it is whole but for its layout).
	Serving bool
	// KeysMoved and SlotsMoved count the keys and slots the pass moved between shards.
	KeysMoved, SlotsMoved int
	// SlotsToMove is what the reshard still has to move after the pass (shards.Misplaced), and
	// SlotsKnown whether every member answered so that it could be counted.
	SlotsToMove int
	SlotsKnown  bool
	// Paced: the pass stopped its moves at Pass.MoveFor; the next one goes on.
	Paced bool
	// SwitchDone and SwitchRefused judge spec.SwitchTo (shards.Switch), once every member
	// answered: the member serves its shard's slots, or why it will not.
	SwitchDone    bool
	SwitchRefused string
	// RetiredEmpty: every member answered, no slot is served by any node but the members of the
	// shards below spec.Shards (as every member sees the cluster: a node gone, still listed with
	// slots, counts), and the members of the shards past it hold no key: those shards can go.
	RetiredEmpty bool
}

// Pass runs the passes of one cache.
type Pass struct {
	// Client is the operator's client of a member's server.
	Client func(Member) *redis.Client
	// MigrateUser and MigratePassword authenticate MIGRATE on the receiving member (user "": the
	// default user).
	MigrateUser, MigratePassword string
	// MigrateBatch is the most keys one MIGRATE carries (0: 100); MigrateFor how long one should
	// block the two servers (0: no bound; see member.Migration).
	MigrateBatch int
	MigrateFor   time.Duration
	// MoveFor bounds the time a pass spends moving slots (0: no bound): a reshard goes on over
	// many passes, so that it yields the member worker to other caches, and each pass reads the
	// members again (a member that stops is seen within one budget).
	MoveFor time.Duration
	// MoveShare is the share of the two primaries' time a move may take (0: no bound): after a
	// MIGRATE that took d the pass waits d×(1-MoveShare)/MoveShare, during which the primaries
	// serve only their clients.
	MoveShare float64
}

// Run reads every member, decides and carries out one phase. A step that fails stops the phase
// there; its error is returned with what was seen (the next pass starts again from what the
// members then say).
func (p Pass) Run(ctx context.Context, members []Member, spec shards.Spec) (Result, error) {
	seen := p.observe(ctx, members)
	nodes := p.nodes(ctx, seen)
	res := Result{Seen: seen, Steps: shards.Decide(nodes, spec), SlotsKnown: true}
	ok := true
	for _, s := range seen {
		ok = ok && s.Err == nil && s.View.State == "ok"
		res.SlotsKnown = res.SlotsKnown && s.Err == nil
	}
	if res.SlotsKnown {
		res.SlotsToMove = shards.Misplaced(nodes, spec)
		res.SwitchDone, res.SwitchRefused = shards.Switch(nodes, spec)
	}
	res.RetiredEmpty = res.SlotsKnown && retiredEmpty(seen, spec)
	res.Whole = ok && len(res.Steps) == 0
	res.Serving = ok && shards.Serving(res.Steps)
	if len(res.Steps) == 0 {
		return res, nil
	}
	byName := map[string]Seen{}
	for _, s := range seen {
		byName[s.Name] = s
	}
	var deadline time.Time
	if p.MoveFor > 0 {
		deadline = time.Now().Add(p.MoveFor)
	}
	for _, step := range res.Steps {
		keys, slots, err := p.apply(ctx, step, byName, deadline)
		res.KeysMoved += keys
		res.SlotsMoved += slots
		if step.Reshard {
			res.SlotsToMove = max(0, res.SlotsToMove-slots)
		}
		if errors.Is(err, errPaced) {
			res.Paced = true
			return res, nil
		}
		if err != nil {
			return res, fmt.Errorf("%s (%s): %w", step, step.Why, err)
		}
	}
	return res, nil
}

// errPaced stops a phase at Pass.MoveFor.
var errPaced = errors.New("the pass's time for moves is spent")

// retiredEmpty reports whether only the members of the shards below spec.Shards serve slots, in
// every member's view, and the others hold no key.
func retiredEmpty(seen []Seen, spec shards.Spec) bool {
	kept := map[string]bool{}
	for _, s := range seen {
		if s.Shard < spec.Shards {
			kept[s.View.ID] = true
		}
	}
	for _, s := range seen {
		if s.Shard >= spec.Shards && (len(s.View.Slots) > 0 || s.Keys > 0) {
			return false
		}
		for id, serving := range s.View.Serving {
			if serving && !kept[id] {
				return false
			}
		}
	}
	return true
}

// observe reads every member with an address at once: its view of the cluster and its INFO.
func (p Pass) observe(ctx context.Context, members []Member) []Seen {
	seen := make([]Seen, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		seen[i].Member = m
		if m.Addr == "" {
			seen[i].Err = errors.New("no address yet")
			continue
		}
		wg.Add(1)
		go func(s *Seen) {
			defer wg.Done()
			s.View, s.Err = member.ObserveCluster(ctx, p.Client(s.Member))
			if s.Err == nil {
				s.Repl, s.Err = member.ObserveWith(ctx, p.Client(s.Member))
				s.Keys = s.Repl.Keys
			}
		}(&seen[i])
	}
	wg.Wait()
	sort.Slice(seen, func(i, j int) bool { return seen[i].Name < seen[j].Name })
	return seen
}

// nodes turns what was seen into the planner's nodes, counting each member's keys in the slots
// any member has open (what tells a move left half done from one that never started).
func (p Pass) nodes(ctx context.Context, seen []Seen) []shards.Node {
	open := map[int]bool{}
	for _, s := range seen {
		for slot := range s.View.Migrating {
			open[slot] = true
		}
		for slot := range s.View.Importing {
			open[slot] = true
		}
	}
	nodes := make([]shards.Node, len(seen))
	for i, s := range seen {
		n := shards.Node{Member: s.Name, Shard: s.Shard, Ordinal: s.Ordinal, Addr: s.Addr, Host: s.Host, Leaving: s.Leaving}
		if s.Err == nil {
			v := s.View
			n.Observed, n.ID, n.Primary, n.PrimaryID = true, v.ID, v.Primary, v.PrimaryID
			n.Migrating, n.Importing, n.Known, n.Serving, n.OK = v.Migrating, v.Importing, v.Known, v.Serving, v.State == "ok"
			n.InSync, n.Keys = s.Repl.LinkUp, s.Keys
			if s.Repl.PrimaryHost != "" { // its replication follows a primary, whatever its cluster flags say
				n.Follows = net.JoinHostPort(s.Repl.PrimaryHost, strconv.Itoa(s.Repl.PrimaryPort))
			}
			for _, r := range v.Slots {
				n.Slots = append(n.Slots, shards.Range{From: r[0], To: r[1]})
			}
			n.KeysInOpen = map[int]int64{}
			for slot := range open {
				k, err := member.KeysInSlot(ctx, p.Client(s.Member), slot)
				if err != nil {
					// Unknown counts as unread: the planner waits for a member it cannot read.
					n.Observed = false
					break
				}
				n.KeysInOpen[slot] = k
			}
		}
		nodes[i] = n
	}
	return nodes
}

// apply carries out one step; it returns the keys and slots it moved. A move stops between two
// slots once deadline (when set) has passed, with errPaced.
func (p Pass) apply(ctx context.Context, s shards.Step, byName map[string]Seen, deadline time.Time) (int, int, error) {
	if s.Kind == shards.Move {
		return p.move(ctx, s, byName, deadline)
	}
	return 0, 0, p.command(ctx, s, byName)
}

// command carries out a step that moves no key.
func (p Pass) command(ctx context.Context, s shards.Step, byName map[string]Seen) error {
	self, target := byName[s.Member], byName[s.Target]
	switch s.Kind {
	case shards.Wait:
		return nil
	case shards.Forget:
		// Every member forgets the node, or gossip brings it back.
		var errs []error
		for _, m := range byName {
			// (A replica of the node cannot forget it, "Can't forget my master": it is one of a
			// removed shard's, stopping too, or one the replicate phase moves next.)
			if m.Err == nil && m.View.ID != s.Target && m.View.PrimaryID != s.Target {
				if _, known := m.View.Known[s.Target]; known {
					errs = append(errs, member.ForgetNode(ctx, p.Client(m.Member), s.Target))
				}
			}
		}
		return errors.Join(errs...)
	case shards.Meet:
		return member.Meet(ctx, p.Client(self.Member), s.Addr, target.BusPort)
	case shards.AddSlots:
		rs := make([][2]int, len(s.Slots))
		for i, r := range s.Slots {
			rs[i] = [2]int{r.From, r.To}
		}
		return member.AddSlotRanges(ctx, p.Client(self.Member), rs)
	case shards.Replicate:
		return member.ReplicateNode(ctx, p.Client(self.Member), target.View.ID)
	case shards.Flush:
		return member.FlushAll(ctx, p.Client(self.Member))
	case shards.Restart:
		return nil // the caller starts the server again (it deletes the member's pod)
	case shards.Failover:
		return member.ClusterFailover(ctx, p.Client(self.Member))
	case shards.Stable:
		for _, r := range s.Slots {
			for slot := r.From; slot <= r.To; slot++ {
				if err := member.SetSlotStable(ctx, p.Client(self.Member), slot); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return fmt.Errorf("a step of an unknown kind %q", s.Kind)
}

// move moves the step's slots with their keys, SlotsPerMove at a time (one pipeline per member
// for each SETSLOT step), stopping between two rounds once deadline (when set) has passed.
func (p Pass) move(ctx context.Context, s shards.Step, byName map[string]Seen, deadline time.Time) (int, int, error) {
	self, target := byName[s.Member], byName[s.Target]
	var all []int
	for _, r := range s.Slots {
		for slot := r.From; slot <= r.To; slot++ {
			all = append(all, slot)
		}
	}
	keys, slots := 0, 0
	for len(all) > 0 {
		if !deadline.IsZero() && time.Now().After(deadline) {
			return keys, slots, errPaced
		}
		round := all[:min(SlotsPerMove, len(all))]
		n, err := member.MoveSlots(ctx, p.Client(self.Member), p.Client(target.Member), self.View.ID, target.View.ID, target.Addr, round,
			member.Migration{User: p.MigrateUser, Password: p.MigratePassword, Batch: p.MigrateBatch, For: p.MigrateFor, Pace: p.pace(ctx)})
		keys += n
		if err != nil {
			return keys, slots, err
		}
		slots += len(round)
		all = all[len(round):]
	}
	return keys, slots, nil
}

// pace returns the pacer of MoveSlots for MoveShare (nil: none).
func (p Pass) pace(ctx context.Context) func(time.Duration) {
	if p.MoveShare <= 0 || p.MoveShare >= 1 {
		return nil
	}
	return func(took time.Duration) {
		wait := time.NewTimer(time.Duration(float64(took) * (1 - p.MoveShare) / p.MoveShare))
		defer wait.Stop()
		select {
		case <-wait.C:
		case <-ctx.Done():
		}
	}
}

// SlotsPerMove is how many slots move together: each step of a move (import, migrate, own) is one
// pipeline per member for all of them, and a server saves its cluster configuration once for the
// step rather than once a slot.
const SlotsPerMove = 16
