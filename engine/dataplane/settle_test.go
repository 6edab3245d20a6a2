package dataplane

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
