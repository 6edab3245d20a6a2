package dataplane

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/informers"
)

func TestEndpointsDiffer(t *testing.T) {
	base := func() *informers.Pod {
		p := &informers.Pod{IP: "198.18.0.5", Ready: true, Running: true}
		p.Labels = map[string]string{api.LabelRole: api.RolePrimary, api.LabelReadWrite: "true", "controller-revision-hash": "r1"}
		return p
	}
	now := metav1.Now()
	for name, tc := range map[string]struct {
		change func(*informers.Pod)
		want   bool
	}{
		"nothing":              {func(*informers.Pod) {}, false},
		"a container restarts": {func(p *informers.Pod) { p.Running = false }, false},
		"revision label":       {func(p *informers.Pod) { p.Labels["controller-revision-hash"] = "r2" }, false},
		"readiness":            {func(p *informers.Pod) { p.Ready = false }, true},
		"deletion":             {func(p *informers.Pod) { p.DeletionTimestamp = &now }, true},
		"address":              {func(p *informers.Pod) { p.IP = "198.18.0.6" }, true},
		"role label":           {func(p *informers.Pod) { p.Labels[api.LabelRole] = api.RoleReplica }, true},
		"read-write label":     {func(p *informers.Pod) { delete(p.Labels, api.LabelReadWrite) }, true},
	} {
		cur := base()
		tc.change(cur)
		if got := endpointsDiffer(base(), cur); got != tc.want {
			t.Errorf("%s: endpointsDiffer = %v; want %v", name, got, tc.want)
		}
	}
}

func TestSettleLeft(t *testing.T) {
	s := memberStore{endpoints: map[string]time.Time{}}
	now := time.Now()
	const settle = 1500 * time.Millisecond
	if got := s.settleLeft("ns/a", settle, now); got != 0 {
		t.Errorf("no change seen: wait %v; want 0", got)
	}
	s.endpointsChanged("ns/a", now.Add(-time.Second))
	if got := s.settleLeft("ns/a", settle, now); got != 500*time.Millisecond {
		t.Errorf("a change 1 s ago: wait %v; want 500ms", got)
	}
	if got := s.settleLeft("ns/a", 0, now); got != 0 {
		t.Errorf("settle 0: wait %v; want 0", got)
	}
	if got := s.settleLeft("ns/a", settle, now.Add(time.Second)); got != 0 {
		t.Errorf("2 s after the change: wait %v; want 0", got)
	}
}

func TestUnreachableSince(t *testing.T) {
	mc := func(typ, status, reason, at string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]interface{}{}}
		_ = unstructured.SetNestedSlice(u.Object, []interface{}{
			map[string]interface{}{"type": api.ConditionReady, "status": "True", "reason": "AllReplicasReady", "lastTransitionTime": "2026-12-02T20:00:00Z"},
			map[string]interface{}{"type": typ, "status": status, "reason": reason, "lastTransitionTime": at},
		}, "status", "conditions")
		return u
	}
	want := time.Date(2026, 12, 2, 20, 0, 6, 0, time.UTC) // rounded up: never a shorter delay
	for name, tc := range map[string]struct {
		mc *unstructured.Unstructured
		ok bool
	}{
		"primary unreachable": {mc(api.ConditionDegraded, "True", api.ReasonPrimaryUnreachable, "2026-12-02T20:00:05Z"), true},
		"failing over":        {mc(api.ConditionDegraded, "True", api.ReasonFailingOver, "2026-12-02T20:00:05Z"), true},
		"healthy":             {mc(api.ConditionDegraded, "False", api.ReasonHealthy, "2026-12-02T20:00:05Z"), false},
		"rolling":             {mc(api.ConditionDegraded, "True", api.ReasonRolling, "2026-12-02T20:00:05Z"), false},
		"no primary yet":      {mc(api.ConditionDegraded, "True", api.ReasonNoPrimary, "2026-12-02T20:00:05Z"), false},
		"unreadable time":     {mc(api.ConditionDegraded, "True", api.ReasonPrimaryUnreachable, "soon"), false},
		"no status":           {&unstructured.Unstructured{Object: map[string]interface{}{}}, false},
	} {
		got, ok := unreachableSince(tc.mc)
		if ok != tc.ok || (ok && !got.Equal(want)) {
			t.Errorf("%s: %v %v; want %v %v", name, got, ok, want, tc.ok)
		}
	}
}
