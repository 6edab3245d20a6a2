package dataplane

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/internal/workloop"
	"example.com/cache-operator/engine/metrics"
)

// A cache the reconciles' loop forgets is forgotten by the member passes too: its view, its roles
// memory and its metrics sample; another cache's are kept.
func TestForgottenByTheReconcilesLoop(t *testing.T) {
	reconciles := workloop.New(workloop.Options{Name: "test"})
	c := &Controller{
		reconciles: reconciles,
		loop:       workloop.New(workloop.Options{Name: "test-members"}),
		store: memberStore{views: map[string]api.MembersView{}, memory: map[string]*roleMemory{},
			labels: map[string]labelExpectation{}, deleted: map[string]types.UID{},
			endpoints: map[string]time.Time{}, samples: map[string]metrics.CacheSample{}},
	}
	reconciles.OnForget(c.forget)
	for _, key := range []string{"shop/gone", "shop/kept"} {
		c.publish(key, api.MembersView{Primary: key + "-0"})
		c.store.mem(key).lastPrimary = key + "-0"
		c.store.setSample(key, metrics.CacheSample{Namespace: "shop"}, true)
	}
	if got := reconciles.Drain(); len(got) != 2 {
		t.Fatalf("a new view adds its cache to the reconciles' loop: queued %v, want both caches", got)
	}
	reconciles.Forget("shop/gone")
	if _, ok := c.View("shop/gone"); ok {
		t.Error("the forgotten cache's view is still kept")
	}
	if _, ok := c.store.memory["shop/gone"]; ok {
		t.Error("the forgotten cache's roles memory is still kept")
	}
	if _, ok := c.store.samples["shop/gone"]; ok {
		t.Error("the forgotten cache's metrics sample is still kept")
	}
	if v, ok := c.View("shop/kept"); !ok || v.Primary != "shop/kept-0" {
		t.Errorf("the other cache's view: %+v %v; want it kept", v, ok)
	}
}
