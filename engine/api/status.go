package api

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// Status is the status of a ManagedCache, as the CRD declares it: the one type of it, which the
// reconcile computes (package status), writes, and everyone reads through StatusOf.
type Status struct {
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
	ReadyReplicas      int64              `json:"readyReplicas"`
	Endpoint           string             `json:"endpoint,omitempty"`
	ReadEndpoint       string             `json:"readEndpoint,omitempty"`
	Primary            string             `json:"primary,omitempty"`
	Members            []MemberStatus     `json:"members,omitempty"`
	Selector           string             `json:"selector,omitempty"`
	TLS                *TLSStatus         `json:"tls,omitempty"`
	Backup             *BackupStatus      `json:"backup,omitempty"`
	Restore            *RestoreStatus     `json:"restore,omitempty"`
	LastFailover       *FailoverStatus    `json:"lastFailover,omitempty"`
	Hibernation        *HibernationStatus `json:"hibernation,omitempty"`
	Reshard            *ReshardStatus     `json:"reshard,omitempty"`
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
}

// StatusOf reads the status of mc; a malformed status reads as empty (the reconcile rewrites it
// whole).
func StatusOf(mc *unstructured.Unstructured) Status {
	var s Status
	if raw, ok := mc.Object["status"].(map[string]interface{}); ok {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &s); err != nil {
			return Status{}
		}
	}
	return s
}

// SetReady sets the Ready condition; lastTransitionTime moves only when the status flips.
func (s *Status) SetReady(generation int64, ready bool, reason, message string) {
	status := metav1.ConditionFalse
	if ready {
		status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&s.Conditions, metav1.Condition{
		Type: ConditionReady, Status: status, Reason: reason, Message: message, ObservedGeneration: generation,
	})
}

// TLSStatus is status.tls: where clients find the CA, and the members' certificate.
type TLSStatus struct {
	CAConfigMap string `json:"caConfigMap,omitempty"`
	NotAfter    string `json:"notAfter,omitempty"`
	Serial      string `json:"serial,omitempty"`
}

// MembersView is what the last member pass of a cache found (package dataplane), for its status
// (package status).
type MembersView struct {
	// Observed: the operator reads the members' servers. False for members it may not dial
	// (outside --member-networks): their roles are the labels it set, never verified.
	Observed bool
	Primary  string
	Members  []MemberStatus
	// Degraded is the Degraded condition's reason and message ("" when whole or not observed).
	Degraded, DegradedMessage string
	// Live is the revision of the cache's live settings ("": no ConfigMap yet); LiveError why
	// they cannot be applied at all (a ConfigMap that does not parse), LivePending why a member
	// could not be given them (the first such error).
	Live, LiveError, LivePending string
	// Password is the revision of the clients' password the pass gave the members (0: none);
	// PasswordPending why a member could not be given it (the first such error).
	Password        int64
	PasswordPending string
	// LastFailover is the last change of primary this or an earlier process made (nil: none).
	LastFailover *FailoverStatus
	// DataLost, when set, says how the cache's data was lost (the DataLost condition).
	DataLost string
	// Refused, when set, is a command the members refused the operator (NOPERM, WRONGPASS, NOAUTH):
	// what it could not do and the server's answer (the Degraded condition, ReasonOperatorRefused).
	Refused string
	// ClusterWhole, for a sharded cache: every member says cluster_state:ok and the cluster needs
	// no step but a reshard's moves (Ready waits for it, as a primary/replica cache's waits for a
	// primary).
	ClusterWhole bool
	// AOFOff names, for a sharded cache, a member that answered with its AOF off (it loaded a
	// restored snapshot that no AOF holds yet; "": none): a restore is not over until it is on.
	AOFOff string
	// SlotsToMove, for a sharded cache, is what its reshard still has to move, when SlotsKnown
	// (every member answered).
	SlotsToMove int64
	SlotsKnown  bool
	// Shards is the spec.shards the pass judged the cluster against: SlotsToMove and
	// RetiredEmpty hold for that count only (a view from before a change of spec.shards says
	// nothing of the new one).
	Shards int64
	// RetiredEmpty, for a sharded cache: every member read, no node but the members of the shards
	// below spec.shards serves a slot, and the others hold no key: the shards past spec.shards
	// (their StatefulSets, budgets and claims) can go.
	RetiredEmpty bool
}

// ReshardStatus is status.reshard: set while a sharded cache's slots move to reach spec.shards.
type ReshardStatus struct {
	// Shards is the number of shards the slots move to.
	Shards int64 `json:"shards"`
	// SlotsMoved and SlotsToMove: the slots moved since Since, and those still to move.
	SlotsMoved  int64 `json:"slotsMoved"`
	SlotsToMove int64 `json:"slotsToMove"`
	// Since is when the operator began moving the slots (RFC 3339).
	Since string `json:"since,omitempty"`
	// Placed is when every slot was where it should be (RFC 3339; "" before): the shards past
	// spec.shards are removed RetireGrace later.
	Placed string `json:"placed,omitempty"`
}

// RetireGrace is how long the shards past spec.shards stay once every slot is placed: a client
// whose map of the slots is older than the last move gets a redirection from them (and reads the
// map again) rather than no answer from a member that is gone.
const RetireGrace = 10 * time.Second

// ReshardOf reads status.reshard of a cache (nil: none).
func ReshardOf(mc *unstructured.Unstructured) *ReshardStatus {
	return statusField[ReshardStatus](mc, "reshard")
}

// MemberStatus is one entry of status.members.
type MemberStatus struct {
	Name           string `json:"name"`
	Role           string `json:"role"`
	LagBytes       int64  `json:"lagBytes,omitempty"`
	ConfigRevision string `json:"configRevision,omitempty"`
	// PasswordRevision is the revision of the clients' password the member accepts.
	PasswordRevision int64 `json:"passwordRevision,omitempty"`
	// Slots, on a sharded cache's primary, is the hash slots it serves ("0-5460,16000-16383").
	Slots string `json:"slots,omitempty"`
}

// FailoverStatus is status.lastFailover: the last time the primary changed, as the operator did it.
type FailoverStatus struct {
	// Time is when the new primary took over (RFC 3339).
	Time string `json:"time"`
	// Kind is failover (the primary was gone) or switchover (handed over by a live primary).
	Kind string `json:"kind"`
	From string `json:"from,omitempty"`
	To   string `json:"to"`
}

// LastFailoverOf reads status.lastFailover of a cache (nil: none).
func LastFailoverOf(mc *unstructured.Unstructured) *FailoverStatus {
	if f := statusField[FailoverStatus](mc, "lastFailover"); f != nil && f.To != "" {
		return f
	}
	return nil
}

// PrimaryOf reads status.primary of a cache ("": none).
func PrimaryOf(mc *unstructured.Unstructured) string {
	p, _, _ := unstructured.NestedString(mc.Object, "status", "primary")
	return p
}

// HibernationStatus is status.hibernation: set while a cache hibernates or resumes.
type HibernationStatus struct {
	// Primary is the member that was primary when the members were stopped ("": none known).
	Primary string `json:"primary,omitempty"`
	// Since is when the operator began stopping the members (RFC 3339).
	Since string `json:"since,omitempty"`
}

// HibernationOf reads status.hibernation of a cache (nil: none).
func HibernationOf(mc *unstructured.Unstructured) *HibernationStatus {
	return statusField[HibernationStatus](mc, "hibernation")
}

// statusField reads status.<field> of a cache into a T (nil: absent, or not of that shape).
func statusField[T any](mc *unstructured.Unstructured, field string) *T {
	raw, ok, _ := unstructured.NestedMap(mc.Object, "status", field)
	if !ok {
		return nil
	}
	var v T
	if runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &v) != nil {
		return nil
	}
	return &v
}

// RoundLag rounds a lag down to a power of two, and to 0 below 1 MiB: status must not change
// with every write a busy cache takes.
func RoundLag(lag int64) int64 {
	if lag < 1<<20 {
		return 0
	}
	p := int64(1 << 20)
	for p*2 <= lag {
		p *= 2
	}
	return p
}
