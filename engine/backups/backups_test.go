package backups

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"example.com/cache-operator/engine/api"
)

func cacheWithMembers(primary string, members ...map[string]interface{}) *unstructured.Unstructured {
	mc := &unstructured.Unstructured{Object: map[string]interface{}{"status": map[string]interface{}{}}}
	mc.SetName("c")
	mc.SetNamespace("ns")
	if primary != "" {
		_ = unstructured.SetNestedField(mc.Object, primary, "status", "primary")
	}
	list := make([]interface{}, len(members))
	for i, m := range members {
		list[i] = m
	}
	_ = unstructured.SetNestedSlice(mc.Object, list, "status", "members")
	return mc
}

func TestChooseMember(t *testing.T) {
	cases := []struct {
		name        string
		mc          *unstructured.Unstructured
		want        string
		fromPrimary bool
	}{
		{"the highest replica in sync", cacheWithMembers("c-0",
			map[string]interface{}{"name": "c-0", "role": "primary"},
			map[string]interface{}{"name": "c-1", "role": "replica"},
			map[string]interface{}{"name": "c-2", "role": "replica"}), "c-2", false},
		{"a lagging replica is passed over", cacheWithMembers("c-0",
			map[string]interface{}{"name": "c-0", "role": "primary"},
			map[string]interface{}{"name": "c-1", "role": "replica"},
			map[string]interface{}{"name": "c-2", "role": "replica", "lagBytes": int64(1 << 20)}), "c-1", false},
		{"no replica in sync: the primary", cacheWithMembers("c-0",
			map[string]interface{}{"name": "c-0", "role": "primary"},
			map[string]interface{}{"name": "c-1", "role": "unknown"}), "c-0", true},
		{"no primary: none", cacheWithMembers("",
			map[string]interface{}{"name": "c-0", "role": "replica"}), "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod, host, fromPrimary, why := chooseMember(tc.mc, "cluster.local")
			if pod != tc.want || fromPrimary != tc.fromPrimary {
				t.Fatalf("chose %q (from primary %v, %q); want %q (%v)", pod, fromPrimary, why, tc.want, tc.fromPrimary)
			}
			if pod != "" && host != pod+".c.ns.svc.cluster.local" {
				t.Errorf("host %q", host)
			}
			if pod == "" && why == "" {
				t.Error("no member and no reason")
			}
		})
	}
}

func TestRefusal(t *testing.T) {
	spec := api.Spec{Engine: api.Engine{Name: "redis", Version: "7.0"}}
	if r := refusal("redis", "8.0.2", spec); !strings.Contains(r, "reads snapshot formats up to 10 and the data is in format 12") {
		t.Errorf("8.0 into 7.0: %q", r)
	}
	for _, ok := range []string{"7.0.15", "6.2.14"} {
		if r := refusal("redis", ok, spec); r != "" {
			t.Errorf("%s into 7.0 refused: %s", ok, r)
		}
	}
	if r := refusal("valkey", "8.1.1", api.Spec{Engine: api.Engine{Name: "redis", Version: "8.0"}}); r == "" {
		t.Error("a valkey backup into redis accepted")
	}
	if r := refusal("redis", "7.2.4", api.Spec{Engine: api.Engine{Name: "valkey", Version: "8.1"}}); r != "" {
		t.Errorf("redis 7.2 into valkey 8.1 refused: %s", r)
	}
	if r := refusal("redis", "8.0.2", api.Spec{Engine: api.Engine{Name: "valkey", Version: "8.1"}}); !strings.Contains(r, "valkey reads redis data up to redis 7.2") {
		t.Errorf("redis 8.0 into valkey 8.1: %q", r)
	}
	if r := refusal("redis", "7.2.4", api.Spec{Engine: api.Engine{Name: "redis", Version: "7.0"}}); r == "" {
		t.Error("a redis 7.2 backup (format 11) into redis 7.0 accepted")
	}
}

func TestScheduledNameIsTheSlot(t *testing.T) {
	slot := time.Date(2026, 12, 3, 6, 0, 0, 0, time.UTC)
	if got := ScheduledName("sessions", slot.In(time.FixedZone("x", 3600))); got != "sessions-20261203-060000" {
		t.Errorf("ScheduledName = %q", got)
	}
	sched, err := api.ParseSchedule("0 */6 * * *")
	if err != nil {
		t.Fatal(err)
	}
	if next := sched.Next(slot.Add(-time.Second)); !next.Equal(slot) {
		t.Errorf("next slot %v; want %v (UTC)", next, slot)
	}
	for _, bad := range []string{"61 * * * *", "every day", "* * *"} {
		if _, err := api.ParseSchedule(bad); err == nil {
			t.Errorf("schedule %q parsed", bad)
		}
	}
}

// The interval the stale-backup alert compares with: a schedule's longest gap between slots.
func TestLongestInterval(t *testing.T) {
	from := time.Date(2026, 12, 3, 6, 0, 0, 0, time.UTC) // a Thursday
	for _, tc := range []struct {
		schedule string
		want     time.Duration
	}{
		{"0 */6 * * *", 6 * time.Hour},
		{"30 2 * * *", 24 * time.Hour},
		{"0 3 * * 1-5", 72 * time.Hour}, // Friday to Monday
		{"@weekly", 7 * 24 * time.Hour},
	} {
		sched, err := api.ParseSchedule(tc.schedule)
		if err != nil {
			t.Fatal(err)
		}
		if got := longestInterval(sched, sched.Next(from), 8); got != tc.want {
			t.Errorf("%q: longest interval %v; want %v", tc.schedule, got, tc.want)
		}
	}
}

func TestRestoreProgress(t *testing.T) {
	now := time.Date(2026, 12, 3, 3, 0, 0, 0, time.UTC)
	rs := api.RestoreStatus{Phase: api.RestoreRunning, Path: "ns/c/b.rdb", Location: "s3://b/ns/c/b.rdb"}
	cases := []struct {
		name                 string
		rs                   api.RestoreStatus
		primary, initFailure string
		phase, message       string
	}{
		{"loading", rs, "", "", api.RestoreRunning, "c-0 loads the backup"},
		{"another member primary does not complete it", rs, "c-1", "", api.RestoreRunning, "c-0 loads the backup"},
		{"the restored member primary", rs, "c-0", "", api.RestoreCompleted, ""},
		{"the restore container failed", rs, "", "restore: restore failed: corrupt", api.RestoreFailed, "restore: restore failed: corrupt"},
		{"refused", api.RestoreStatus{Phase: api.RestoreFailed, Refused: "newer"}, "", "", api.RestoreFailed, "newer"},
	}
	for _, tc := range cases {
		got := RestoreProgress(tc.rs, "c-0", tc.primary, tc.initFailure, now)
		if got.Phase != tc.phase || got.Message != tc.message || (tc.phase == api.RestoreCompleted) != (got.CompletionTime != "") {
			t.Errorf("%s: %+v; want phase %s message %q", tc.name, got, tc.phase, tc.message)
		}
	}
}
