package member

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// handoverPoll is how often a handover reads the members it waits on: the pause holds every
// client's writes meanwhile, so each poll saved is a few milliseconds of held writes.
const handoverPoll = 5 * time.Millisecond

// HandoverTimes says where a handover's time went.
type HandoverTimes struct {
	// CaughtUp is from the pause to the target's holding every write the primary took.
	CaughtUp time.Duration
	// Promoted is from the pause to the target's answering as master.
	Promoted time.Duration
}

// Handover hands the primary role from primary to its replica target (at host:port, as the
// primary knows it), and returns once target answers as master, with the old primary still
// holding its clients' writes: the caller moves the role labels, then calls Unpause, so that the
// held writes fail (READONLY) when the read-write Service already leads to target.
//
// Redis's own FAILOVER TO waits for the replica to acknowledge the primary's offset. A replica
// acknowledges once a second, and a paused primary does not ask it to (no REPLCONF GETACK while
// writes are paused), so FAILOVER alone holds every write for up to a second. Handover checks the
// catch-up itself:
//  1. CLIENT PAUSE WRITE on the primary: writes are held, not refused, for hold;
//  2. the primary's offset, read once writes are held;
//  3. target's own offset, polled until it is there, on the same history, with its link up,
//     within catchUp;
//  4. FAILOVER TO target TIMEOUT 1 FORCE: target is known to have every write, so forcing the
//     handover loses nothing; the primary demotes itself first and target promotes on its
//     PSYNC FAILOVER, so two masters never take writes;
//  5. target polled until it answers master.
//
// On an error the handover is aborted and the primary's writes resume.
//
// With promote set (the primary cannot reach target as its replica: they serve TLS and plain
// text, in a roll that turns TLS on or off), step 4 is instead: target promotes itself (REPLICAOF
// NO ONE; the primary still holds every write, and target has them all), then the primary is made
// a replica of target (REPLICAOF host port), so that its held writes fail READONLY. Should that
// fail, the primary stays paused until the pause ends, and its fence (min-replicas-to-write, no
// replica following it) refuses writes after it; the next member pass deposes it.
func Handover(ctx context.Context, primary, target *redis.Client, host string, port int, catchUp, hold time.Duration, promote bool) (HandoverTimes, error) {
	var times HandoverTimes
	start := time.Now() // no later than the pause begins on the server
	if err := PauseWrites(ctx, primary, hold); err != nil {
		return times, err
	}
	fail := func(err error) (HandoverTimes, error) {
		_ = AbortFailover(ctx, primary)
		_ = Unpause(ctx, primary)
		return times, err
	}
	p, err := ObserveWith(ctx, primary)
	if err != nil {
		return fail(err)
	}
	if p.Role != Primary {
		return fail(fmt.Errorf("member %s is not a primary (%s)", primary.Options().Addr, p.Role))
	}
	var r Replication
	err = poll(ctx, catchUp, func() (bool, error) {
		r, err = ObserveWith(ctx, target)
		return err == nil && r.Role == Replica && r.LinkUp && r.ReplID == p.ReplID && r.Offset >= p.Offset, err
	})
	if err != nil {
		return fail(fmt.Errorf("member %s did not reach the primary's offset %d within %v (last: %s at %d on %s, %v)",
			target.Options().Addr, p.Offset, catchUp, r.Role, r.Offset, r.ReplID, err))
	}
	times.CaughtUp = time.Since(start)
	// The pause must still hold when FAILOVER's own begins: writes taken after the catch-up was
	// read would not be on target, and FORCE would drop them.
	if left := hold - time.Since(start); left < 2*Timeout {
		return fail(fmt.Errorf("the catch-up took %v of the %v pause; handing over now could lose writes", times.CaughtUp, hold))
	}
	if promote {
		if err := Promote(ctx, target); err != nil {
			return fail(err)
		}
		if err := Follow(ctx, primary, host, port); err != nil {
			// Not resumed: target is the primary now (see above).
			return times, fmt.Errorf("member %s promoted, but the old primary could not be made its replica: %w", target.Options().Addr, err)
		}
		times.Promoted = time.Since(start)
		return times, nil
	}
	if err := forceFailover(ctx, primary, host, port); err != nil {
		return fail(err)
	}
	var old Replication
	err = poll(ctx, hold-time.Since(start)-Timeout, func() (bool, error) {
		r, err = ObserveWith(ctx, target)
		// The old primary is read too: a read wakes its event loop, which forces the handover at
		// its next turn rather than at its next timer (up to 100 ms).
		old, _ = ObserveWith(ctx, primary)
		return err == nil && r.Role == Primary, err
	})
	if err != nil {
		return fail(fmt.Errorf("member %s did not become primary (last: %s, %v; the old primary: %s following %s)",
			target.Options().Addr, r.Role, err, old.Role, old.PrimaryHost))
	}
	times.Promoted = time.Since(start)
	return times, nil
}

// forceFailover sends FAILOVER TO host port TIMEOUT 1 FORCE.
func forceFailover(ctx context.Context, c *redis.Client, host string, port int) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	if err := c.Do(ctx, "FAILOVER", "TO", host, strconv.Itoa(port), "TIMEOUT", "1", "FORCE").Err(); err != nil {
		return fmt.Errorf("member %s: FAILOVER TO %s FORCE: %w", c.Options().Addr, net.JoinHostPort(host, strconv.Itoa(port)), err)
	}
	return nil
}

// Unpause ends a CLIENT PAUSE (CLIENT UNPAUSE): held writes run, or fail on a member that is no
// longer a primary.
func Unpause(ctx context.Context, c *redis.Client) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	if err := c.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
		return fmt.Errorf("member %s: CLIENT UNPAUSE: %w", c.Options().Addr, err)
	}
	return nil
}

// poll calls done every handoverPoll until it reports true, within d; it returns done's last
// error, or a timeout.
func poll(ctx context.Context, d time.Duration, done func() (bool, error)) error {
	deadline := time.Now().Add(d)
	for {
		ok, err := done()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("not within %v", d)
			}
			return err
		}
		select { // polling the members, bounded by the deadline above
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(handoverPoll):
		}
	}
}
