package dataplane

import (
	"strings"
	"testing"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/roles"
)

// A reset is asked for when a member on the old revision runs a server whose data the spec's
// cannot load, and only then: not for an upgrade, not for members already on the new revision,
// not for a pod that does not say what it runs.
func TestResetReason(t *testing.T) {
	spec := api.Spec{Engine: api.Engine{Name: "redis", Version: "7.0"}}
	old := func(server string) roles.Member { return roles.Member{Name: "c-0", Revision: "r1", Server: server} }
	for _, tc := range []struct {
		name    string
		members []roles.Member
		spec    api.Spec
		want    string // "" none; else a substring
	}{
		{"8.0 to 7.0", []roles.Member{old("redis-8.0")}, spec, "redis 8.0 to redis 7.0: redis 7.0 reads snapshot formats up to 10 and the data is in format 12"},
		{"7.0 to 8.0 is an upgrade", []roles.Member{old("redis-7.0")}, api.Spec{Engine: api.Engine{Name: "redis", Version: "8.0"}}, ""},
		{"valkey to redis", []roles.Member{old("valkey-8.1")}, api.Spec{Engine: api.Engine{Name: "redis", Version: "8.0"}}, "redis cannot load data written by valkey"},
		{"already on the new revision", []roles.Member{{Name: "c-0", Revision: "r2", Server: "redis-8.0"}}, spec, ""},
		{"a pod made before the label", []roles.Member{old("")}, spec, ""},
		{"a label that does not parse", []roles.Member{old("redis")}, spec, ""},
	} {
		got := resetReason(tc.members, "r2", tc.spec)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
