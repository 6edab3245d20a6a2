package status

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/internal/testobj"
)

// Status: Ready only when the StatefulSet runs exactly the wanted members, all ready and updated.
func TestStatus(t *testing.T) {
	mc := testobj.Cache("sessions")
	spec, err := api.SpecFrom(mc)
	if err != nil {
		t.Fatal(err)
	}
	sts := func(replicas, ready, updated int64) *unstructured.Unstructured {
		s := testobj.Child("apps/v1", "StatefulSet", "sessions", mc)
		s.SetGeneration(2)
		s.Object["status"] = map[string]interface{}{"observedGeneration": int64(2), "replicas": replicas,
			"readyReplicas": ready, "updatedReplicas": updated}
		return s
	}
	for _, tc := range []struct {
		name         string
		sts          *unstructured.Unstructured
		ready        bool
		readyMembers int64
		reason       string
	}{
		{"no StatefulSet yet", nil, false, 0, api.ReasonWaitingForReplicas},
		{"starting", sts(3, 1, 3), false, 1, api.ReasonWaitingForReplicas},
		{"all ready", sts(3, 3, 3), true, 3, api.ReasonAllReplicasReady},
		{"rolling", sts(3, 3, 2), false, 3, api.ReasonWaitingForReplicas},
		{"scaling down from 5", sts(5, 5, 5), false, 3, api.ReasonWaitingForReplicas},
	} {
		s := New(mc, spec, api.DefaultClusterDomain, Observed{StatefulSets: []*unstructured.Unstructured{tc.sts}, View: api.MembersView{Primary: "sessions-0"}, ViewOK: true})
		c := meta.FindStatusCondition(s.Conditions, api.ConditionReady)
		if (c.Status == metav1.ConditionTrue) != tc.ready || c.Reason != tc.reason || s.ReadyReplicas != tc.readyMembers {
			t.Errorf("%s: Ready %s/%s (%s), readyReplicas %d; want ready %v, %s, %d", tc.name, c.Status, c.Reason, c.Message,
				s.ReadyReplicas, tc.ready, tc.reason, tc.readyMembers)
		}
		if s.Endpoint != "sessions-rw.shop.svc.cluster.local:6379" || s.ReadEndpoint != "sessions-ro.shop.svc.cluster.local:6379" || s.ObservedGeneration != 1 {
			t.Errorf("%s: endpoint %q, read endpoint %q, observedGeneration %d", tc.name, s.Endpoint, s.ReadEndpoint, s.ObservedGeneration)
		}
	}
	// Ready needs a primary: none found by the member pass, or no member pass yet (then the
	// change is progress, written with the primary when the pass comes).
	for _, tc := range []struct {
		name   string
		viewOK bool
		reason string
	}{{"the member pass found no primary", true, api.ReasonNoPrimary}, {"no member pass yet", false, api.ReasonWaitingForReplicas}} {
		s := New(mc, spec, api.DefaultClusterDomain, Observed{StatefulSets: []*unstructured.Unstructured{sts(3, 3, 3)}, View: api.MembersView{}, ViewOK: tc.viewOK})
		if c := meta.FindStatusCondition(s.Conditions, api.ConditionReady); c.Status != metav1.ConditionFalse || c.Reason != tc.reason {
			t.Errorf("%s: Ready %s/%s (%s); want False/%s", tc.name, c.Status, c.Reason, c.Message, tc.reason)
		}
	}
	// A status that is already right is not written again; lastTransitionTime stays.
	s := New(mc, spec, api.DefaultClusterDomain, Observed{StatefulSets: []*unstructured.Unstructured{sts(3, 3, 3)}, View: api.MembersView{Primary: "sessions-0"}, ViewOK: true})
	updated, err := With(mc, s)
	if err != nil || updated == nil {
		t.Fatalf("first status: %v", err)
	}
	again := New(updated, spec, api.DefaultClusterDomain, Observed{StatefulSets: []*unstructured.Unstructured{sts(3, 3, 3)}, View: api.MembersView{Primary: "sessions-0"}, ViewOK: true})
	if u, _ := With(updated, again); u != nil {
		t.Error("an unchanged status would be written again")
	}
	// A new leader, before its first member pass, keeps what status says: nothing to write.
	if u, _ := With(updated, New(updated, spec, api.DefaultClusterDomain, Observed{StatefulSets: []*unstructured.Unstructured{sts(3, 3, 3)}, View: api.MembersView{}, ViewOK: false})); u != nil {
		t.Errorf("before the first member pass, status would be rewritten: %v", u.Object["status"])
	}
}

// Progress (the ready count, members, a message) can wait for the pace; a user-facing change (a
// condition's status or reason, the generation, a Ready cache's primary) cannot.
func TestProgress(t *testing.T) {
	base := api.Status{ObservedGeneration: 1, ReadyReplicas: 1, Primary: "c-0"}
	base.SetReady(1, false, api.ReasonWaitingForReplicas, "1/3 replicas ready")
	moved := base
	moved.Conditions = append([]metav1.Condition(nil), base.Conditions...)
	moved.ReadyReplicas = 2
	moved.SetReady(1, false, api.ReasonWaitingForReplicas, "2/3 replicas ready")
	ready := moved
	ready.Conditions = append([]metav1.Condition(nil), base.Conditions...)
	ready.SetReady(1, true, api.ReasonAllReplicasReady, "3/3 replicas ready")
	newGen := base
	newGen.ObservedGeneration = 2
	newPrimary := base
	newPrimary.Primary = "c-1"
	for _, tc := range []struct {
		name string
		cur  api.Status
		want bool
	}{{"ready count and message", moved, false}, {"Ready flips", ready, true}, {"generation", newGen, true},
		{"primary of a cache not Ready", newPrimary, false}} {
		if got := !Progress(Changes(base, tc.cur), IsReady(base) || IsReady(tc.cur)); got != tc.want {
			t.Errorf("%s: changes %v written at once %v, want %v", tc.name, Changes(base, tc.cur), got, tc.want)
		}
	}
	readyBase := base
	readyBase.Conditions = append([]metav1.Condition(nil), base.Conditions...)
	readyBase.SetReady(1, true, api.ReasonAllReplicasReady, "3/3 replicas ready")
	failedOver := readyBase
	failedOver.Primary = "c-1"
	if Progress(Changes(readyBase, failedOver), true) {
		t.Error("a Ready cache's new primary is paced; want it written at once")
	}
	backedUp := readyBase
	backedUp.Backup = &api.BackupStatus{LastBackup: "b-1"}
	if got := Changes(readyBase, backedUp); len(got) != 1 || got[0] != "backup" || Progress(got, true) {
		t.Errorf("a new last backup: changes %v (progress %v); want [backup], written at once", got, Progress(got, true))
	}
}

// ConfigApplied: True when every member has the ConfigMap's revision of the live settings, False
// naming those that have not (with the first error) or saying the settings do not parse, and
// absent when no member pass has seen a ConfigMap.
func TestLiveSettingsCondition(t *testing.T) {
	members := func(revs ...string) []api.MemberStatus {
		var out []api.MemberStatus
		for i, r := range revs {
			out = append(out, api.MemberStatus{Name: fmt.Sprintf("c-%d", i), Role: api.RoleReplica, ConfigRevision: r})
		}
		return out
	}
	for _, tc := range []struct {
		name                  string
		view                  api.MembersView
		status, reason, inMsg string
	}{
		{"applied", api.MembersView{Observed: true, Live: "abc", Members: members("abc", "abc")}, "True", api.ReasonLiveSettingsApplied, "revision abc"},
		{"pending", api.MembersView{Observed: true, Live: "abc", LivePending: "c-1: CONFIG SET maxmemory: boom", Members: members("abc", "old")},
			"False", api.ReasonLiveSettingsPending, "c-1 not yet at the live settings of revision abc (c-1: CONFIG SET maxmemory: boom)"},
		{"invalid", api.MembersView{Observed: true, Live: "abc", LiveError: `line 1: "maxmemory" has no value`, Members: members("", "")},
			"False", api.ReasonLiveSettingsInvalid, "do not parse"},
		{"no ConfigMap yet", api.MembersView{Observed: true, Members: members("", "")}, "", "", ""},
	} {
		var s api.Status
		applyMemberView(&s, tc.view, true, 1)
		cond := meta.FindStatusCondition(s.Conditions, api.ConditionConfigApplied)
		switch {
		case tc.status == "" && cond != nil:
			t.Errorf("%s: condition %+v; want none", tc.name, *cond)
		case tc.status == "":
		case cond == nil:
			t.Errorf("%s: no ConfigApplied condition", tc.name)
		case string(cond.Status) != tc.status || cond.Reason != tc.reason || !strings.Contains(cond.Message, tc.inMsg):
			t.Errorf("%s: %s/%s %q; want %s/%s containing %q", tc.name, cond.Status, cond.Reason, cond.Message, tc.status, tc.reason, tc.inMsg)
		}
	}
}

// Every field of the status is named by Changes: one the list forgot would read as no change at
// all, paced, and logged as "changed: []".
func TestChangesNameEveryField(t *testing.T) {
	typ := reflect.TypeOf(api.Status{})
	for i := 0; i < typ.NumField(); i++ {
		var cur api.Status
		f := reflect.ValueOf(&cur).Elem().Field(i)
		switch f.Kind() {
		case reflect.Pointer:
			f.Set(reflect.New(f.Type().Elem()))
		case reflect.Slice:
			f.Set(reflect.MakeSlice(f.Type(), 1, 1))
		case reflect.String:
			f.SetString("x")
		case reflect.Int64:
			f.SetInt(1)
		default:
			t.Fatalf("field %s of kind %s: teach this test to change it", typ.Field(i).Name, f.Kind())
		}
		if got := Changes(api.Status{}, cur); len(got) == 0 {
			t.Errorf("a change of status field %s is not named by Changes", typ.Field(i).Name)
		}
	}
}

// A sharded cache's status reads one StatefulSet per shard: readyReplicas is its least ready
// shard's (a shard not made yet counts none), and Ready waits for the member pass to find the
// cluster whole (what it waits for in the message).
func TestStatusSharded(t *testing.T) {
	mc := testobj.Cache("shop")
	spec, err := api.SpecFrom(mc)
	if err != nil {
		t.Fatal(err)
	}
	spec.Shards, spec.Replicas = 3, 2
	set := func(shard int, ready int64) *unstructured.Unstructured {
		s := testobj.Child("apps/v1", "StatefulSet", api.ShardSetName("shop", shard), mc)
		s.SetGeneration(1)
		s.Object["status"] = map[string]interface{}{"observedGeneration": int64(1), "replicas": int64(2),
			"readyReplicas": ready, "updatedReplicas": int64(2)}
		return s
	}
	whole := api.MembersView{Observed: true, ClusterWhole: true}
	forming := api.MembersView{Observed: true, Degraded: api.ReasonClusterIncomplete, DegradedMessage: "Replicate shop-s0-1 → shop-s0-0"}
	for _, tc := range []struct {
		name         string
		sets         []*unstructured.Unstructured
		view         api.MembersView
		viewOK       bool
		ready        bool
		readyMembers int64
		message      string
	}{
		{"a shard not made yet", []*unstructured.Unstructured{set(0, 2), set(2, 2)}, whole, true, false, 0, "0/2 replicas ready in every shard"},
		{"a shard with one ready", []*unstructured.Unstructured{set(0, 2), set(1, 1), set(2, 2)}, whole, true, false, 1, "1/2 replicas ready in every shard"},
		{"every member ready, no pass yet", []*unstructured.Unstructured{set(0, 2), set(1, 2), set(2, 2)}, api.MembersView{}, false, false, 2, "the cluster: waiting for the member pass"},
		{"every member ready, the cluster forming", []*unstructured.Unstructured{set(0, 2), set(1, 2), set(2, 2)}, forming, true, false, 2, "the cluster: Replicate shop-s0-1 → shop-s0-0"},
		{"every member ready, the cluster whole", []*unstructured.Unstructured{set(0, 2), set(1, 2), set(2, 2)}, whole, true, true, 2, "2/2 replicas ready in every shard; the cluster is ok"},
	} {
		s := New(mc, spec, api.DefaultClusterDomain, Observed{StatefulSets: tc.sets, View: tc.view, ViewOK: tc.viewOK})
		c := meta.FindStatusCondition(s.Conditions, api.ConditionReady)
		if (c.Status == metav1.ConditionTrue) != tc.ready || s.ReadyReplicas != tc.readyMembers || !strings.Contains(c.Message, tc.message) {
			t.Errorf("%s: Ready %s/%s (%s), readyReplicas %d; want ready %v, %d, a message with %q", tc.name, c.Status, c.Reason, c.Message,
				s.ReadyReplicas, tc.ready, tc.readyMembers, tc.message)
		}
	}
}
