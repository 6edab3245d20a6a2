package roles

import (
	"reflect"
	"testing"
)

// A member is replaced at once only when it cannot start and was made from another revision than
// the StatefulSet's current one; anything else is left to the roll or to waiting.
func TestStuck(t *testing.T) {
	pull := "ErrImagePull: pull access denied"
	cases := []struct {
		name    string
		members []Member
		update  string
		want    []string
	}{
		{"stuck on an outdated revision", []Member{{Name: "c-0", Revision: "old", Stuck: pull}}, "new", []string{"c-0"}},
		{"every member stuck, whatever the others", []Member{
			{Name: "c-0", Revision: "old", Stuck: pull}, {Name: "c-1", Revision: "old", Stuck: "CrashLoopBackOff"},
			{Name: "c-2", Revision: "old", Stuck: "CreateContainerError"}}, "new", []string{"c-0", "c-1", "c-2"}},
		{"stuck on the current revision: made anew it would be the same", []Member{{Name: "c-0", Revision: "new", Stuck: pull}}, "new", nil},
		{"outdated but starting: the roll's", []Member{{Name: "c-0", Revision: "old"}}, "new", nil},
		{"already being deleted", []Member{{Name: "c-0", Revision: "old", Stuck: pull, Deleting: true}}, "new", nil},
		{"its server answers", []Member{{Name: "c-0", Revision: "old", Stuck: pull, Observed: true}}, "new", nil},
		{"no update revision known", []Member{{Name: "c-0", Revision: "old", Stuck: pull}}, "", nil},
		{"no revision on the pod", []Member{{Name: "c-0", Stuck: pull}}, "new", nil},
		{"only the stuck one of three", []Member{
			{Name: "c-0", Revision: "new", Observed: true}, {Name: "c-1", Revision: "old", Stuck: pull},
			{Name: "c-2", Revision: "old", Observed: true}}, "new", []string{"c-1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, m := range Stuck(tc.members, tc.update) {
				got = append(got, m.Name)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Stuck = %v; want %v", got, tc.want)
			}
		})
	}
}
