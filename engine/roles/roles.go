// Package roles decides who a cache's primary is and what a member pass does next: elections,
// failovers, switchovers and the order of a roll, as one pure function (Decide) of the members'
// pods and what their servers report. It talks to nothing; package dataplane reads the members and
// carries the decision out.
package roles

import (
	"fmt"
	"strconv"
	"strings"

	"sort"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/member"
)

// Member is one member of a cache as a member pass sees it: its pod from the informer cache
// and, when its server answered, its replication state.
type Member struct {
	Name    string
	UID     types.UID
	Ordinal int
	IP      string
	Label   string // the pod's role label
	// ReadWrite: the pod has the read-write label (the read-write Service leads to it).
	ReadWrite bool
	// TLS: the member serves TLS only (its pod's api.LabelTLS).
	TLS      bool
	PodReady bool
	// Stopped: the pod's server container is not running (it exited, or waits to restart).
	Stopped  bool
	Deleting bool
	Revision string // the pod's controller-revision-hash
	// Server is the server its pod runs, "<engine>-<version>" (api.LabelServer; "": not known).
	Server   string
	Observed bool // its server answered (Repl is valid)
	Repl     member.Replication
	// ConfigRevision is the revision of the live settings its server was found with or given in
	// this pass ("" if not known); ConfigError why it could not be given them.
	ConfigRevision, ConfigError string
	// PasswordRevision is the revision of the clients' password its server was found with or
	// given in this pass (0 if not known); AuthError why it could not be given it.
	PasswordRevision int64
	AuthError        string
	// Stuck is why its pod's server container cannot start (an image that cannot be pulled, a
	// container that cannot be created or keeps crashing); "" when it is not stuck.
	Stuck string
}

// Stuck returns the members to replace at once: each is stuck (its container cannot start, so it
// serves nothing) on another revision than the StatefulSet's update revision, and is not already
// being deleted. The StatefulSet (update strategy OnDelete) never replaces such a pod by itself,
// and a roll waits for a whole cache: without this, a cache whose members were made from a
// template since reverted (a StatefulSet deleted and re-made, an image edited by hand) would wait
// for ever. Replacing one loses nothing: it serves nothing, and its volume is kept. A member stuck
// on the update revision is left alone: it would be made anew just the same.
func Stuck(members []Member, updateRevision string) []Member {
	if updateRevision == "" {
		return nil
	}
	var out []Member
	for _, m := range members {
		if m.Stuck != "" && m.Revision != "" && m.Revision != updateRevision && !m.Deleting && !m.Observed {
			out = append(out, m)
		}
	}
	return out
}

func (m Member) IsPrimary() bool { return m.Observed && m.Repl.Role == member.Primary }

// HealthyPrimary returns the current primary: a member labelled primary whose server says master
// and whose pod is not being deleted (the first by ordinal if somehow several are; the others are
// fenced). Nil when there is none.
func HealthyPrimary(members []Member) *Member {
	for i := range members {
		if m := members[i]; m.Label == api.RolePrimary && m.IsPrimary() && !m.Deleting {
			return &members[i]
		}
	}
	return nil
}

// OrdinalOf returns the ordinal of a StatefulSet member named <cacheName>-<ordinal>.
func OrdinalOf(cacheName, pod string) (int, bool) {
	ord, err := strconv.Atoi(strings.TrimPrefix(pod, cacheName+"-"))
	return ord, err == nil && pod == cacheName+"-"+strconv.Itoa(ord)
}

// View is what Decide works from.
type View struct {
	Now     time.Time
	Members []Member // by ordinal
	// Delay is spec.failover.delaySeconds.
	Delay time.Duration
	// UnhealthySince is when the primary was first seen gone (or no primary at all); zero while
	// a primary is healthy. The caller keeps it between passes.
	UnhealthySince time.Time
	// SwitchoverTo is the member named by the switchover annotation.
	SwitchoverTo string
	// UpdateRevision is the StatefulSet's update revision; members on another revision roll.
	UpdateRevision string
	// Replicas is spec.replicas: members at or above it are on their way out.
	Replicas int
	// History is the replication ID of the last healthy primary the pass saw ("": none since
	// the operator started; then the history most members holding data share).
	History string
	// RestoreFrom is the member a new cache's restore fills (spec.restore, until it completed):
	// the first primary is that member and no other, whichever answers first, so that a member
	// that started empty never becomes the primary the restored one then syncs from; and only
	// once it loaded the backup and its AOF is on.
	RestoreFrom string
	// Reset, when set, is why the roll cannot keep the data (a version change its data format
	// cannot survive, which the cache allows): every member on another revision restarts at once,
	// with no handover, and starts empty on the new one.
	Reset string
	// Prefer is the member to elect when there is no primary (a resumed cache's primary from
	// before it hibernated): elected once it answers, has loaded its data and holds keys (or no
	// member does); waited for up to RestoreWait, then the election goes on without it.
	Prefer string
	// LastPrimary is the member the caller last saw as the healthy primary ("": none since it
	// started, or since the cache hibernated or reset). With no member labelled primary, it is the
	// primary that is gone: a pod deleted and made anew loses its label, and replacing it is a
	// failover, not a first election.
	LastPrimary string
	// LastPrimaryStopped: the caller saw LastPrimary's pod being deleted while it still served
	// (a graceful stop: its server writes its AOF as it stops), not a crash.
	LastPrimaryStopped bool
}

// RestoreWait is how long a restored cache's first primary waits, at most, for every member to
// answer (each then ran its own restore) before it is elected: pods made late (a volume bound
// late, a slow node) still restore instead of copying the dataset in full.
const RestoreWait = 30 * time.Second

// Action is what a member pass does next. At most one of Promote (a failover or a first
// primary), SwitchTo (a handover from a live primary) and Delete (a rolling restart) is set.
type Action struct {
	// Primary is the member that is, or is about to become, the primary ("" while there is none).
	Primary string
	// From is the primary being replaced by Promote or SwitchTo, if any.
	From string
	// Promote is set when Primary must be promoted (REPLICAOF NO ONE) first.
	Promote bool
	// SwitchTo is the replica a live primary hands over to (FAILOVER TO), Primary being the old one.
	SwitchTo string
	// Follow are the members to point at Primary (REPLICAOF).
	Follow []string
	// Labels are the role labels to set, member by member (only those that differ).
	Labels map[string]string
	// Delete is the member whose pod is deleted to roll it to the update revision.
	Delete string
	// DeleteAll are the members whose pods are deleted at once (a Reset).
	DeleteAll []string
	// WaitUntil, when set, is when the pass must look again (the failover delay runs).
	WaitUntil time.Time
	// Degraded, when set, is why the cache is not whole (a reason and a message).
	Degraded, DegradedMessage string
	// LostBytes is how far the promoted member was behind the lost primary's last offset.
	LostBytes int64
}

// Decide decides, from the members' pods and what their servers report, who the primary is
// and what to do next. It is pure: the member pass carries the action out.
//
// The rules:
//   - The primary is the member labelled primary whose server reports master. A labelled member
//     whose server reports replica has restarted (members always start as replicas), and one
//     whose container is not running or whose pod is being deleted is down: either is gone at
//     once. One that does not answer is gone after Delay.
//   - A labelled primary whose pod is being deleted (a delete, an eviction, a scale-down) while
//     its server still says master hands over (FAILOVER TO) to the most caught-up replica in
//     sync with it; its preStop hook holds the pod until then.
//   - A gone primary is replaced by the member with the most of its history: the highest
//     replication offset among the members on the old primary's replication ID, then data, then
//     the most keys, then the lowest ordinal (bestCandidate).
//   - With no labelled primary (a new cache, or one made before roles), a member whose server
//     already reports master with data is kept; otherwise the best member is promoted, once every
//     member answered or Delay passed.
//   - Every other member follows the primary's address; labels follow roles.
//   - Rolls run one member at a time while the cache is whole: replicas first, highest ordinal
//     first, then a handover from the old primary to an updated replica.
func Decide(v View, lastPrimaryOffset int64) Action {
	var act Action
	if v.Reset != "" && v.UpdateRevision != "" {
		// Every member on the old revision goes at once; nothing is elected, followed or handed
		// over until they are all on the new one (and empty).
		old := 0
		for _, m := range v.Members {
			if m.Revision != v.UpdateRevision {
				old++
				if !m.Deleting {
					act.DeleteAll = append(act.DeleteAll, m.Name)
				}
			}
		}
		if old > 0 {
			act.Degraded, act.DegradedMessage = api.ReasonRolling, "every member restarts at once on the new revision and discards its data: "+v.Reset
			return act
		}
	}
	byName := map[string]Member{}
	var labelled []Member
	for _, m := range v.Members {
		byName[m.Name] = m
		if m.Label == api.RolePrimary {
			labelled = append(labelled, m)
		}
	}
	history := v.History
	if history == "" {
		history = commonHistory(v.Members)
	}
	// A planned removal (the primary's pod deleted, evicted or scaled away) while its server
	// still runs: hand over to the most caught-up replica in sync with it, which the pod's
	// preStop hook waits for, instead of a failover at whatever offset the replicas have.
	for _, m := range labelled {
		if !m.Deleting || m.Stopped || !m.IsPrimary() {
			continue
		}
		var inSync []Member
		for _, r := range v.Members {
			if r.Name != m.Name && r.Observed && !r.Deleting && r.Repl.Role == member.Replica && r.Repl.LinkUp &&
				r.Repl.PrimaryHost == m.IP && r.Repl.PrimaryPort == api.Port {
				inSync = append(inSync, r)
			}
		}
		if t, ok := bestCandidate(inSync, "", m.Repl.ReplID); ok {
			act.Primary, act.SwitchTo, act.From = m.Name, t.Name, m.Name
			act.Degraded, act.DegradedMessage = api.ReasonHandingOver, fmt.Sprintf("primary %s is being removed; handing over to %s", m.Name, t.Name)
			act.Labels = map[string]string{}
			return act
		}
	}
	primary := HealthyPrimary(v.Members)
	// The operator's own reading of the server is the test of health: the pod's readiness probe
	// says the same later (a primary is ready when it answers), and a node that stops reporting
	// leaves its pods Ready for a while.
	healthy := primary != nil
	if healthy {
		act.Primary = primary.Name
	} else {
		// No healthy primary. A labelled member that answers as a replica restarted: it is gone
		// now. Otherwise wait out the delay (a member that does not answer may be busy).
		restarted := false
		from := ""
		for _, m := range labelled {
			from = m.Name
			if m.Deleting || m.Stopped || (m.Observed && m.Repl.Role == member.Replica) {
				// Gone for sure, not merely slow: a deleted pod, a server that is not running,
				// or one that restarted (members start as replicas).
				restarted = true
			}
		}
		if from == "" && v.LastPrimary != "" {
			m, present := byName[v.LastPrimary]
			if !present || !m.IsPrimary() {
				from = v.LastPrimary
				restarted = !present || m.Deleting || m.Stopped || (m.Observed && m.Repl.Role == member.Replica)
			}
		}
		allAnswer := true
		for _, m := range v.Members {
			if !m.Observed && !m.Deleting {
				allAnswer = false
			}
		}
		waited := !v.Now.Before(v.UnhealthySince.Add(v.Delay))
		// While the delay runs nothing moves: labels stay, so a primary that is merely slow
		// keeps the read-write Service.
		if from == "" && v.RestoreFrom != "" {
			m, ok := byName[v.RestoreFrom]
			if !ok || !m.Observed || m.Deleting {
				act.WaitUntil = v.Now.Add(v.Delay)
				act.Degraded, act.DegradedMessage = api.ReasonNoPrimary, fmt.Sprintf("no primary yet; waiting for %s, which restores the backup", v.RestoreFrom)
				act.Labels = map[string]string{}
				return act
			}
			if m.Repl.Loading || m.Repl.AOFOff {
				// It loads the backup, or loaded it and has no AOF yet (the member pass turns it
				// on): every write it took would be in no file. Once on, the AOF's base is
				// written in the background, and each write is appended after it; a restart
				// before the base is whole starts the member as a replica (the start script: a
				// snapshot without an AOF may be older than what it served), and its replicas,
				// which resynced at once, take over as after any loss of a primary.
				act.WaitUntil = v.Now.Add(time.Second)
				act.Degraded, act.DegradedMessage = api.ReasonNoPrimary, fmt.Sprintf("no primary yet; waiting for %s to load the backup and turn its AOF on", m.Name)
				act.Labels = map[string]string{}
				return act
			}
			if until := v.UnhealthySince.Add(max(v.Delay, RestoreWait)); !allAnswer && v.Now.Before(until) {
				// Every member restores the backup in its init container while the restore has
				// not completed; the election completes it. A member whose server does not
				// answer yet may not have started that container (its pod made late): it would
				// then start empty and copy the dataset in full. Wait for every member, for a
				// while.
				act.WaitUntil = until
				act.Degraded, act.DegradedMessage = api.ReasonNoPrimary, fmt.Sprintf("no primary yet; %s restored the backup, waiting for every member to restore it too", m.Name)
				act.Labels = map[string]string{}
				return act
			}
			act.Primary, act.Promote = m.Name, !m.IsPrimary()
			act.Degraded, act.DegradedMessage = api.ReasonNoPrimary, fmt.Sprintf("electing %s, which restored the backup", m.Name)
			return finishLabels(v, act, byName)
		}
		if from == "" && v.Prefer != "" {
			m, ok := byName[v.Prefer]
			if ok && m.Observed && !m.Deleting && !m.Repl.Loading && (m.Repl.Keys > 0 || !anyKeys(v.Members)) {
				act.Primary, act.Promote = m.Name, !m.IsPrimary()
				act.Degraded, act.DegradedMessage = api.ReasonNoPrimary, fmt.Sprintf("electing %s, the primary before the cache hibernated", m.Name)
				return finishLabels(v, act, byName)
			}
			if until := v.UnhealthySince.Add(max(v.Delay, RestoreWait)); v.Now.Before(until) && (!ok || !m.Observed || m.Repl.Loading) {
				act.WaitUntil = v.Now.Add(min(until.Sub(v.Now), time.Second)) // it may answer any moment
				act.Degraded, act.DegradedMessage = api.ReasonNoPrimary, fmt.Sprintf("no primary yet; waiting for %s, the primary before the cache hibernated, to load its data", v.Prefer)
				act.Labels = map[string]string{}
				return act
			}
		}
		if from == "" && !allAnswer && !waited {
			act.WaitUntil = v.UnhealthySince.Add(v.Delay)
			act.Degraded, act.DegradedMessage = api.ReasonNoPrimary, "no primary yet; waiting for every member to answer"
			act.Labels = map[string]string{}
			return act
		}
		if from != "" && !restarted && !waited {
			act.WaitUntil = v.UnhealthySince.Add(v.Delay)
			act.Degraded, act.DegradedMessage = api.ReasonPrimaryUnreachable, fmt.Sprintf("primary %s does not answer; replaced after %v", from, v.Delay)
			act.Labels = map[string]string{}
			return act
		}
		if t, ok := handedOverTo(v.Members, labelled); ok {
			// A handover finished, and the labels did not move (the operator stopped between
			// FAILOVER TO and the labels): the member the old primary follows is the primary.
			act.Primary, act.From = t.Name, from
			act.Degraded, act.DegradedMessage = api.ReasonHandingOver, fmt.Sprintf("primary %s handed over to %s; moving the role labels", from, t.Name)
			return finishLabels(v, act, byName)
		}
		if from != "" && (v.LastPrimaryStopped || !continued(v.Members, from)) {
			// The lost primary stopped on purpose (its pod deleted while it served, and the
			// handover did not happen: every pod was deleted, a StatefulSet with them), or every
			// member restarted (none has replicated anything since it started): no replica can be
			// shown to hold what the primary acknowledged last, and the lost primary, back on its
			// volume, holds all of it (it wrote its AOF as it stopped). It is elected again once
			// it answers with its data; it is waited for, as a resumed cache's primary is, before
			// the election goes on without it.
			m, present := byName[from]
			if present && m.Observed && !m.Deleting && !m.Repl.Loading && (m.Repl.Keys > 0 || !anyKeys(v.Members)) {
				act.Primary, act.From, act.Promote = m.Name, from, true
				act.Degraded, act.DegradedMessage = api.ReasonFailingOver, fmt.Sprintf("every member restarted; promoting %s again, the primary before, back with its data", m.Name)
				return finishLabels(v, act, byName)
			}
			if until := v.UnhealthySince.Add(max(v.Delay, RestoreWait)); v.Now.Before(until) && (!present || m.Deleting || !m.Observed || m.Repl.Loading) {
				act.WaitUntil = v.Now.Add(min(until.Sub(v.Now), time.Second)) // it may answer any moment
				act.Degraded, act.DegradedMessage = api.ReasonNoPrimary, fmt.Sprintf("every member restarted; waiting for %s, the primary before, to come back with its data", from)
				act.Labels = map[string]string{}
				return act
			}
		}
		best, ok := bestCandidate(v.Members, from, history)
		if !ok {
			act.Degraded, act.DegradedMessage = api.ReasonNoPrimary, "no member answers; nothing to promote"
			act.WaitUntil = v.Now.Add(v.Delay)
			act.Labels = map[string]string{}
			return act
		}
		act.Primary, act.From = best.Name, from
		act.Promote = !best.IsPrimary()
		if from != "" {
			act.Promote = true // a failover always promotes, even a member that says master
			if lastPrimaryOffset > best.Repl.Offset {
				act.LostBytes = lastPrimaryOffset - best.Repl.Offset
			}
			act.Degraded, act.DegradedMessage = api.ReasonFailingOver, fmt.Sprintf("primary %s is gone; promoting %s", from, best.Name)
		} else if !act.Promote {
			act.Degraded, act.DegradedMessage = api.ReasonNoPrimary, fmt.Sprintf("electing %s, which already serves as primary", best.Name)
		} else {
			act.Degraded, act.DegradedMessage = api.ReasonNoPrimary, fmt.Sprintf("electing %s", best.Name)
		}
	}

	act = finishLabels(v, act, byName)
	if act.Promote || act.Primary == "" || !healthy {
		return act
	}

	// A healthy primary: degraded members, a switchover, a roll.
	whole := true
	var lagging []Member // replicas that answer but are not in sync
	for _, m := range v.Members {
		switch {
		case m.Name == act.Primary:
		case !m.Observed:
			whole = false
			if act.Degraded == "" {
				act.Degraded, act.DegradedMessage = api.ReasonMemberUnreachable, fmt.Sprintf("member %s does not answer", m.Name)
			}
		case !m.Repl.LinkUp || !m.PodReady:
			whole = false
			lagging = append(lagging, m)
			if act.Degraded == "" {
				act.Degraded, act.DegradedMessage = api.ReasonReplicaNotInSync, fmt.Sprintf("replica %s is not in sync with %s", m.Name, act.Primary)
			}
		}
	}
	if p := byName[act.Primary]; !whole && len(act.Follow) == 0 && len(act.Labels) == 0 && len(lagging) == 1 && v.UpdateRevision != "" &&
		lagging[0].Revision != v.UpdateRevision && lagging[0].TLS != p.TLS && !lagging[0].Deleting && lagging[0].Ordinal < v.Replicas {
		// The one member out of sync is still on the old revision and serves in the other mode
		// (TLS or plain text) than the primary, every other member is whole: it is rolled now,
		// not waited for. It may never sync: the old primary after the handover of a roll that
		// turned TLS on, which has no TLS files to reach the new primary with.
		act.Delete = lagging[0].Name
		return act
	}
	// Whole also means every wanted member has a pod that is not going away: a replica deleted to
	// roll it and not yet made anew must not let the roll take the next one (or, with every
	// replica gone, the primary).
	present := map[int]bool{}
	for _, m := range v.Members {
		if m.Ordinal < v.Replicas && !m.Deleting {
			present[m.Ordinal] = true
		}
	}
	for i := 0; i < v.Replicas; i++ {
		if !present[i] {
			whole = false
			if act.Degraded == "" {
				act.Degraded, act.DegradedMessage = api.ReasonMemberUnreachable, fmt.Sprintf("member %d has no pod (or its pod is being deleted)", i)
			}
			break
		}
	}
	if len(act.Follow) > 0 || len(act.Labels) > 0 || !whole {
		return act
	}
	if t, ok := byName[v.SwitchoverTo]; ok && t.Name != act.Primary && t.Ordinal < v.Replicas {
		act.SwitchTo, act.From = t.Name, act.Primary
		return act
	}
	if primary.Ordinal >= v.Replicas {
		// A scale-down removes the primary's ordinal: hand over to a member that stays first.
		var staying []Member
		for _, m := range v.Members {
			if m.Ordinal < v.Replicas {
				staying = append(staying, m)
			}
		}
		if t, ok := bestCandidate(staying, "", history); ok {
			act.SwitchTo, act.From = t.Name, act.Primary
			return act
		}
	}
	var outdated []Member
	for _, m := range v.Members {
		if v.UpdateRevision != "" && m.Revision != v.UpdateRevision {
			outdated = append(outdated, m)
		}
	}
	if len(outdated) == 0 {
		return act
	}
	act.Degraded, act.DegradedMessage = api.ReasonRolling, fmt.Sprintf("%d members to restart on the new revision", len(outdated))
	for i := len(outdated) - 1; i >= 0; i-- {
		if outdated[i].Name != act.Primary {
			act.Delete = outdated[i].Name
			return act
		}
	}
	// Only the primary is left: hand over to the updated replica with the most data first.
	var updated []Member
	for _, m := range v.Members {
		if m.Name != act.Primary && m.Revision == v.UpdateRevision && m.Ordinal < v.Replicas {
			updated = append(updated, m)
		}
	}
	if t, ok := bestCandidate(updated, "", history); ok {
		act.SwitchTo, act.From = t.Name, act.Primary
		return act
	}
	act.Delete = act.Primary // a cache of one: nothing to hand over to
	return act
}

// finishLabels sets the labels that follow act.Primary, and the members to point at it.
func finishLabels(v View, act Action, byName map[string]Member) Action {
	act.Labels = map[string]string{}
	p, havePrimary := byName[act.Primary]
	for _, m := range v.Members {
		want := api.RoleReplica
		if m.Name == act.Primary {
			want = api.RolePrimary
		}
		if m.Label != want && (m.Observed || want == api.RoleReplica || m.Name == act.Primary) {
			act.Labels[m.Name] = want
		}
		// Followers: every other member that answers and does not follow the primary's address.
		if havePrimary && m.Name != act.Primary && m.Observed && !m.Deleting && p.IP != "" &&
			(m.Repl.Role != member.Replica || m.Repl.PrimaryHost != p.IP || m.Repl.PrimaryPort != api.Port) {
			act.Follow = append(act.Follow, m.Name)
		}
	}
	return act
}

// handedOverTo finds the member a labelled primary handed over to: the labelled primary answers
// as a replica of that member's own address (a member that restarted follows the read-write
// Service instead), and that member answers as master.
func handedOverTo(members, labelled []Member) (Member, bool) {
	for _, l := range labelled {
		if !l.Observed || l.Repl.Role != member.Replica || l.Repl.PrimaryHost == "" {
			continue
		}
		for _, t := range members {
			if t.Name != l.Name && t.Observed && !t.Deleting && t.IsPrimary() && t.IP == l.Repl.PrimaryHost && l.Repl.PrimaryPort == api.Port {
				return t, true
			}
		}
	}
	return Member{}, false
}

// bestCandidate returns the member to promote or hand over to among those that answer (all but
// exclude, unless it is the only one): the highest replication offset among the members on the
// replication history given (the old primary's ID: offsets compare only within one history),
// then, on a tie or with no history known, the member holding keys, the most keys, and the lowest
// ordinal. A member that restarted empty starts a new history at offset 0, so it never wins while
// a member of the old history answers.
func bestCandidate(members []Member, exclude, history string) (Member, bool) {
	var cands []Member
	var excluded *Member
	for i, m := range members {
		if !m.Observed || m.Deleting {
			continue
		}
		if m.Name == exclude {
			excluded = &members[i]
			continue
		}
		cands = append(cands, m)
	}
	if len(cands) == 0 && excluded != nil {
		cands = append(cands, *excluded)
	}
	if len(cands) == 0 {
		return Member{}, false
	}
	onHistory := func(m Member) bool { return history != "" && m.Repl.ReplID == history }
	sort.SliceStable(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if onHistory(a) != onHistory(b) {
			return onHistory(a)
		}
		if !onHistory(a) && (a.Repl.Keys > 0) != (b.Repl.Keys > 0) {
			return a.Repl.Keys > 0 // off the history, offsets mean nothing: data first
		}
		if a.Repl.Offset != b.Repl.Offset {
			return a.Repl.Offset > b.Repl.Offset
		}
		if (a.Repl.Keys > 0) != (b.Repl.Keys > 0) {
			return a.Repl.Keys > 0
		}
		if a.Repl.Keys != b.Repl.Keys {
			return a.Repl.Keys > b.Repl.Keys
		}
		return a.Ordinal < b.Ordinal
	})
	return cands[0], true
}

// continued reports whether a member other than the lost primary from still carries a primary's
// replication stream: a replica that has replicated since it started, or a member that says
// master. A replica that has never synced since it started reports slave_repl_offset 1 (its offset
// starts there), so more than 1 is a replica that has. Members that all restarted replicate
// nothing until a primary is elected.
func continued(members []Member, from string) bool {
	for _, m := range members {
		if m.Name != from && m.Observed && !m.Deleting && (m.Repl.Offset > 1 || m.Repl.Role == member.Primary) {
			return true
		}
	}
	return false
}

// anyKeys reports whether a member that answers holds keys.
func anyKeys(members []Member) bool {
	for _, m := range members {
		if m.Observed && m.Repl.Keys > 0 {
			return true
		}
	}
	return false
}

// commonHistory is the replication history most members that answer and hold keys share (on a
// tie, the one reaching the highest offset): the old primary's, when the operator has not seen it
// (it started after the primary was lost). "" when no member holding keys answers.
func commonHistory(members []Member) string {
	count, reach := map[string]int{}, map[string]int64{}
	for _, m := range members {
		if m.Observed && m.Repl.Keys > 0 && m.Repl.ReplID != "" {
			count[m.Repl.ReplID]++
			reach[m.Repl.ReplID] = max(reach[m.Repl.ReplID], m.Repl.Offset)
		}
	}
	best := ""
	for id, n := range count {
		if best == "" || n > count[best] || (n == count[best] && (reach[id] > reach[best] || (reach[id] == reach[best] && id < best))) {
			best = id
		}
	}
	return best
}

// Discarded returns how much of its replication stream a deposed primary took that the current
// primary never had: the bytes it wrote past the point where primary's history forked from its
// own (primary's second replication ID and offset, which a promotion records), or, for a member
// that left the primary's history on its own, past its own fork. known is false when the two
// histories are not related that way (the deposed one restarted on a history of its own), and the
// amount cannot be measured.
func Discarded(primary, deposed member.Replication) (bytes int64, known bool) {
	switch {
	case deposed.ReplID == "":
		return 0, false
	case deposed.ReplID == primary.ReplID:
		return 0, true // the same history: nothing taken apart from it
	case primary.ReplID2 == deposed.ReplID && primary.SecondOffset > 0:
		// The primary was promoted off the deposed one's history. second_repl_offset is the
		// first offset of the new history: the fork is one byte before.
		return max(0, deposed.Offset-(primary.SecondOffset-1)), true
	case deposed.ReplID2 == primary.ReplID && deposed.SecondOffset > 0:
		// The deposed one left the primary's history (a stray REPLICAOF NO ONE): what it took
		// since is its offset past its own fork.
		return max(0, deposed.Offset-(deposed.SecondOffset-1)), true
	}
	return 0, false
}
