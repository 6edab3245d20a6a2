package dataplane

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/tools/record"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/informers"
	"example.com/cache-operator/engine/metrics"
	"example.com/cache-operator/engine/roles"
	"example.com/cache-operator/engine/shards"
)

// A member the planner says only a restart frees has its pod deleted once it has been so for
// stuckFor, once per pod, with a RestartingMember Event; a member seen so once (a role switch
// between two reads) is not; a new pod in the same state is counted from its own first sighting.
func TestStuckMemberRestartedOncePerPod(t *testing.T) {
	ctx := context.Background()
	pod := func(uid string) *unstructured.Unstructured {
		p := &unstructured.Unstructured{}
		p.SetAPIVersion("v1")
		p.SetKind("Pod")
		p.SetNamespace("shop")
		p.SetName("c-s1-1")
		p.SetUID(types.UID(uid))
		return p
	}
	client := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme(), pod("uid-1"))
	rec := record.NewFakeRecorder(10)
	c := &Controller{client: client, recorder: rec,
		store: memberStore{views: map[string]api.MembersView{}, memory: map[string]*roleMemory{},
			labels: map[string]labelExpectation{}, deleted: map[string]types.UID{},
			endpoints: map[string]time.Time{}, samples: map[string]metrics.CacheSample{}}}
	mc := &unstructured.Unstructured{}
	mc.SetNamespace("shop")
	mc.SetName("c")
	mem := c.store.mem("shop/c")
	steps := []shards.Step{{Kind: shards.Restart, Member: "c-s1-1", Target: "c-s1-0", Why: "c-s1-1 holds 3 keys"}}
	pods := map[string]roles.Member{"c-s1-1": {Name: "c-s1-1", UID: "uid-1"}}
	exists := func() bool {
		_, err := client.Resource(informers.Pods).Namespace("shop").Get(ctx, "c-s1-1", metav1.GetOptions{})
		return err == nil
	}

	if err := c.restartStuck(ctx, mc, mem, steps, pods); err != nil {
		t.Fatal(err)
	}
	if !exists() || len(rec.Events) > 0 {
		t.Fatalf("deleted (or reported) at its first sighting: pod exists %v, %d Events", exists(), len(rec.Events))
	}
	// Seen once, then not: forgotten.
	if err := c.restartStuck(ctx, mc, mem, nil, pods); err != nil {
		t.Fatal(err)
	}
	if len(mem.stuck) != 0 {
		t.Fatalf("a member no longer stuck is still remembered: %v", mem.stuck)
	}
	if err := c.restartStuck(ctx, mc, mem, steps, pods); err != nil {
		t.Fatal(err)
	}
	st := mem.stuck["c-s1-1"]
	st.since = st.since.Add(-stuckFor)
	mem.stuck["c-s1-1"] = st
	if err := c.restartStuck(ctx, mc, mem, steps, pods); err != nil {
		t.Fatal(err)
	}
	if exists() {
		t.Fatalf("still there after %v in the state", stuckFor)
	}
	if len(rec.Events) != 1 {
		t.Fatalf("%d Events; want one RestartingMember", len(rec.Events))
	}
	if e := <-rec.Events; !strings.Contains(e, api.EventRestartingMember) || !strings.Contains(e, "c-s1-1 holds 3 keys") {
		t.Errorf("the Event %q; want RestartingMember with the planner's reason", e)
	}
	// The same pod, still seen so before the informer shows it gone: not deleted again.
	if err := c.restartStuck(ctx, mc, mem, steps, pods); err != nil {
		t.Fatal(err)
	}
	if len(rec.Events) != 0 {
		t.Errorf("the same pod reported twice")
	}
	// Its successor in the same state: its own first sighting.
	if _, err := client.Resource(informers.Pods).Namespace("shop").Create(ctx, pod("uid-2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods["c-s1-1"] = roles.Member{Name: "c-s1-1", UID: "uid-2"}
	if err := c.restartStuck(ctx, mc, mem, steps, pods); err != nil {
		t.Fatal(err)
	}
	if !exists() || len(rec.Events) != 0 {
		t.Errorf("the new pod deleted at its first sighting: exists %v, %d Events", exists(), len(rec.Events))
	}
}
