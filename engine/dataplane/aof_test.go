package dataplane

import (
	"reflect"
	"testing"

	"example.com/cache-operator/engine/member"
	"example.com/cache-operator/engine/roles"
)

// A restored cache's members: the primary's AOF is turned on as soon as it loaded, a replica's
// only once no member loads any more; a member with its AOF on, or that does not answer, is left.
func TestAOFToEnable(t *testing.T) {
	m := func(name string, role member.Role, observed, loading, off bool) roles.Member {
		return roles.Member{Name: name, Observed: observed, Repl: member.Replication{Role: role, Loading: loading, AOFOff: off}}
	}
	for _, tc := range []struct {
		name    string
		members []roles.Member
		want    []int
	}{
		{"every member loading", []roles.Member{m("c-0", member.Primary, true, true, true), m("c-1", member.Replica, true, true, true)}, nil},
		{"the primary loaded, a replica loading", []roles.Member{m("c-0", member.Primary, true, false, true), m("c-1", member.Replica, true, false, true), m("c-2", member.Replica, true, true, true)}, []int{0}},
		{"all loaded", []roles.Member{m("c-0", member.Primary, true, false, false), m("c-1", member.Replica, true, false, true), m("c-2", member.Replica, true, false, true)}, []int{1, 2}},
		{"one does not answer", []roles.Member{m("c-0", member.Primary, true, false, false), m("c-1", member.Replica, false, false, false), m("c-2", member.Replica, true, false, true)}, []int{2}},
		{"AOF on everywhere", []roles.Member{m("c-0", member.Primary, true, false, false), m("c-1", member.Replica, true, false, false)}, nil},
	} {
		if got := aofToEnable(tc.members); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %v; want %v", tc.name, got, tc.want)
		}
	}
}
