package status

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/record"

	"example.com/cache-operator/engine/api"
)

// applyHibernation sets what spec.hibernate says in s, after New computed the rest: running
// is how many members still run (the StatefulSet's status.replicas); lastPrimary the primary the
// status named before this pass (the member pass publishes none while a cache hibernates).
//   - Hibernating: status.hibernation records the primary the cache had (once), the Hibernated
//     condition says whether every member stopped, Ready is False with reason Hibernated once
//     they have; status.primary and status.members are cleared then (no member runs).
//   - Resuming: the record stays (the member pass elects its primary again) until the cache is
//     Ready with a primary (a sharded cache: Ready, its cluster whole); then the record and the
//     condition go.
func applyHibernation(s *api.Status, spec api.Spec, lastPrimary string, generation, running int64, now time.Time) {
	if spec.Hibernate {
		if s.Hibernation == nil {
			s.Hibernation = &api.HibernationStatus{Primary: lastPrimary, Since: now.UTC().Format(time.RFC3339)}
		}
		cond := metav1.Condition{Type: api.ConditionHibernated, Status: metav1.ConditionFalse, Reason: api.ReasonHibernating,
			Message: fmt.Sprintf("stopping the members: %d still running", running), ObservedGeneration: generation}
		if running == 0 {
			cond.Status, cond.Reason = metav1.ConditionTrue, api.ReasonHibernated
			cond.Message = fmt.Sprintf("every member is stopped; the volumes, the Secret and the Services are kept; set spec.hibernate to false to resume with %s as primary", orNone(s.Hibernation.Primary))
			if spec.Sharded() {
				cond.Message = "every member is stopped; the volumes (each member's data and its node's state, nodes.conf), the Secret and the Services are kept; set spec.hibernate to false to resume: each member comes back as the primary or replica of the slots it had"
			}
			s.Primary, s.Members = "", nil
			s.SetReady(generation, false, api.ReasonHibernated, "hibernated (spec.hibernate): no member runs")
		} else {
			s.SetReady(generation, false, api.ReasonHibernating, fmt.Sprintf("hibernating (spec.hibernate): %d members still running", running))
		}
		meta.SetStatusCondition(&s.Conditions, cond)
		return
	}
	if s.Hibernation == nil {
		meta.RemoveStatusCondition(&s.Conditions, api.ConditionHibernated)
		return
	}
	if IsReady(*s) && (s.Primary != "" || spec.Sharded()) {
		s.Hibernation = nil
		meta.RemoveStatusCondition(&s.Conditions, api.ConditionHibernated)
		return
	}
	msg := fmt.Sprintf("resuming: starting the members and electing %s again", orNone(s.Hibernation.Primary))
	if spec.Sharded() {
		msg = "resuming: starting the members, which the operator introduces to each other again at their new addresses"
	}
	meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: api.ConditionHibernated, Status: metav1.ConditionFalse, Reason: api.ReasonResuming,
		Message: msg, ObservedGeneration: generation})
}

func orNone(member string) string {
	if member == "" {
		return "the most caught-up member"
	}
	return member
}

// HibernationEvents records an Event for each step of a hibernation a status write made.
func HibernationEvents(recorder record.EventRecorder, mc *unstructured.Unstructured, old, cur api.Status) {
	was, is := meta.FindStatusCondition(old.Conditions, api.ConditionHibernated), meta.FindStatusCondition(cur.Conditions, api.ConditionHibernated)
	reason := func(c *metav1.Condition) string {
		if c == nil {
			return ""
		}
		return c.Reason
	}
	if reason(was) == reason(is) {
		return
	}
	switch {
	case is != nil && is.Reason == api.ReasonHibernating:
		recorder.Eventf(mc, corev1.EventTypeNormal, api.ReasonHibernating, "Stopping every member (spec.hibernate); %s was the primary", orNone(cur.Hibernation.Primary))
	case is != nil && is.Reason == api.ReasonHibernated:
		recorder.Eventf(mc, corev1.EventTypeNormal, api.ReasonHibernated, "Every member is stopped; the volumes are kept")
	case is != nil && is.Reason == api.ReasonResuming:
		recorder.Eventf(mc, corev1.EventTypeNormal, api.ReasonResuming, "Starting the members (spec.hibernate is false)")
	case is == nil && was != nil && cur.Primary == "":
		recorder.Eventf(mc, corev1.EventTypeNormal, api.EventResumed, "Ready again: every slot served, every shard with its members")
	case is == nil && was != nil:
		recorder.Eventf(mc, corev1.EventTypeNormal, api.EventResumed, "Ready again with %s as primary", cur.Primary)
	}
}
