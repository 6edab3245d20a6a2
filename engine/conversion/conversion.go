// Package conversion converts ManagedCache objects between the API versions v1 and v2, on
// unstructured maps, and serves the CRD conversion webhook.
//
// v2 is the hub: the operator reads v2. Conversion is lossless both ways:
//   - v1 -> v2 -> v1 returns the identical object;
//   - v2 -> v1 -> v2 returns the identical object: whatever v1 cannot express (engine.name,
//     a storage size that is not a whole number of GiB, storageClassName, eviction.maxMemory,
//     resources, ...) travels in the annotation cache.example.com/v2-spec as JSON;
//   - an edit made through v1 between two conversions wins over that annotation: a value from
//     the annotation is restored only where it still agrees with the v1 fields (a storage size of
//     "10.5Gi" is kept while storageGi is still 11, and dropped once a user set storageGi: 20).
//
// It is not for validation or defaulting: the CRD schema does both for each version.
package conversion

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"

	"example.com/cache-operator/engine/internal/jsonvalue"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Group and versions.
const (
	Group = "cache.example.com"
	V1    = Group + "/v1"
	V2    = Group + "/v2"
	// SpecAnnotation carries, on a v1 object, the parts of a v2 spec that v1 cannot express.
	SpecAnnotation = "cache.example.com/v2-spec"
)

var gi = resource.MustParse("1Gi")

// Convert returns obj converted to apiVersion (V1 or V2). obj is not modified.
func Convert(obj map[string]interface{}, apiVersion string) (map[string]interface{}, error) {
	from, _ := obj["apiVersion"].(string)
	switch {
	case from == apiVersion:
		return deepCopy(obj), nil
	case from == V1 && apiVersion == V2:
		return ToV2(obj)
	case from == V2 && apiVersion == V1:
		return ToV1(obj)
	}
	return nil, fmt.Errorf("cannot convert %q to %q", from, apiVersion)
}

// ToV2 converts a v1 object to v2.
func ToV2(v1 map[string]interface{}) (map[string]interface{}, error) {
	out := deepCopy(v1)
	out["apiVersion"] = V2
	spec, _ := out["spec"].(map[string]interface{})
	if spec == nil {
		return out, nil
	}
	out["spec"] = specUp(spec)
	meta, _ := out["metadata"].(map[string]interface{})
	annotations, _ := meta["annotations"].(map[string]interface{})
	raw, ok := annotations[SpecAnnotation].(string)
	if !ok {
		return out, nil
	}
	extra, err := decodeObject([]byte(raw))
	if err != nil {
		// Not ours to interpret: leave the annotation where it is.
		return out, nil
	}
	restore(out["spec"].(map[string]interface{}), spec, extra)
	delete(annotations, SpecAnnotation)
	if len(annotations) == 0 {
		delete(meta, "annotations")
		if len(meta) == 0 {
			delete(out, "metadata") // ToV1 made it only to carry the annotation
		}
	}
	return out, nil
}

// specUp maps the v1 spec fields to their v2 places; it creates only what v1 has.
func specUp(s map[string]interface{}) map[string]interface{} {
	v2 := map[string]interface{}{}
	for k, v := range s {
		switch k {
		case "size":
			v2["replicas"] = v
		case "version":
			v2["engine"] = map[string]interface{}{"version": v}
		case "storageGi":
			v2["storage"] = map[string]interface{}{"size": fmt.Sprintf("%vGi", v)}
		case "evictionPolicy":
			v2["eviction"] = map[string]interface{}{"policy": v}
		default:
			v2[k] = deepCopyValue(v)
		}
	}
	return v2
}

// restore writes into the v2 spec up each value of extra (the annotation) that agrees with the v1
// spec v1: one that converts back to the same v1 fields. A value that does not was overridden by
// an edit through v1 since the annotation was written, and the edit wins. Only a value on the way
// to or under a field v1 maps (mapped) can disagree; each such value is judged on those fields
// alone, so that the cost grows with the annotation's size, not with its square (a copy of the
// whole spec per value made a large annotation a way to spend the API server's time).
func restore(up, v1, extra map[string]interface{}) {
	// agrees judges the spec with l set (no path: as it is) on the mapped fields alone.
	agrees := func(l leaf) bool {
		candidate := map[string]interface{}{}
		for _, x := range mapped {
			if v, ok := valueAfter(up, x, l); ok {
				setPath(candidate, x, v)
			}
		}
		return sameV1Fields(specDown(candidate), v1)
	}
	agreeing := agrees(leaf{}) // a value beside the mapped fields agrees if the spec does
	for _, l := range leaves(nil, extra) {
		related := false
		for _, x := range mapped {
			related = related || prefixOf(l.path, x) || prefixOf(x, l.path)
		}
		if related && agrees(l) {
			setPath(up, l.path, deepCopyValue(l.value))
			agreeing = true
		} else if !related && agreeing {
			setPath(up, l.path, deepCopyValue(l.value))
		}
	}
}

// mapped are the v2 fields specDown reads.
var mapped = [][]string{{"replicas"}, {"engine", "version"}, {"storage", "size"}, {"eviction", "policy"}}

// prefixOf reports whether p is a prefix of path (or equal to it).
func prefixOf(p, path []string) bool {
	if len(p) > len(path) {
		return false
	}
	for i := range p {
		if p[i] != path[i] {
			return false
		}
	}
	return true
}

// valueAfter is the value at x in up once leaf is set there (setPath), and whether there is one
// (a leaf without a path: the value at x in up).
func valueAfter(up map[string]interface{}, x []string, l leaf) (interface{}, bool) {
	switch {
	case len(l.path) == 0: // no leaf: the value at x now
	case prefixOf(l.path, x) && len(l.path) == len(x):
		return l.value, true
	case prefixOf(l.path, x):
		// The leaf (a value that is no map, or an empty map) takes the place of x's parent.
		return nil, false
	case prefixOf(x, l.path):
		// x becomes, or stays, a map holding the leaf: what specDown makes of a map is the same
		// whatever else it holds.
		m := map[string]interface{}{}
		setPath(m, l.path[len(x):], l.value)
		return m, true
	}
	var v interface{} = up
	for _, k := range x {
		m, ok := v.(map[string]interface{})
		if !ok {
			return nil, false
		}
		if v, ok = m[k]; !ok {
			return nil, false
		}
	}
	return v, true
}

// v1Fields are the fields of a v1 spec that conversion maps.
var v1Fields = []string{"size", "version", "storageGi", "evictionPolicy"}

func sameV1Fields(a, b map[string]interface{}) bool {
	for _, f := range v1Fields {
		av, aok := a[f]
		bv, bok := b[f]
		if aok != bok || (aok && !equalJSON(av, bv)) {
			return false
		}
	}
	return true
}

type leaf struct {
	path  []string
	value interface{}
}

// leaves lists the values of m that are not non-empty maps, with their paths, in the order of
// their keys (restore's result must not depend on a map's order).
func leaves(prefix []string, m map[string]interface{}) []leaf {
	var out []leaf
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v := m[k]
		p := append(append([]string{}, prefix...), k)
		if vm, ok := v.(map[string]interface{}); ok && len(vm) > 0 {
			out = append(out, leaves(p, vm)...)
			continue
		}
		out = append(out, leaf{p, v})
	}
	return out
}

// setPath sets m[path...] to v, creating the maps on the way (replacing a non-map).
func setPath(m map[string]interface{}, path []string, v interface{}) {
	for _, k := range path[:len(path)-1] {
		next, ok := m[k].(map[string]interface{})
		if !ok {
			next = map[string]interface{}{}
			m[k] = next
		}
		m = next
	}
	m[path[len(path)-1]] = v
}

// ToV1 converts a v2 object to v1.
func ToV1(v2 map[string]interface{}) (map[string]interface{}, error) {
	out := deepCopy(v2)
	out["apiVersion"] = V1
	spec, _ := out["spec"].(map[string]interface{})
	if spec == nil {
		return out, nil
	}
	v1 := specDown(spec)
	out["spec"] = v1
	// What v1 cannot carry: everything of the v2 spec that converting back would not restore.
	extra := subtract(spec, specUp(v1))
	if len(extra) == 0 {
		return out, nil
	}
	b, err := json.Marshal(extra)
	if err != nil {
		return nil, err
	}
	meta, _ := out["metadata"].(map[string]interface{})
	if meta == nil {
		meta = map[string]interface{}{}
		out["metadata"] = meta
	}
	annotations, _ := meta["annotations"].(map[string]interface{})
	if annotations == nil {
		annotations = map[string]interface{}{}
		meta["annotations"] = annotations
	}
	annotations[SpecAnnotation] = string(b)
	return out, nil
}

// specDown maps a v2 spec to the v1 fields; it creates only what v2 has.
func specDown(spec map[string]interface{}) map[string]interface{} {
	v1 := map[string]interface{}{}
	if r, ok := spec["replicas"]; ok {
		v1["size"] = r
	}
	if e, ok := spec["engine"].(map[string]interface{}); ok {
		if v, ok := e["version"]; ok {
			v1["version"] = v
		}
	}
	if s, ok := spec["storage"].(map[string]interface{}); ok {
		if str, ok := s["size"].(string); ok {
			if q, err := resource.ParseQuantity(str); err == nil {
				v1["storageGi"] = int64(math.Ceil(float64(q.Value()) / float64(gi.Value())))
			}
		}
	}
	if e, ok := spec["eviction"].(map[string]interface{}); ok {
		if p, ok := e["policy"]; ok {
			v1["evictionPolicy"] = p
		}
	}
	return v1
}

// subtract returns the parts of want that have is missing or has with another value.
func subtract(want, have map[string]interface{}) map[string]interface{} {
	out := map[string]interface{}{}
	for k, w := range want {
		h, ok := have[k]
		wm, wIsMap := w.(map[string]interface{})
		hm, hIsMap := h.(map[string]interface{})
		switch {
		case ok && wIsMap && hIsMap:
			if len(wm) == 0 && len(hm) != 0 {
				out[k] = w
			} else if sub := subtract(wm, hm); len(sub) > 0 {
				out[k] = sub
			}
		case !ok || !equalJSON(w, h):
			out[k] = w
		}
	}
	return out
}

// equalJSON compares two JSON values, numbers by value whatever their Go type.
func equalJSON(a, b interface{}) bool {
	na, okA := jsonvalue.Number(a)
	nb, okB := jsonvalue.Number(b)
	if okA || okB {
		return okA && okB && na == nb
	}
	return reflect.DeepEqual(a, b)
}

func deepCopy(m map[string]interface{}) map[string]interface{} {
	return deepCopyValue(m).(map[string]interface{})
}

func deepCopyValue(v interface{}) interface{} {
	switch t := v.(type) {
	case map[string]interface{}:
		out := make(map[string]interface{}, len(t))
		for k, e := range t {
			out[k] = deepCopyValue(e)
		}
		return out
	case []interface{}:
		out := make([]interface{}, len(t))
		for i, e := range t {
			out[i] = deepCopyValue(e)
		}
		return out
	}
	return v
}

// decodeObject decodes a JSON object with integers as int64, as the API machinery does.
func decodeObject(b []byte) (map[string]interface{}, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var m map[string]interface{}
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, fmt.Errorf("not a JSON object")
	}
	return fixNumbers(m).(map[string]interface{}), nil
}

func fixNumbers(v interface{}) interface{} {
	switch t := v.(type) {
	case map[string]interface{}:
		for k, e := range t {
			t[k] = fixNumbers(e)
		}
	case []interface{}:
		for i, e := range t {
			t[i] = fixNumbers(e)
		}
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return i
		}
		f, _ := t.Float64()
		return f
	}
	return v
}
