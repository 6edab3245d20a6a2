package status

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	"example.com/cache-operator/engine/api"
)

// The status of each step of a hibernation: stopping, stopped, resuming, resumed.
func TestApplyHibernation(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	var s api.Status
	s.Primary = "c-2"
	s.SetReady(1, true, api.ReasonAllReplicasReady, "3/3")
	applyHibernation(&s, api.Spec{Replicas: 3, Hibernate: true}, "c-2", 2, 2, now)
	h := meta.FindStatusCondition(s.Conditions, api.ConditionHibernated)
	if s.Hibernation == nil || s.Hibernation.Primary != "c-2" || s.Hibernation.Since != "2026-12-03T12:00:00Z" || h == nil || h.Reason != api.ReasonHibernating || IsReady(s) {
		t.Fatalf("stopping: hibernation %+v, condition %+v, ready %v; want c-2 recorded, Hibernating, not Ready", s.Hibernation, h, IsReady(s))
	}
	// Stopped: a later pass keeps the first record, whatever the view says now.
	applyHibernation(&s, api.Spec{Replicas: 3, Hibernate: true}, "", 2, 0, now.Add(time.Minute))
	h, r := meta.FindStatusCondition(s.Conditions, api.ConditionHibernated), meta.FindStatusCondition(s.Conditions, api.ConditionReady)
	if s.Hibernation.Primary != "c-2" || s.Hibernation.Since != "2026-12-03T12:00:00Z" || h.Reason != api.ReasonHibernated || h.Status != "True" ||
		r.Reason != api.ReasonHibernated || s.Primary != "" || s.Members != nil {
		t.Fatalf("stopped: hibernation %+v, condition %+v, ready %+v, primary %q; want the record kept, Hibernated, Ready False Hibernated, no primary", s.Hibernation, h, r, s.Primary)
	}
	// Resuming: not Ready yet (or Ready without a primary): the record stays for the election.
	applyHibernation(&s, api.Spec{Replicas: 3}, "", 3, 3, now)
	if h := meta.FindStatusCondition(s.Conditions, api.ConditionHibernated); s.Hibernation == nil || h == nil || h.Reason != api.ReasonResuming {
		t.Fatalf("resuming: hibernation %+v, condition %+v; want the record and Resuming", s.Hibernation, h)
	}
	s.SetReady(3, true, api.ReasonAllReplicasReady, "3/3")
	applyHibernation(&s, api.Spec{Replicas: 3}, "", 3, 3, now)
	if s.Hibernation == nil {
		t.Fatal("Ready without a primary ended the resume")
	}
	s.Primary = "c-2"
	applyHibernation(&s, api.Spec{Replicas: 3}, "c-2", 3, 3, now)
	if s.Hibernation != nil || meta.FindStatusCondition(s.Conditions, api.ConditionHibernated) != nil {
		t.Errorf("resumed: hibernation %+v, conditions %+v; want neither", s.Hibernation, s.Conditions)
	}
}

// A sharded cache has no primary to record or elect: it resumes once Ready (its cluster whole).
func TestApplyHibernationSharded(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	spec := api.Spec{Replicas: 2, Shards: 3, Hibernate: true}
	var s api.Status
	s.SetReady(1, true, api.ReasonAllReplicasReady, "2/2 in every shard")
	applyHibernation(&s, spec, "", 2, 0, now)
	if h := meta.FindStatusCondition(s.Conditions, api.ConditionHibernated); h == nil || h.Reason != api.ReasonHibernated || !strings.Contains(h.Message, "nodes.conf") {
		t.Fatalf("stopped: condition %+v; want Hibernated, naming what the volumes keep", h)
	}
	spec.Hibernate = false
	s.SetReady(3, false, api.ReasonWaitingForReplicas, "0/2")
	applyHibernation(&s, spec, "", 3, 2, now)
	if h := meta.FindStatusCondition(s.Conditions, api.ConditionHibernated); s.Hibernation == nil || h == nil || h.Reason != api.ReasonResuming {
		t.Fatalf("resuming: hibernation %+v, condition %+v; want the record and Resuming", s.Hibernation, h)
	}
	s.SetReady(3, true, api.ReasonAllReplicasReady, "2/2 in every shard; the cluster is ok")
	applyHibernation(&s, spec, "", 3, 2, now)
	if s.Hibernation != nil || meta.FindStatusCondition(s.Conditions, api.ConditionHibernated) != nil {
		t.Errorf("Ready: hibernation %+v, conditions %+v; want the resume over without a primary", s.Hibernation, s.Conditions)
	}
}
