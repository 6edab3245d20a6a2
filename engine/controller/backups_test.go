package controller

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/metrics"
)

// A pass that works from a copy older than its own status write (the informer has not seen
// it, or the write conflicted) comes to the restore's outcome again: it is reported once.
func TestRestoreOutcomeReportedOnce(t *testing.T) {
	f := newFixture(t, nil)
	mc := newCache("restored")
	mc.SetUID("uid-1")
	running := map[string]interface{}{"phase": string(api.RestoreRunning), "path": "ns/src/b1.rdb", "location": "s3://b/ns/src/b1.rdb"}
	if err := unstructured.SetNestedField(mc.Object, running, "status", "restore"); err != nil {
		t.Fatal(err)
	}
	spec := api.Spec{Restore: &api.Restore{}}
	view := api.MembersView{Observed: true, Primary: api.RestoreMember("restored")}
	completed := func() float64 {
		return restoresCounted(t, mc.GetNamespace(), mc.GetName(), "completed")
	}
	before := completed()
	for i := 0; i < 3; i++ {
		out := f.ctrl.advanceRestore(mc, spec, view, true)
		if got := api.RestoreStatusOf(out).Phase; got != api.RestoreCompleted {
			t.Fatalf("pass %d: phase %q; want %q", i, got, api.RestoreCompleted)
		}
	}
	if got := completed() - before; got != 1 {
		t.Errorf("restores_total{result=completed} went up by %v over three passes from the same copy; want 1", got)
	}
	if ev := drain(f.recorder); strings.Count(ev, "Normal Restored ") != 1 {
		t.Errorf("Events %q; want one Restored", ev)
	}

	// The same cache name made anew (another UID) restores again and is counted again.
	mc.SetUID("uid-2")
	f.ctrl.advanceRestore(mc, spec, view, true)
	if got := completed() - before; got != 2 {
		t.Errorf("after a new cache of the same name restored: up by %v; want 2", got)
	}
}

// restoresCounted reads cache_operator_restores_total for one cache and result from the
// operator's registry.
func restoresCounted(t *testing.T, namespace, cache, result string) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, fam := range families {
		if fam.GetName() != "cache_operator_restores_total" {
			continue
		}
		for _, m := range fam.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["namespace"] == namespace && labels["cache"] == cache && labels["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
