package dataplane

import (
	"context"

	"k8s.io/klog/v2"

	"example.com/cache-operator/engine/credentials"
	"example.com/cache-operator/engine/member"
	"example.com/cache-operator/engine/roles"
)

// enableAOF turns the AOF on in every member that answered with it off and its data loaded: a
// member that started from a restored snapshot (templates/statefulset.yaml), which it loads with
// the AOF off so as to keep the snapshot's replication history. Every member's configuration says
// appendonly yes, so no other member is ever found so. The server writes the AOF's base in the
// background (a fork) and appends every write after it; a restored cache's first primary is
// elected once its AOF is on (roles.Decide).
//
// A primary's AOF is turned on at once: the writes it takes must be in a file. A replica's waits
// until no member is loading: the fork that writes its base would slow the others' loads (the
// primary's among them), and a replica that restarts without its AOF loses nothing (it resyncs).
func (c *Controller) enableAOF(ctx context.Context, members []roles.Member, cred credentials.Credentials) {
	logger := klog.FromContext(ctx)
	for _, i := range aofToEnable(members) {
		m := &members[i]
		if err := member.EnableAOF(ctx, c.memberClient(*m, cred)); err != nil {
			logger.Info("Could not turn a member's AOF on; retrying at the next pass", "member", m.Name, "err", err)
			continue
		}
		logger.Info("Turned a member's AOF on: it loaded a restored snapshot, and now writes it into its AOF", "member", m.Name)
		m.Repl.AOFOff, m.Repl.AOFRewriting = false, true
	}
}

// aofToEnable returns the indexes of the members whose AOF enableAOF turns on now.
func aofToEnable(members []roles.Member) []int {
	loading := false
	for _, m := range members {
		loading = loading || (m.Observed && m.Repl.Loading)
	}
	var out []int
	for i, m := range members {
		if m.Observed && m.Repl.AOFOff && !m.Repl.Loading && !m.Deleting && (m.Repl.Role == member.Primary || !loading) {
			out = append(out, i)
		}
	}
	return out
}
