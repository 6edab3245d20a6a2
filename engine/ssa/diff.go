package ssa

import (
	"bytes"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"example.com/cache-operator/engine/internal/jsonvalue"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/client-go/applyconfigurations"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v6/schema"
	"sigs.k8s.io/structured-merge-diff/v6/typed"
)

// Differ decides whether a live object has drifted from the object we would apply, without
// asking the API server. It knows the merge semantics of the built-in kinds (which lists are keyed
// by which fields) from client-go's schemas, so it compares the way server-side apply merges:
//
//   - every field we set must be present in the live object with an equal value; a field whose
//     schema type is a resource.Quantity compares by value ("1Gi" equals "1024Mi"), every other
//     string exactly ("7.4" differs from "7.40"); fields the server defaulted or other managers added are not
//     drift;
//   - elements of keyed lists (containers by name, ports by port and protocol) are matched by key,
//     so an element another manager added (a sidecar) is not drift; atomic lists must have the
//     same length;
//   - a field our field manager owns in the live object but that we no longer set is drift, so
//     that applying removes it.
type Differ struct {
	builtin  managedfields.TypeConverter
	deduced  managedfields.TypeConverter
	defaults serverDefaults
}

// NewDiffer returns a Differ that knows every kind in client-go's scheme; other kinds are
// compared structurally, every list treated as atomic.
func NewDiffer() *Differ {
	return &Differ{
		builtin: applyconfigurations.NewTypeConverter(scheme.Scheme),
		deduced: managedfields.NewDeducedTypeConverter(),
	}
}

func (d *Differ) typed(obj *unstructured.Unstructured) (*typed.TypedValue, error) {
	tv, err := d.builtin.ObjectToTyped(obj, typed.AllowDuplicates)
	if err == nil {
		return tv, nil
	}
	return d.deduced.ObjectToTyped(obj, typed.AllowDuplicates)
}

// Drift returns the paths at which live differs from desired (empty when nothing drifted).
// manager is the field manager whose ownership in live counts as "fields we set before". The
// paths never carry values, so they are safe to log for a Secret.
func (d *Differ) Drift(desired, live *unstructured.Unstructured, manager string) ([]string, error) {
	want, err := d.typed(desired)
	if err != nil {
		return nil, Errorf(desired, "reading desired object: %w", err)
	}
	var drift []string
	compareValue("", desired.Object, live.Object, want.Schema(), want.TypeRef(), &drift)

	owned, err := ownedFields(live, manager)
	if err != nil {
		return nil, Errorf(live, "%w", err)
	}
	if !owned.Empty() {
		set, err := want.ToFieldSet()
		if err != nil {
			return nil, Errorf(desired, "field set of desired object: %w", err)
		}
		// A create records the maps it fills as owned themselves (".metadata.labels"); applied
		// objects do not. A path that is a parent of a field we set is not a removal, and
		// neither is a field the API server filled in on create, at the value it fills in.
		parents := parentPaths(set)
		gvk := desired.GroupVersionKind()
		owned.Difference(set).Leaves().Iterate(func(p fieldpath.Path) {
			if !parents[p.String()] && !d.isServerDefault(gvk, live, p) {
				drift = append(drift, p.String()+": no longer set")
			}
		})
	}
	sort.Strings(drift)
	return drift, nil
}

// ownedFields returns the fields manager owns in live, through apply or through update (a
// create with that field manager).
func ownedFields(live *unstructured.Unstructured, manager string) (*fieldpath.Set, error) {
	owned := &fieldpath.Set{}
	for _, e := range live.GetManagedFields() {
		if e.Manager != manager || e.FieldsV1 == nil || e.Subresource != "" {
			continue
		}
		s := &fieldpath.Set{}
		if err := s.FromJSON(bytes.NewReader(e.FieldsV1.Raw)); err != nil {
			return nil, fmt.Errorf("decoding managed fields of %s: %w", manager, err)
		}
		owned = owned.Union(s)
	}
	return owned, nil
}

// hasUpdateEntry reports whether manager owns fields of obj through an update (not an apply).
func hasUpdateEntry(obj *unstructured.Unstructured, manager string) bool {
	for _, e := range obj.GetManagedFields() {
		if e.Manager == manager && e.Operation == metav1.ManagedFieldsOperationUpdate && e.Subresource == "" {
			return true
		}
	}
	return false
}

// compareValue appends to drift every path under path where want is not matched by got.
func compareValue(path string, want, got interface{}, s *schema.Schema, tr schema.TypeRef, drift *[]string) {
	if got == nil && want != nil {
		*drift = append(*drift, pathOr(path)+": missing")
		return
	}
	atom, _ := s.Resolve(tr)
	switch w := want.(type) {
	case map[string]interface{}:
		g, ok := got.(map[string]interface{})
		if !ok {
			*drift = append(*drift, pathOr(path)+": not an object")
			return
		}
		for k, wv := range w {
			if path == "" && (k == "status" || k == "metadata") {
				continue
			}
			compareValue(path+"."+k, wv, g[k], s, fieldType(atom, k), drift)
		}
		if path == "" {
			compareMetadata(w, g, s, fieldType(atom, "metadata"), drift)
		}
	case []interface{}:
		g, ok := got.([]interface{})
		if !ok {
			*drift = append(*drift, pathOr(path)+": not a list")
			return
		}
		compareList(path, w, g, s, atom.List, drift)
	default:
		if !equalScalar(want, got, tr) {
			*drift = append(*drift, pathOr(path)+": differs")
		}
	}
}

// compareMetadata compares only the metadata fields a child's owner sets.
func compareMetadata(want, got map[string]interface{}, s *schema.Schema, tr schema.TypeRef, drift *[]string) {
	wm, _ := want["metadata"].(map[string]interface{})
	gm, _ := got["metadata"].(map[string]interface{})
	atom, _ := s.Resolve(tr)
	for _, k := range []string{"labels", "annotations", "ownerReferences"} {
		if wv, ok := wm[k]; ok {
			compareValue(".metadata."+k, wv, gm[k], s, fieldType(atom, k), drift)
		}
	}
}

func compareList(path string, want, got []interface{}, s *schema.Schema, list *schema.List, drift *[]string) {
	var elem schema.TypeRef
	if list != nil {
		elem = list.ElementType
	}
	if list == nil || list.ElementRelationship != schema.Associative {
		if len(want) != len(got) {
			*drift = append(*drift, fmt.Sprintf("%s: %d items, want %d", pathOr(path), len(got), len(want)))
			return
		}
		for i := range want {
			compareValue(fmt.Sprintf("%s[%d]", path, i), want[i], got[i], s, elem, drift)
		}
		return
	}
	if len(list.Keys) == 0 { // a set of scalars
		for _, w := range want {
			found := false
			for _, g := range got {
				if equalScalar(w, g, elem) {
					found = true
					break
				}
			}
			if !found {
				*drift = append(*drift, fmt.Sprintf("%s: missing item %v", pathOr(path), w))
			}
		}
		return
	}
	for _, w := range want {
		wm, _ := w.(map[string]interface{})
		key := listKey(wm, list.Keys)
		var match interface{}
		for _, g := range got {
			if gm, ok := g.(map[string]interface{}); ok && sameKey(wm, gm, list.Keys, s, elem) {
				match = gm
				break
			}
		}
		p := fmt.Sprintf("%s[%s]", path, key)
		if match == nil {
			*drift = append(*drift, p+": missing")
			continue
		}
		compareValue(p, w, match, s, elem, drift)
	}
}

func listKey(m map[string]interface{}, keys []string) string {
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%v", k, m[k]))
	}
	return strings.Join(parts, ",")
}

func sameKey(a, b map[string]interface{}, keys []string, s *schema.Schema, elem schema.TypeRef) bool {
	atom, _ := s.Resolve(elem)
	for _, k := range keys {
		if !equalScalar(a[k], b[k], fieldType(atom, k)) {
			return false
		}
	}
	return true
}

// fieldType returns the type of field name in a map atom (a struct field or a map's element).
func fieldType(atom schema.Atom, name string) schema.TypeRef {
	if atom.Map == nil {
		return schema.TypeRef{}
	}
	if f, ok := atom.Map.FindField(name); ok {
		return f.Type
	}
	return atom.Map.ElementType
}

// quantityType is the schema name of resource.Quantity in the built-in kinds' schemas.
const quantityType = "io.k8s.apimachinery.pkg.api.resource.Quantity"

// equalScalar compares two JSON scalars of schema type tr: numbers by value whatever their Go
// type, quantities by value, every other string exactly.
func equalScalar(a, b interface{}, tr schema.TypeRef) bool {
	if reflect.DeepEqual(a, b) {
		return true
	}
	if fa, ok := jsonvalue.Number(a); ok {
		fb, ok := jsonvalue.Number(b)
		return ok && fa == fb
	}
	if tr.NamedType == nil || *tr.NamedType != quantityType {
		return false
	}
	sa, okA := a.(string)
	sb, okB := b.(string)
	if okA && okB {
		qa, errA := resource.ParseQuantity(sa)
		qb, errB := resource.ParseQuantity(sb)
		return errA == nil && errB == nil && qa.Cmp(qb) == 0
	}
	return false
}

func pathOr(p string) string {
	if p == "" {
		return "."
	}
	return p
}
