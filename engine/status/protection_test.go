package status

import (
	"example.com/cache-operator/engine/api"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
)

// A command the members refuse makes the cache Degraded with the reason and the command; a loss
// sets DataLost, which stays until the spec changes.
func TestRefusedAndDataLostConditions(t *testing.T) {
	var s api.Status
	applyMemberView(&s, api.MembersView{Observed: true, Degraded: "FailingOver", DegradedMessage: "primary c-0 is gone; promoting c-1",
		Refused: "promoting c-1: NOPERM User internal has no permissions to run the 'replicaof' command"}, true, 3)
	d := meta.FindStatusCondition(s.Conditions, api.ConditionDegraded)
	if d == nil || d.Status != "True" || d.Reason != api.ReasonOperatorRefused || !strings.Contains(d.Message, "NOPERM") || !strings.Contains(d.Message, "promoting c-1") {
		t.Fatalf("Degraded = %+v; want True, OperatorRefused, naming the command and the answer", d)
	}

	applyMemberView(&s, api.MembersView{Observed: true, DataLost: "every member came back empty"}, true, 3)
	if c := meta.FindStatusCondition(s.Conditions, api.ConditionDataLost); c == nil || c.Status != "True" || c.ObservedGeneration != 3 {
		t.Fatalf("DataLost = %+v; want True at generation 3", c)
	}
	if d := meta.FindStatusCondition(s.Conditions, api.ConditionDegraded); d.Reason == api.ReasonOperatorRefused {
		t.Errorf("Degraded still OperatorRefused once nothing is refused: %+v", d)
	}
	// A later pass of this process, or a new leader that does not know of the loss: it stays at
	// the same generation, and goes once the spec changed.
	applyMemberView(&s, api.MembersView{Observed: true}, true, 3)
	if meta.FindStatusCondition(s.Conditions, api.ConditionDataLost) == nil {
		t.Fatal("DataLost removed at the same generation")
	}
	applyMemberView(&s, api.MembersView{Observed: true}, true, 4)
	if c := meta.FindStatusCondition(s.Conditions, api.ConditionDataLost); c != nil {
		t.Fatalf("DataLost = %+v after the spec changed; want it gone", c)
	}
}
