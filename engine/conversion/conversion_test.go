package conversion

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func obj(t testing.TB, y string) map[string]interface{} {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	m, err := decodeObject(j)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestConvertTable(t *testing.T) {
	cases := []struct{ name, v1, v2 string }{
		{"all v1 fields", `
apiVersion: cache.example.com/v1
kind: ManagedCache
metadata: {name: s, namespace: shop}
spec: {size: 3, version: "7.2", storageGi: 10, evictionPolicy: allkeys-lru}
status: {readyReplicas: 3}`, `
apiVersion: cache.example.com/v2
kind: ManagedCache
metadata: {name: s, namespace: shop}
spec: {replicas: 3, engine: {version: "7.2"}, storage: {size: 10Gi}, eviction: {policy: allkeys-lru}}
status: {readyReplicas: 3}`},
		{"only the required field", `
apiVersion: cache.example.com/v1
kind: ManagedCache
metadata: {name: s}
spec: {version: "7.0"}`, `
apiVersion: cache.example.com/v2
kind: ManagedCache
metadata: {name: s}
spec: {engine: {version: "7.0"}}`},
		{"v2-only fields travel in the annotation", `
apiVersion: cache.example.com/v1
kind: ManagedCache
metadata:
  name: s
  annotations:
    cache.example.com/v2-spec: '{"engine":{"name":"valkey"},"eviction":{"maxMemory":"1Gi"},"resources":{"limits":{"memory":"2Gi"}},"storage":{"size":"1536Mi","storageClassName":"fast"}}'
spec: {size: 5, version: "8.0", storageGi: 2, evictionPolicy: volatile-lru}`, `
apiVersion: cache.example.com/v2
kind: ManagedCache
metadata: {name: s}
spec:
  replicas: 5
  engine: {name: valkey, version: "8.0"}
  storage: {size: 1536Mi, storageClassName: fast}
  eviction: {policy: volatile-lru, maxMemory: 1Gi}
  resources: {limits: {memory: 2Gi}}`},
		{"other annotations stay", `
apiVersion: cache.example.com/v1
kind: ManagedCache
metadata:
  name: s
  annotations: {team: a, cache.example.com/v2-spec: '{"engine":{"name":"redis"}}'}
spec: {version: "7.2"}`, `
apiVersion: cache.example.com/v2
kind: ManagedCache
metadata: {name: s, annotations: {team: a}}
spec: {engine: {name: redis, version: "7.2"}}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v1, v2 := obj(t, tc.v1), obj(t, tc.v2)
			up, err := Convert(v1, V2)
			if err != nil || !reflect.DeepEqual(up, v2) {
				t.Errorf("v1 -> v2:\n got %v (err %v)\nwant %v", up, err, v2)
			}
			down, err := Convert(v2, V1)
			if err != nil || !reflect.DeepEqual(down, v1) {
				t.Errorf("v2 -> v1:\n got %v (err %v)\nwant %v", down, err, v1)
			}
		})
	}
}

func TestConvertRejectsUnknownVersions(t *testing.T) {
	if _, err := Convert(map[string]interface{}{"apiVersion": "cache.example.com/v9"}, V1); err == nil {
		t.Fatal("converting from v9 succeeded")
	}
}

func pick[T any](r *rand.Rand, xs ...T) T { return xs[r.Intn(len(xs))] }

// randomV1 returns a random valid v1 object; optional fields are sometimes absent.
func randomV1(r *rand.Rand) map[string]interface{} {
	spec := map[string]interface{}{"version": fmt.Sprintf("%d.%d", r.Intn(10), r.Intn(20))}
	if r.Intn(2) == 0 {
		spec["size"] = int64(1 + r.Intn(9))
	}
	if r.Intn(2) == 0 {
		spec["storageGi"] = int64(1 + r.Intn(2000))
	}
	if r.Intn(2) == 0 {
		spec["evictionPolicy"] = pick(r, "noeviction", "allkeys-lru", "volatile-lru")
	}
	meta := map[string]interface{}{"name": fmt.Sprintf("c%d", r.Intn(1000)), "namespace": "ns", "generation": int64(r.Intn(9) + 1)}
	if r.Intn(2) == 0 {
		meta["annotations"] = map[string]interface{}{"team": pick(r, "a", "b"), "reconcile": fmt.Sprint(r.Intn(100))}
	}
	if r.Intn(3) == 0 {
		meta["labels"] = map[string]interface{}{"env": pick(r, "prod", "dev")}
	}
	o := map[string]interface{}{"apiVersion": V1, "kind": "ManagedCache", "metadata": meta, "spec": spec}
	if r.Intn(2) == 0 {
		o["status"] = randomStatus(r)
	}
	return o
}

func randomStatus(r *rand.Rand) map[string]interface{} {
	return map[string]interface{}{
		"readyReplicas":      int64(r.Intn(10)),
		"observedGeneration": int64(r.Intn(10)),
		"endpoint":           "c.ns.svc.cluster.local:6379",
		"conditions": []interface{}{map[string]interface{}{
			"type": "Ready", "status": pick(r, "True", "False"), "reason": "WaitingForReplicas",
			"message": "1/3 replicas ready", "lastTransitionTime": "2026-11-29T10:00:00Z",
		}},
	}
}

// randomV2 returns a random valid v2 object, with every field v1 cannot express now and then.
func randomV2(r *rand.Rand) map[string]interface{} {
	engine := map[string]interface{}{"version": fmt.Sprintf("%d.%d", r.Intn(10), r.Intn(20))}
	if r.Intn(2) == 0 {
		engine["name"] = pick(r, "redis", "valkey")
	}
	spec := map[string]interface{}{"engine": engine}
	if r.Intn(2) == 0 {
		spec["replicas"] = int64(1 + r.Intn(9))
	}
	if r.Intn(4) > 0 {
		storage := map[string]interface{}{}
		if r.Intn(5) > 0 {
			storage["size"] = pick(r, fmt.Sprintf("%dGi", 1+r.Intn(500)), fmt.Sprintf("%dMi", 1024+r.Intn(100000)),
				"1.5Gi", fmt.Sprintf("%dG", 1+r.Intn(50)), "1Ti", "1073741824")
		}
		if r.Intn(2) == 0 {
			storage["storageClassName"] = pick(r, "standard", "fast-ssd")
		}
		spec["storage"] = storage
	}
	if r.Intn(4) > 0 {
		eviction := map[string]interface{}{}
		if r.Intn(4) > 0 {
			eviction["policy"] = pick(r, "noeviction", "allkeys-lru", "volatile-lru")
		}
		if r.Intn(2) == 0 {
			eviction["maxMemory"] = pick(r, "256Mi", "1Gi", "1500M")
		}
		spec["eviction"] = eviction
	}
	if r.Intn(3) == 0 {
		res := map[string]interface{}{}
		if r.Intn(2) == 0 {
			res["requests"] = map[string]interface{}{"cpu": pick(r, "100m", "1"), "memory": "512Mi"}
		}
		if r.Intn(2) == 0 {
			res["limits"] = map[string]interface{}{"memory": pick(r, "1Gi", "2Gi")}
		}
		spec["resources"] = res
	}
	if r.Intn(3) == 0 {
		spec["hibernate"] = r.Intn(2) == 0
	}
	meta := map[string]interface{}{"name": fmt.Sprintf("c%d", r.Intn(1000)), "namespace": "ns"}
	if r.Intn(2) == 0 {
		meta["annotations"] = map[string]interface{}{"team": pick(r, "a", "b")}
	}
	o := map[string]interface{}{"apiVersion": V2, "kind": "ManagedCache", "metadata": meta, "spec": spec}
	if r.Intn(2) == 0 {
		o["status"] = randomStatus(r)
	}
	return o
}

// roundTrip converts o to the other version and back, through JSON as the webhook does.
func roundTrip(t testing.TB, o map[string]interface{}, via string) map[string]interface{} {
	t.Helper()
	back, _ := o["apiVersion"].(string)
	mid, err := Convert(o, via)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(mid)
	mid, err = decodeObject(b)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Convert(mid, back)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// RoundTripCases is the number of random objects of each version the property test checks.
const roundTripCases = 5000

func TestRoundTripProperty(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for i := 0; i < roundTripCases; i++ {
		v1 := randomV1(r)
		if got := roundTrip(t, v1, V2); !reflect.DeepEqual(got, v1) {
			t.Fatalf("case %d: v1 -> v2 -> v1 changed the object:\n got %v\nwant %v", i, got, v1)
		}
		v2 := randomV2(r)
		if got := roundTrip(t, v2, V1); !reflect.DeepEqual(got, v2) {
			t.Fatalf("case %d: v2 -> v1 -> v2 changed the object:\n got %v\nwant %v", i, got, v2)
		}
	}
}

// An edit made through v1 between two conversions is never undone by the annotation that carries
// what v1 cannot show: v2 -> v1, then a user changes v1 fields, then v1 -> v2 shows the edit, and
// keeps every field v1 cannot express.
func TestV1EditsBetweenConversionsWin(t *testing.T) {
	r := rand.New(rand.NewSource(2))
	edits := []func(spec map[string]interface{}){
		func(s map[string]interface{}) { s["storageGi"] = int64(1 + r.Intn(1000)) },
		func(s map[string]interface{}) { s["size"] = int64(1 + r.Intn(9)) },
		func(s map[string]interface{}) { s["version"] = pick(r, "7.2", "7.2", "8.0") },
		func(s map[string]interface{}) {
			s["evictionPolicy"] = pick(r, "noeviction", "allkeys-lru", "volatile-lru")
		},
	}
	for i := 0; i < roundTripCases; i++ {
		orig := randomV2(r)
		v1, err := ToV1(orig)
		if err != nil {
			t.Fatal(err)
		}
		spec := v1["spec"].(map[string]interface{})
		for n := 1 + r.Intn(3); n > 0; n-- {
			pick(r, edits...)(spec)
		}
		edited := deepCopy(spec)
		v2, err := ToV2(v1)
		if err != nil {
			t.Fatal(err)
		}
		if got := specDown(v2["spec"].(map[string]interface{})); !sameV1Fields(got, edited) {
			t.Fatalf("case %d: the v1 edit was lost:\n original v2 %v\n edited v1   %v\n back in v2  %v", i, orig["spec"], edited, v2["spec"])
		}
		// What v1 cannot express survives.
		for _, path := range [][]string{{"engine", "name"}, {"storage", "storageClassName"}, {"eviction", "maxMemory"}, {"resources"}} {
			want, wantOK := nested(orig["spec"], path)
			got, gotOK := nested(v2["spec"], path)
			if wantOK != gotOK || !reflect.DeepEqual(want, got) {
				t.Fatalf("case %d: %v was %v, now %v", i, path, want, got)
			}
		}
	}
	// The case the review found: a storage size v1 shows rounded up, then grown through v1.
	v1, _ := ToV1(map[string]interface{}{"apiVersion": V2, "kind": "ManagedCache", "metadata": map[string]interface{}{"name": "c"},
		"spec": map[string]interface{}{"engine": map[string]interface{}{"version": "7.2"}, "storage": map[string]interface{}{"size": "10.5Gi"}}})
	v1["spec"].(map[string]interface{})["storageGi"] = int64(20)
	v2, _ := ToV2(v1)
	if got, _ := nested(v2["spec"], []string{"storage", "size"}); got != "20Gi" {
		t.Errorf("storageGi 11 -> 20 through v1 gave storage.size %v, want 20Gi", got)
	}
}

func nested(v interface{}, path []string) (interface{}, bool) {
	for _, k := range path {
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

// FuzzRoundTrip: any JSON object that decodes as a v1 or v2 ManagedCache survives the round trip.
func FuzzRoundTrip(f *testing.F) {
	r := rand.New(rand.NewSource(2))
	for i := 0; i < 20; i++ {
		for _, o := range []map[string]interface{}{randomV1(r), randomV2(r)} {
			b, _ := json.Marshal(o)
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := decodeObject(b)
		if err != nil {
			return
		}
		v, _ := o["apiVersion"].(string)
		meta, _ := o["metadata"].(map[string]interface{})
		ann, _ := meta["annotations"].(map[string]interface{})
		if _, reserved := ann[SpecAnnotation]; reserved || (v != V1 && v != V2) {
			return // the reserved annotation is the converter's own
		}
		via := V1
		if v == V1 {
			via = V2
			if !validV1Spec(o) {
				return
			}
		}
		if got := roundTrip(t, o, via); !reflect.DeepEqual(got, o) {
			t.Fatalf("round trip via %s changed the object:\n got %v\nwant %v", via, got, o)
		}
	})
}

// validV1Spec: the v1 schema prunes unknown spec fields and types storageGi as an integer.
func validV1Spec(o map[string]interface{}) bool {
	spec, ok := o["spec"].(map[string]interface{})
	if !ok {
		return o["spec"] == nil
	}
	for k, v := range spec {
		switch k {
		case "size", "storageGi":
			if _, ok := v.(int64); !ok {
				return false
			}
		case "version", "evictionPolicy":
			if _, ok := v.(string); !ok {
				return false
			}
		default:
			return false
		}
	}
	return true
}

func TestWebhookHandler(t *testing.T) {
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	req := `{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"u1","desiredAPIVersion":"cache.example.com/v2",
"objects":[{"apiVersion":"cache.example.com/v1","kind":"ManagedCache","metadata":{"name":"a"},"spec":{"size":3,"version":"7.2"}}]}}`
	resp, err := http.Post(srv.URL, "application/json", strings.NewReader(req))
	if err != nil {
		t.Fatal(err)
	}
	var out review
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if out.Kind != "ConversionReview" || out.Response == nil || out.Response.UID != "u1" || out.Response.Result.Status != "Success" || len(out.Response.ConvertedObjects) != 1 {
		t.Fatalf("response %+v", out)
	}
	if got := string(out.Response.ConvertedObjects[0].Raw); !strings.Contains(got, `"replicas":3`) || !strings.Contains(got, `"apiVersion":"cache.example.com/v2"`) {
		t.Errorf("converted %s", got)
	}
	bad := strings.Replace(req, `cache.example.com/v2"`, `cache.example.com/v7"`, 1)
	resp, err = http.Post(srv.URL, "application/json", bytes.NewReader([]byte(bad)))
	if err != nil {
		t.Fatal(err)
	}
	out = review{}
	_ = json.NewDecoder(resp.Body).Decode(&out)
	if out.Response == nil || out.Response.Result.Status != "Failure" || !strings.Contains(out.Response.Result.Message, "cannot convert") {
		t.Errorf("conversion to an unknown version: %+v", out.Response)
	}
}

// restoreByCopy is restore as it was: each value judged on a copy of the whole spec with it set
// (quadratic in the annotation's size). restore must agree with it on every input.
func restoreByCopy(up, v1, extra map[string]interface{}) {
	for _, leaf := range leaves(nil, extra) {
		candidate := deepCopy(up)
		setPath(candidate, leaf.path, deepCopyValue(leaf.value))
		if sameV1Fields(specDown(candidate), v1) {
			setPath(up, leaf.path, deepCopyValue(leaf.value))
		}
	}
}

// restore gives what judging each value on a whole copy gave, on 5,000 random specs and
// annotations that agree, disagree, and put maps where values were and values where maps were,
// on the fields v1 maps and beside them.
func TestRestoreAgreesWithTheWholeCopy(t *testing.T) {
	rng := rand.New(rand.NewSource(37))
	values := []interface{}{int64(1), int64(3), "7.2", "8.0", "1Gi", "20Gi", "allkeys-lru", "noeviction", map[string]interface{}{}, true}
	keys := []string{"replicas", "engine", "version", "name", "storage", "size", "eviction", "policy", "tls", "x"}
	var random func(depth int) map[string]interface{}
	random = func(depth int) map[string]interface{} {
		m := map[string]interface{}{}
		for range rng.Intn(4) {
			k := keys[rng.Intn(len(keys))]
			if depth < 2 && rng.Intn(2) == 0 {
				m[k] = random(depth + 1)
			} else {
				m[k] = values[rng.Intn(len(values))]
			}
		}
		return m
	}
	for i := range 5000 {
		v1 := map[string]interface{}{}
		for _, f := range v1Fields {
			if rng.Intn(2) == 0 {
				v1[f] = values[rng.Intn(len(values))]
			}
		}
		up := specUp(v1)
		for k, v := range random(0) {
			if rng.Intn(4) > 0 || up[k] == nil { // mostly beside v1's fields, sometimes over them
				up[k] = v
			}
		}
		if rng.Intn(8) == 0 {
			up["replicas"] = values[rng.Intn(len(values))] // a spec that disagrees with v1
		}
		extra := random(0)
		want, got := deepCopy(up), deepCopy(up)
		restoreByCopy(want, v1, extra)
		restore(got, v1, extra)
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("case %d: v1 %v, spec %v, annotation %v:\nby copy %v\nrestore %v", i, v1, up, extra, want, got)
		}
	}
}

// The cost of converting a v1 object grows with its annotation's size, not its square: 10 and 100
// times the leaves, and the same judged on whole copies as before (go test -bench Restore
// ./engine/conversion; BENCHMARKS.md keeps the ratios).
func BenchmarkRestore(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		extra := map[string]interface{}{}
		for i := range n {
			extra[fmt.Sprintf("k%d", i)] = map[string]interface{}{"v": int64(i)}
		}
		v1 := map[string]interface{}{"size": int64(3), "version": "7.2"}
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for b.Loop() {
				restore(specUp(v1), v1, extra)
			}
		})
		if n > 1000 {
			continue // by copy, 10,000 leaves took 65 s a conversion
		}
		b.Run(fmt.Sprintf("by-copy/%d", n), func(b *testing.B) {
			for b.Loop() {
				restoreByCopy(specUp(v1), v1, extra)
			}
		})
	}
}
