package status

import (
	"fmt"
	"strings"

	"example.com/cache-operator/engine/api"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"example.com/cache-operator/engine/credentials"
)

// The status conditions of a ManagedCache, each decided in one place: Ready (New, from the
// StatefulSet and the member view), StorageResizing (package storage), Degraded and ConfigApplied
// (from the member pass's view) and PasswordApplied (from the view and the credentials decision).

// applyMemberView sets what the member pass found in s: primary, members, the read endpoint and
// the Degraded condition.
func applyMemberView(s *api.Status, v api.MembersView, ok bool, generation int64) {
	if !ok {
		// No member pass has run yet (a new cache, or a new leader): what status says stands.
		return
	}
	s.Primary, s.Members = v.Primary, v.Members
	if v.LastFailover != nil {
		s.LastFailover = v.LastFailover
	}
	if !v.Observed {
		meta.RemoveStatusCondition(&s.Conditions, api.ConditionDegraded)
		return
	}
	cond := metav1.Condition{Type: api.ConditionDegraded, Status: metav1.ConditionFalse, Reason: api.ReasonHealthy,
		Message: "every member answers and every replica is in sync", ObservedGeneration: generation}
	if v.Degraded != "" {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, v.Degraded, v.DegradedMessage
	}
	if v.Refused != "" {
		// Why nothing moves: the members refuse the operator.
		cond.Status, cond.Reason = metav1.ConditionTrue, api.ReasonOperatorRefused
		cond.Message = "the members refuse the operator's command (" + v.Refused + ")"
		if v.Degraded != "" {
			cond.Message += "; " + v.DegradedMessage
		}
	}
	meta.SetStatusCondition(&s.Conditions, cond)
	applyLiveCondition(s, v, generation)
	applyDataLost(s, v, generation)
}

// applyDataLost sets DataLost from a pass that saw the loss, and removes it once the spec changed
// since it was set.
func applyDataLost(s *api.Status, v api.MembersView, generation int64) {
	if v.DataLost != "" {
		if c := meta.FindStatusCondition(s.Conditions, api.ConditionDataLost); c == nil || c.Message != v.DataLost {
			meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: api.ConditionDataLost, Status: metav1.ConditionTrue,
				Reason: api.ReasonDataLost, Message: v.DataLost, ObservedGeneration: generation})
		}
		return
	}
	if c := meta.FindStatusCondition(s.Conditions, api.ConditionDataLost); c != nil && c.ObservedGeneration != generation {
		meta.RemoveStatusCondition(&s.Conditions, api.ConditionDataLost)
	}
}

// applyLiveCondition sets ConfigApplied from a member pass's view: True when every member has the
// live settings' revision, False naming those that have not and why.
func applyLiveCondition(s *api.Status, v api.MembersView, generation int64) {
	if v.Live == "" {
		meta.RemoveStatusCondition(&s.Conditions, api.ConditionConfigApplied)
		return
	}
	cond := metav1.Condition{Type: api.ConditionConfigApplied, Status: metav1.ConditionTrue, Reason: api.ReasonLiveSettingsApplied,
		Message: "every member has the live settings of revision " + v.Live, ObservedGeneration: generation}
	var pending []string
	for _, m := range v.Members {
		if m.ConfigRevision != v.Live {
			pending = append(pending, m.Name)
		}
	}
	why := ""
	if v.LivePending != "" {
		why = " (" + v.LivePending + ")"
	}
	switch {
	case v.LiveError != "":
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, api.ReasonLiveSettingsInvalid, "the live settings do not parse: "+v.LiveError
	case len(pending) > 0:
		cond.Status, cond.Reason = metav1.ConditionFalse, api.ReasonLiveSettingsPending
		cond.Message = fmt.Sprintf("%s not yet at the live settings of revision %s%s", strings.Join(pending, ", "), v.Live, why)
	}
	meta.SetStatusCondition(&s.Conditions, cond)
}

// ApplyPassword sets PasswordApplied: False when the Secret's password was refused (the
// members keep the accepted one), else from the member pass: True when every member accepts the
// password of the current revision (and, during an overlap, the previous one), False naming those
// that do not yet.
func ApplyPassword(s *api.Status, v api.MembersView, viewOK bool, d credentials.Decision, generation int64) {
	cond := metav1.Condition{Type: api.ConditionPasswordApplied, ObservedGeneration: generation}
	switch {
	case d.Rejected != "":
		cond.Status, cond.Reason = metav1.ConditionFalse, api.ReasonPasswordRejected
		cond.Message = fmt.Sprintf("%s; the members keep the password of revision %d", d.Rejected, d.Auth.Revision)
	case !viewOK || !v.Observed || v.Password == 0:
		if c := meta.FindStatusCondition(s.Conditions, api.ConditionPasswordApplied); c != nil && c.Reason == api.ReasonPasswordRejected {
			meta.RemoveStatusCondition(&s.Conditions, api.ConditionPasswordApplied)
		}
		return
	default:
		var pending []string
		for _, m := range v.Members {
			if m.PasswordRevision != v.Password {
				pending = append(pending, m.Name)
			}
		}
		if len(pending) == 0 {
			cond.Status, cond.Reason = metav1.ConditionTrue, api.ReasonPasswordApplied
			cond.Message = fmt.Sprintf("every member accepts the password of revision %d", v.Password)
			if d.Auth.PreviousUntil != "" {
				cond.Message += " and, until " + d.Auth.PreviousUntil + ", the previous one"
			}
		} else {
			cond.Status, cond.Reason = metav1.ConditionFalse, api.ReasonPasswordPending
			cond.Message = fmt.Sprintf("%v not yet at the password of revision %d", pending, v.Password)
			if v.PasswordPending != "" {
				cond.Message += " (" + v.PasswordPending + ")"
			}
		}
	}
	meta.SetStatusCondition(&s.Conditions, cond)
}

// ApplyRestore sets Ready from a restore that has not completed (s.Restore): no member takes
// writes while it runs, nor after it failed.
func ApplyRestore(s *api.Status, spec api.Spec, generation int64) {
	rs := s.Restore
	if spec.Restore == nil || rs == nil || !rs.Resolved() {
		return
	}
	switch rs.Phase {
	case api.RestoreFailed:
		s.SetReady(generation, false, api.ReasonRestoreFailed, "the restore failed; no member takes writes: "+rs.Message)
	case api.RestoreRunning:
		s.SetReady(generation, false, api.ReasonRestoring, "restoring "+rs.Location+": "+rs.Message)
	}
}
