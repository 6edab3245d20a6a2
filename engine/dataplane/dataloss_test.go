package dataplane

import (
	"context"
	"example.com/cache-operator/engine/api"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/record"

	"example.com/cache-operator/engine/member"
	"example.com/cache-operator/engine/roles"
)

// A loss is reported when every member answers empty on a history the keys were not on; a
// dataset emptied by its clients, a failover, a member still loading or one that does not answer
// is not a loss.
func TestCheckDataLoss(t *testing.T) {
	m := func(keys int64, id, id2 string) roles.Member {
		return roles.Member{Observed: true, Repl: member.Replication{Keys: keys, ReplID: id, ReplID2: id2}}
	}
	cases := []struct {
		name   string
		passes [][]roles.Member
		want   int
	}{
		{"every member back empty on a new history", [][]roles.Member{{m(1000, "a", ""), m(1000, "a", "")}, {m(0, "b", ""), m(0, "b", "")}}, 1},
		{"reported once", [][]roles.Member{{m(1000, "a", "")}, {m(0, "b", "")}, {m(0, "b", "")}, {m(0, "c", "")}}, 1},
		{"emptied by its clients (same history)", [][]roles.Member{{m(1000, "a", ""), m(1000, "a", "")}, {m(0, "a", ""), m(0, "a", "")}}, 0},
		{"a failover continues the history", [][]roles.Member{{m(1000, "a", "")}, {m(0, "b", "a")}}, 0},
		{"one member still holds keys", [][]roles.Member{{m(1000, "a", ""), m(1000, "a", "")}, {m(0, "b", ""), m(5, "b", "")}}, 0},
		{"never held keys", [][]roles.Member{{m(0, "a", "")}, {m(0, "b", "")}}, 0},
		{"a member that does not answer says nothing", [][]roles.Member{{m(1000, "a", "")}, {m(0, "b", ""), {Observed: false}}}, 0},
		{"lost again after it held keys again", [][]roles.Member{{m(10, "a", "")}, {m(0, "b", "")}, {m(10, "b", "")}, {m(0, "c", "")}}, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := record.NewFakeRecorder(10)
			c := &Controller{recorder: rec}
			mc := &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "cache.example.com/v2", "kind": "ManagedCache",
				"metadata": map[string]interface{}{"name": "c", "namespace": "ns", "generation": int64(1)}}}
			var d dataLoss
			for _, members := range tc.passes {
				c.checkDataLoss(context.Background(), mc, members, &d)
			}
			close(rec.Events)
			got := 0
			for e := range rec.Events {
				if strings.Contains(e, api.ReasonDataLost) {
					got++
					if !strings.Contains(e, "keys at the last poll") {
						t.Errorf("event %q does not name the keys", e)
					}
				}
			}
			if got != tc.want {
				t.Errorf("%d DataLost Events; want %d", got, tc.want)
			}
		})
	}
}
