package dataplane

import (
	"maps"
	"reflect"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/cachetls"
	"example.com/cache-operator/engine/metrics"
	"example.com/cache-operator/engine/roles"
	"example.com/cache-operator/engine/shardpass"
)

// reshardMemory is a reshard this process follows: since when, and the slots and keys it moved.
type reshardMemory struct {
	running     bool
	since       time.Time
	slots, keys int
}

// stuckMember is a member's pod seen in a state only a restart leaves, since when.
type stuckMember struct {
	uid       types.UID
	since     time.Time
	restarted bool
}

// roleMemory is what a member pass keeps of a cache between passes.
type roleMemory struct {
	// reshard follows a sharded cache's reshard, for its Events.
	reshard reshardMemory
	// shards follows a sharded cache's primaries, for its failovers and discarded writes;
	// switchRefused is the cache's resourceVersion whose switchover was last refused.
	shards        shardpass.Watch
	switchRefused string
	// stuck is, per member, the pod (UID) last found in a state that only a restart leaves
	// (shards.Restart) and since when; restarted marks the pod deleted for it.
	stuck             map[string]stuckMember
	unhealthySince    time.Time
	lastPrimaryOffset int64
	// lastPrimaryHistory is the replication ID of the last healthy primary seen; lastPrimary its
	// name (cleared when the cache hibernates or resets: its next primary is elected, not a
	// failover's).
	lastPrimaryHistory, lastPrimary string
	// primaryStopping is the primary last seen with its pod being deleted while it served ("":
	// none since the last healthy primary).
	primaryStopping string
	// live is the cache's live settings as last read from its ConfigMap (at liveRV), and
	// liveChecked, per member (by pod UID), the revision last found or made current, and when.
	liveRV      string
	live        liveSettings
	liveChecked memberChecks
	// authChecked is, per member, the credentials last found or made current, and when.
	authChecked memberChecks
	// replChecked is, per member, the credentials its replication was last found with or given.
	replChecked memberChecks
	// tls is the cache's TLS material as last read from its TLS Secret (at tlsRV); tlsChecked, per
	// member, the certificate serial last found served.
	tlsRV      string
	tls        cachetls.Material
	tlsOK      bool
	tlsChecked memberChecks
	// modeChecked is, per replica, the primary and mode its replication was last found set for.
	modeChecked memberChecks
	// deposed is, per member, the pod, history and offset at which it was last reported as a
	// deposed primary: a REPLICAOF that fails and is retried does not count its writes twice.
	deposed map[string]string
	// lastFailover is the last change of primary (status.lastFailover), read from the status at
	// the first pass (failoverRead) and kept by this process's failovers and switchovers.
	lastFailover *api.FailoverStatus
	failoverRead bool
	// reset is the last reset announced (its reason): a deletion that fails and is retried does
	// not report the discarded keys twice.
	reset string
	// data follows the dataset, to report a loss (dataloss.go).
	data dataLoss
	// refused is the first command a member refused the operator in the current pass ("":
	// none); refusedReported the last one reported in an Event.
	refused, refusedReported string
}

// memberStore holds the member passes' views and memories, by cache key, and what the passes
// wrote to pods that the informer may not show yet (by namespace/pod).
type memberStore struct {
	mu     sync.Mutex
	views  map[string]api.MembersView
	memory map[string]*roleMemory
	// labels are role labels set but perhaps not yet seen; deleted are pods (by UID) deleted but
	// perhaps not yet seen deleting. A pass that read the informer's older copy would undo its
	// own last step (promote the member it just demoted), so these override the informer until it
	// catches up.
	labels  map[string]labelExpectation
	deleted map[string]types.UID
	// endpoints holds, by cache key, when its members' Service endpoints last changed as this
	// process saw it (see Options.ServiceSettle).
	endpoints map[string]time.Time
	// samples are, by cache key, the members' figures from the last pass that read them (the
	// per-member metrics); a cache whose members cannot be read has none.
	samples map[string]metrics.CacheSample
}

func (s *memberStore) endpointsChanged(key string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endpoints[key] = at
}

// settleLeft is how much longer a handover of the cache key waits for its Services to settle:
// until settle after their last change. (The pod informer's first list counts as a change: a
// process that just started does not know the earlier ones.)
func (s *memberStore) settleLeft(key string, settle time.Duration, now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	last, ok := s.endpoints[key]
	if !ok {
		return 0
	}
	return max(0, last.Add(settle).Sub(now))
}

type labelExpectation struct {
	uid   types.UID
	label string
	at    time.Time
}

// expectationTTL bounds how long a write not yet seen by the informer overrides it.
const expectationTTL = 30 * time.Second

func (s *memberStore) expectLabel(podKey string, uid types.UID, label string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.labels[podKey] = labelExpectation{uid: uid, label: label, at: time.Now()}
}

func (s *memberStore) expectDeleted(podKey string, uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deleted[podKey] = uid
}

// overlay applies the writes the informer has not caught up with to m, the pod podKey with uid.
func (s *memberStore) overlay(podKey string, uid types.UID, m *roles.Member) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.labels[podKey]; ok {
		switch {
		case e.uid != uid || e.label == m.Label || time.Since(e.at) > expectationTTL:
			delete(s.labels, podKey)
		default:
			m.Label, m.ReadWrite = e.label, e.label == api.RolePrimary
		}
	}
	if d, ok := s.deleted[podKey]; ok {
		if d == uid && !m.Deleting {
			m.Deleting = true
		} else {
			delete(s.deleted, podKey)
		}
	}
}

func (s *memberStore) view(key string) (api.MembersView, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.views[key]
	return v, ok
}

// setView stores v and reports whether it differs from what was stored.
func (s *memberStore) setView(key string, v api.MembersView) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.views[key]
	s.views[key] = v
	return !ok || !reflect.DeepEqual(old, v)
}

func (s *memberStore) mem(key string) *roleMemory {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.memory[key]
	if m == nil {
		m = &roleMemory{}
		s.memory[key] = m
	}
	return m
}

func (s *memberStore) forget(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.views, key)
	delete(s.memory, key)
	delete(s.endpoints, key)
	delete(s.samples, key)
}

// setSample stores the figures of a cache's members, or drops them (ok false).
func (s *memberStore) setSample(key string, sample metrics.CacheSample, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ok {
		s.samples[key] = sample
	} else {
		delete(s.samples, key)
	}
}

// eachSample yields every cache's member figures, by key order (a scrape's output is stable).
func (s *memberStore) eachSample(yield func(metrics.CacheSample) bool) {
	s.mu.Lock()
	keys := slices.Sorted(maps.Keys(s.samples))
	out := make([]metrics.CacheSample, len(keys))
	for i, k := range keys {
		out[i] = s.samples[k]
	}
	s.mu.Unlock()
	for _, c := range out {
		if !yield(c) {
			return
		}
	}
}
