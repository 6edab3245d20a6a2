package ssa

import (
	"os"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

func mustDecode(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	o := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc), &o.Object); err != nil {
		t.Fatal(err)
	}
	return o
}

const desiredSTS = `
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: c, namespace: ns, labels: {a: "1"}}
spec:
  replicas: 3
  template:
    spec:
      containers:
      - name: redis
        image: redis:7.4
        ports: [{containerPort: 6379, protocol: TCP}]
        resources: {requests: {memory: 1Gi}}
        command: [sh, -c, run]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec: {resources: {requests: {storage: 10Gi}}}
`

func TestDrift(t *testing.T) {
	cases := []struct {
		name string
		live string
		want []string // substrings of the drift, in order; empty: no drift
	}{
		{"identical plus server defaults and other managers' fields", `
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: c, namespace: ns, resourceVersion: "7", labels: {a: "1", other: x}, annotations: {added-by: someone}}
spec:
  replicas: 3
  revisionHistoryLimit: 10
  template:
    spec:
      containers:
      - name: istio-proxy
        image: proxy
      - name: redis
        image: redis:7.4
        terminationMessagePath: /dev/termination-log
        ports: [{containerPort: 6379, protocol: TCP}]
        resources: {requests: {memory: 1024Mi}}
        command: [sh, -c, run]
  volumeClaimTemplates:
  - apiVersion: v1
    kind: PersistentVolumeClaim
    metadata: {name: data}
    spec: {volumeMode: Filesystem, resources: {requests: {storage: 10Gi}}}
    status: {phase: Pending}
status: {replicas: 3}
`, nil},
		{"a field we set changed", `
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: c, namespace: ns, labels: {a: "2"}}
spec:
  replicas: 5
  template:
    spec:
      containers:
      - name: redis
        image: redis:7.4
        ports: [{containerPort: 6379, protocol: TCP}]
        resources: {requests: {memory: 2Gi}}
        command: [sh, -c, run, extra]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec: {resources: {requests: {storage: 10Gi}}}
`, []string{".metadata.labels.a: differs", ".spec.replicas: differs",
			".spec.template.spec.containers[name=redis].command: 4 items, want 3",
			".spec.template.spec.containers[name=redis].resources.requests.memory: differs"}},
		{"a keyed element and a whole field missing", `
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: c, namespace: ns, labels: {a: "1"}}
spec:
  template:
    spec:
      containers:
      - name: other
        image: redis:7.4
  volumeClaimTemplates:
  - metadata: {name: data}
    spec: {resources: {requests: {storage: 10Gi}}}
`, []string{".spec.replicas: missing", ".spec.template.spec.containers[name=redis]: missing"}},
	}
	d := NewDiffer()
	desired := mustDecode(t, desiredSTS)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := d.Drift(desired, mustDecode(t, tc.live), "cache-operator")
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("drift %q, want %d entries like %q", got, len(tc.want), tc.want)
			}
			for i := range got {
				if !strings.Contains(got[i], tc.want[i]) {
					t.Errorf("drift[%d] = %q, want %q", i, got[i], tc.want[i])
				}
			}
		})
	}
}

// A field the operator applied before but no longer renders is drift, so that the next apply
// removes it; the same field owned by another manager is not.
func TestDriftFieldRemovedFromTemplate(t *testing.T) {
	d := NewDiffer()
	desired := mustDecode(t, `
apiVersion: v1
kind: Service
metadata: {name: c, namespace: ns}
spec: {ports: [{port: 6379, protocol: TCP}]}
`)
	live := mustDecode(t, `
apiVersion: v1
kind: Service
metadata: {name: c, namespace: ns}
spec: {publishNotReadyAddresses: true, ports: [{port: 6379, protocol: TCP}]}
`)
	fields := `{"f:spec":{"f:publishNotReadyAddresses":{},"f:ports":{"k:{\"port\":6379,\"protocol\":\"TCP\"}":{".":{},"f:port":{},"f:protocol":{}}}}}`
	for _, tc := range []struct {
		manager string
		want    int
	}{{"cache-operator", 1}, {"kubectl", 0}} {
		live.SetManagedFields([]metav1.ManagedFieldsEntry{{
			Manager: tc.manager, Operation: metav1.ManagedFieldsOperationApply, FieldsType: "FieldsV1",
			FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)},
		}})
		got, err := d.Drift(desired, live, "cache-operator")
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != tc.want || (tc.want == 1 && !strings.Contains(got[0], ".spec.publishNotReadyAddresses: no longer set")) {
			t.Errorf("owned by %s: drift %q, want %d removal", tc.manager, got, tc.want)
		}
	}
}

// Strings compare by the field's schema type: quantities by value, every other string exactly.
// Before, any two strings that parsed as quantities compared equal ("7.4" = "7.40").
func TestDriftComparesByFieldType(t *testing.T) {
	sts := func(image, env, memory, storage string) *unstructured.Unstructured {
		return mustDecode(t, `
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: c, namespace: ns}
spec:
  template:
    spec:
      containers:
      - name: redis
        image: "`+image+`"
        env: [{name: VERSION, value: "`+env+`"}]
        resources: {limits: {memory: "`+memory+`"}}
  volumeClaimTemplates:
  - metadata: {name: data}
    spec: {resources: {requests: {storage: "`+storage+`"}}}
`)
	}
	d := NewDiffer()
	want := sts("7.4", "7.4", "1Gi", "10Gi")
	for _, tc := range []struct {
		name  string
		live  *unstructured.Unstructured
		drift string // "" for none
	}{
		{"quantities by value", sts("7.4", "7.4", "1024Mi", "10240Mi"), ""},
		{"image is a string", sts("7.40", "7.4", "1Gi", "10Gi"), ".spec.template.spec.containers[name=redis].image: differs"},
		{"env value is a string", sts("7.4", "7.40", "1Gi", "10Gi"), ".spec.template.spec.containers[name=redis].env[name=VERSION].value: differs"},
		{"a quantity that changed", sts("7.4", "7.4", "2Gi", "10Gi"), ".spec.template.spec.containers[name=redis].resources.limits.memory: differs"},
	} {
		got, err := d.Drift(want, tc.live, "m")
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if tc.drift == "" && len(got) != 0 || tc.drift != "" && (len(got) != 1 || got[0] != tc.drift) {
			t.Errorf("%s: drift %q, want %q", tc.name, got, tc.drift)
		}
	}
	// A kind without a schema has no quantity fields: "1Gi" and "1024Mi" differ there.
	cr := func(v string) *unstructured.Unstructured {
		return mustDecode(t, "apiVersion: example.com/v1\nkind: Thing\nmetadata: {name: t, namespace: ns}\nspec: {size: \""+v+"\"}\n")
	}
	if got, err := d.Drift(cr("1Gi"), cr("1024Mi"), "m"); err != nil || len(got) != 1 {
		t.Errorf("custom kind: drift %q, err %v; want .spec.size", got, err)
	}
}

// A Secret created with a plain create is owned through an "Update" entry that also lists the
// maps it filled ("."); that is not drift. A key of that entry we no longer render is.
func TestDriftAfterCreate(t *testing.T) {
	d := NewDiffer()
	desired := mustDecode(t, `
apiVersion: v1
kind: Secret
metadata: {name: s, namespace: ns, labels: {a: "1"}}
data: {password: cA==}
`)
	live := mustDecode(t, `
apiVersion: v1
kind: Secret
metadata: {name: s, namespace: ns, labels: {a: "1"}}
data: {password: cA==, old: cA==}
`)
	entry := func(fields string) []metav1.ManagedFieldsEntry {
		return []metav1.ManagedFieldsEntry{{Manager: "cache-operator", Operation: metav1.ManagedFieldsOperationUpdate,
			FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}}}
	}
	live.SetManagedFields(entry(`{"f:data":{".":{},"f:password":{}},"f:metadata":{"f:labels":{".":{},"f:a":{}}}}`))
	if got, err := d.Drift(desired, live, "cache-operator"); err != nil || len(got) != 0 {
		t.Errorf("fresh create: drift %q, err %v; want none", got, err)
	}
	live.SetManagedFields(entry(`{"f:data":{".":{},"f:password":{},"f:old":{}},"f:metadata":{"f:labels":{".":{},"f:a":{}}}}`))
	if got, err := d.Drift(desired, live, "cache-operator"); err != nil || len(got) != 1 || got[0] != ".data.old: no longer set" {
		t.Errorf("dropped key: drift %q, err %v; want .data.old removed", got, err)
	}
}

// BenchmarkDriftUnchanged is the drift check of a cache that is already right: each rendered child
// of a golden file compared with a live copy. Compare its ns/op with render's
// BenchmarkRenderChildren as a ratio from one run
// (`go test ./engine/... -run xxx -bench . -count 5`).
func BenchmarkDriftUnchanged(b *testing.B) {
	raw, err := os.ReadFile("../render/testdata/size-3-allkeys-lru.golden.yaml")
	if err != nil {
		b.Fatal(err)
	}
	var objs, live []*unstructured.Unstructured
	for _, doc := range strings.Split(string(raw), "\n---\n")[1:] {
		o := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &o.Object); err != nil {
			b.Fatal(err)
		}
		objs, live = append(objs, o), append(live, o.DeepCopy())
	}
	d := NewDiffer()
	b.ReportAllocs()
	for b.Loop() {
		for i, o := range objs {
			if drift, err := d.Drift(o, live[i], "cache-operator"); err != nil || len(drift) > 0 {
				b.Fatalf("drift %v, err %v", drift, err)
			}
		}
	}
}

// A plain create records the fields the API server filled in (a Service's type, its session
// affinity) in the creator's Update entry. Once learned from a create, they are not drift at the
// value the server gives them; a field a template dropped still is, and so is a learned field
// that holds another value (a template once set it).
func TestDriftIgnoresLearnedServerDefaults(t *testing.T) {
	d := NewDiffer()
	want := func(name string) *unstructured.Unstructured {
		return mustDecode(t, "apiVersion: v1\nkind: Service\nmetadata: {name: "+name+", namespace: ns}\nspec: {ports: [{name: redis, port: 6379, protocol: TCP}]}\n")
	}
	created := func(name, affinity string, extra string) *unstructured.Unstructured {
		live := mustDecode(t, "apiVersion: v1\nkind: Service\nmetadata: {name: "+name+", namespace: ns}\n"+
			"spec: {type: ClusterIP, sessionAffinity: "+affinity+extra+", ports: [{name: redis, port: 6379, protocol: TCP, targetPort: 6379}]}\n")
		fields := `{"f:spec":{"f:type":{},"f:sessionAffinity":{},` + map[bool]string{true: `"f:publishNotReadyAddresses":{},`, false: ""}[extra != ""] +
			`"f:ports":{".":{},"k:{\"port\":6379,\"protocol\":\"TCP\"}":{".":{},"f:name":{},"f:port":{},"f:protocol":{},"f:targetPort":{}}}}}`
		live.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "cache-operator", Operation: metav1.ManagedFieldsOperationUpdate,
			FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}}})
		return live
	}
	if got, _ := d.Drift(want("a"), created("a", "None", ""), "cache-operator"); len(got) != 3 {
		t.Fatalf("before learning: drift %q, want the three fields the server filled in", got)
	}
	epoch := d.DefaultsEpoch()
	if err := d.LearnDefaults(want("a"), created("a", "None", ""), "cache-operator"); err != nil {
		t.Fatal(err)
	}
	// The epoch moves when something is learned, and only then: a verdict holds within one.
	learned := d.DefaultsEpoch()
	if learned == epoch {
		t.Error("learning three defaults left the epoch as it was")
	}
	if err := d.LearnDefaults(want("c"), created("c", "None", ""), "cache-operator"); err != nil || d.DefaultsEpoch() != learned {
		t.Errorf("learning the same defaults again moved the epoch (%v)", err)
	}
	for _, tc := range []struct {
		name string
		live *unstructured.Unstructured
		want string
	}{
		{"another object of the kind, as created", created("b", "None", ""), ""},
		{"a field the template dropped", created("b", "None", ", publishNotReadyAddresses: true"), ".spec.publishNotReadyAddresses: no longer set"},
		{"a defaulted field at another value", created("b", "ClientIP", ""), ".spec.sessionAffinity: no longer set"},
	} {
		got, err := d.Drift(want("b"), tc.live, "cache-operator")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(got, "; ") != tc.want {
			t.Errorf("%s: drift %q, want %q", tc.name, got, tc.want)
		}
	}
}
