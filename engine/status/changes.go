package status

import (
	"maps"
	"reflect"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"example.com/cache-operator/engine/api"
)

// Changes names what differs between two statuses: a field's JSON name, or a condition's
// type with what changed in it ("Ready.status", "Ready.message").
func Changes(old, cur api.Status) []string {
	var out []string
	for _, f := range []struct {
		name string
		same bool
	}{
		{"observedGeneration", old.ObservedGeneration == cur.ObservedGeneration},
		{"readyReplicas", old.ReadyReplicas == cur.ReadyReplicas},
		{"endpoint", old.Endpoint == cur.Endpoint},
		{"readEndpoint", old.ReadEndpoint == cur.ReadEndpoint},
		{"selector", old.Selector == cur.Selector},
		{"primary", old.Primary == cur.Primary},
		{"members", reflect.DeepEqual(old.Members, cur.Members)},
		{"tls", reflect.DeepEqual(old.TLS, cur.TLS)},
		{"backup", reflect.DeepEqual(old.Backup, cur.Backup)},
		{"restore", reflect.DeepEqual(old.Restore, cur.Restore)},
		{"lastFailover", reflect.DeepEqual(old.LastFailover, cur.LastFailover)},
		{"hibernation", reflect.DeepEqual(old.Hibernation, cur.Hibernation)},
		{"reshard", reflect.DeepEqual(old.Reshard, cur.Reshard)},
	} {
		if !f.same {
			out = append(out, f.name)
		}
	}
	types := map[string]string{}
	for _, c := range append(append([]metav1.Condition(nil), old.Conditions...), cur.Conditions...) {
		types[c.Type] = c.Type
	}
	for _, t := range slices.Sorted(maps.Keys(types)) {
		o, c := meta.FindStatusCondition(old.Conditions, t), meta.FindStatusCondition(cur.Conditions, t)
		switch {
		case o == nil || c == nil:
			out = append(out, t)
		case o.Status != c.Status || o.Reason != c.Reason || o.ObservedGeneration != c.ObservedGeneration:
			out = append(out, t+".status")
		case o.Message != c.Message:
			out = append(out, t+".message")
		}
	}
	return out
}

// Progress reports whether status changes report progress only: the ready count, the members'
// roles and lag, a condition's message, and the primary of a cache that is not Ready (yet).
// Every other change is one a user acts on (a condition's status or reason, the generation
// observed, an endpoint, a Ready cache's primary) and is written at once.
func Progress(changes []string, ready bool) bool {
	for _, ch := range changes {
		switch {
		case ch == "readyReplicas", ch == "members", strings.HasSuffix(ch, ".message"):
		case ch == "primary" && !ready:
		default:
			return false
		}
	}
	return true
}
