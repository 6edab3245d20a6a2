package ssa

import (
	"reflect"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v6/value"
)

// serverDefaults are the fields the API server fills in when an object is created, by kind: a
// field pattern (list keys replaced by "*") and the value it gets. A plain create records them in
// the creator's managedFields entry, as if the creator had set them; they are not fields a
// template dropped, so the drift check must not count them as "no longer set" (it would apply
// every child once after its create, three requests each).
type serverDefaults struct {
	mu sync.RWMutex
	// byKind maps a kind to its patterns; a pattern seen with two different values maps to
	// ambiguous and is never skipped.
	byKind map[schema.GroupVersionKind]map[string]interface{}
	// epoch counts the changes to byKind: a verdict of the drift check holds while it stays.
	epoch uint64
}

// ambiguous marks a pattern the server filled with different values in different objects.
type ambiguousValue struct{}

var ambiguous = ambiguousValue{}

// LearnDefaults records what the API server filled in when it created created from want (a
// plain create by manager: its Update entry lists what want set and what the server added). Call
// it with the response of a create, or of a dry-run create.
func (d *Differ) LearnDefaults(want, created *unstructured.Unstructured, manager string) error {
	owned, err := ownedFields(created, manager)
	if err != nil {
		return err
	}
	tv, err := d.typed(want)
	if err != nil {
		return Errorf(want, "reading desired object: %w", err)
	}
	set, err := tv.ToFieldSet()
	if err != nil {
		return Errorf(want, "field set of desired object: %w", err)
	}
	parents := parentPaths(set)
	learned := map[string]interface{}{}
	owned.Difference(set).Leaves().Iterate(func(p fieldpath.Path) {
		if parents[p.String()] {
			return
		}
		if v, ok := valueAt(created.Object, p); ok {
			learned[pattern(p)] = v
		}
	})
	gvk := want.GroupVersionKind()
	d.defaults.mu.Lock()
	defer d.defaults.mu.Unlock()
	if d.defaults.byKind == nil {
		d.defaults.byKind = map[schema.GroupVersionKind]map[string]interface{}{}
	}
	known := d.defaults.byKind[gvk]
	if known == nil {
		known = map[string]interface{}{}
		d.defaults.byKind[gvk] = known
	}
	for p, v := range learned {
		old, seen := known[p]
		switch {
		case !seen:
			known[p] = v
			d.defaults.epoch++
		case old != ambiguous && !reflect.DeepEqual(old, v):
			known[p] = ambiguous
			d.defaults.epoch++
		}
	}
	return nil
}

// DefaultsEpoch changes whenever the Differ learns a default it did not know (or finds one
// ambiguous): a Drift verdict given in one epoch may differ in another.
func (d *Differ) DefaultsEpoch() uint64 {
	d.defaults.mu.RLock()
	defer d.defaults.mu.RUnlock()
	return d.defaults.epoch
}

// isServerDefault reports whether the field at p of live holds the value the API server fills in
// there on create.
func (d *Differ) isServerDefault(gvk schema.GroupVersionKind, live *unstructured.Unstructured, p fieldpath.Path) bool {
	d.defaults.mu.RLock()
	want, ok := d.defaults.byKind[gvk][pattern(p)]
	d.defaults.mu.RUnlock()
	if !ok || want == ambiguous {
		return false
	}
	got, ok := valueAt(live.Object, p)
	return ok && reflect.DeepEqual(got, want)
}

// parentPaths lists every proper prefix of the paths in set.
func parentPaths(set *fieldpath.Set) map[string]bool {
	parents := map[string]bool{}
	set.Iterate(func(p fieldpath.Path) {
		for i := 1; i < len(p); i++ {
			parents[p[:i].String()] = true
		}
	})
	return parents
}

// pattern is p with every list element written as [*], so that a default learned from one
// object applies to the same field of another (a container of another name).
func pattern(p fieldpath.Path) string {
	var b strings.Builder
	for _, e := range p {
		if e.FieldName != nil {
			b.WriteString("." + *e.FieldName)
		} else {
			b.WriteString("[*]")
		}
	}
	return b.String()
}

// valueAt returns the value of obj at p, following list elements by key, value or index.
func valueAt(obj interface{}, p fieldpath.Path) (interface{}, bool) {
	cur := obj
	for _, e := range p {
		switch {
		case e.FieldName != nil:
			m, ok := cur.(map[string]interface{})
			if !ok {
				return nil, false
			}
			if cur, ok = m[*e.FieldName]; !ok {
				return nil, false
			}
		case e.Key != nil:
			l, ok := cur.([]interface{})
			if !ok {
				return nil, false
			}
			cur = nil
			for _, item := range l {
				m, ok := item.(map[string]interface{})
				if ok && keyMatches(m, *e.Key) {
					cur = m
					break
				}
			}
			if cur == nil {
				return nil, false
			}
		case e.Value != nil:
			l, ok := cur.([]interface{})
			if !ok {
				return nil, false
			}
			want := value.ToString(*e.Value)
			cur = nil
			for _, item := range l {
				if value.ToString(value.NewValueInterface(item)) == want {
					cur = item
					break
				}
			}
			if cur == nil {
				return nil, false
			}
		case e.Index != nil:
			l, ok := cur.([]interface{})
			if !ok || *e.Index >= len(l) {
				return nil, false
			}
			cur = l[*e.Index]
		default:
			return nil, false
		}
	}
	return cur, true
}

// keyMatches reports whether a list element has the key's field values.
func keyMatches(m map[string]interface{}, key value.FieldList) bool {
	for _, f := range key {
		if value.ToString(value.NewValueInterface(m[f.Name])) != value.ToString(f.Value) {
			return false
		}
	}
	return true
}
