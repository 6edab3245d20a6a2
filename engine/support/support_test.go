package support

import (
	"os"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestChangeRefusal(t *testing.T) {
	for _, tc := range []struct {
		fromE, fromV, toE, toV string
		want                   string // "" allowed; else a substring of the reason
	}{
		{"redis", "7.0", "redis", "8.0", ""},
		{"redis", "7.0", "redis", "7.2", ""},
		{"redis", "7.2", "redis", "7.0", "formats up to 10 and the data is in format 11"},
		{"redis", "8.0", "redis", "7.2", "formats up to 11 and the data is in format 12"},
		{"redis", "7.0", "valkey", "8.1", ""},
		{"redis", "7.2", "valkey", "8.0", ""},
		{"redis", "8.0", "valkey", "8.1", "up to redis 7.2's snapshot format (11)"},
		{"valkey", "8.1", "redis", "8.0", "redis cannot load data written by valkey"},
		{"valkey", "8.1", "valkey", "8.0", ""},
		{"valkey", "8.0", "valkey", "8.1", ""},
		{"redis", "7.4", "redis", "8.0", ""},                    // before the matrix: major versions
		{"redis", "9.1", "redis", "8.0", "newer major version"}, // before the matrix
		{"redis", "7.0.15", "redis", "7.0", ""},                 // a server's full version
		{"redis", "8.0.2", "redis", "7.0", "format 12"},
	} {
		got := ChangeRefusal(tc.fromE, tc.fromV, tc.toE, tc.toV)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s %s -> %s %s: %q, want %q", tc.fromE, tc.fromV, tc.toE, tc.toV, got, tc.want)
		}
	}
}

func TestUnsupported(t *testing.T) {
	for _, ok := range [][2]string{{"redis", "7.0"}, {"redis", "8.0"}, {"valkey", "8.1"}} {
		if err := Unsupported(ok[0], ok[1]); err != nil {
			t.Errorf("%v: %v", ok, err)
		}
	}
	for _, bad := range [][2]string{{"redis", "6.2"}, {"redis", "7.4"}, {"valkey", "7.2"}, {"redis", "8.0.2"}, {"keydb", "6.3"}} {
		err := Unsupported(bad[0], bad[1])
		if err == nil || !strings.Contains(err.Error(), "supported: redis 7.0, 7.2, 8.0; valkey 8.0, 8.1") {
			t.Errorf("%v: %v", bad, err)
		}
	}
}

// The CRD's rule on spec.engine (v2) and v1's enum are what this package generates.
func TestCRDIsTheMatrix(t *testing.T) {
	data, err := os.ReadFile("../../crd/cache.example.com_managedcaches.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Name   string
				Schema struct {
					OpenAPIV3Schema struct {
						Properties map[string]struct {
							Properties map[string]struct {
								Enum                   []string
								XKubernetesValidations []struct{ Rule, Message string } `json:"x-kubernetes-validations"`
							}
						}
					} `json:"openAPIV3Schema"`
				}
			}
		}
	}
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatal(err)
	}
	var all []string
	for _, r := range Releases {
		if !slices.Contains(all, r.Version) {
			all = append(all, r.Version)
		}
	}
	slices.Sort(all)
	seen := 0
	for _, v := range crd.Spec.Versions {
		spec := v.Schema.OpenAPIV3Schema.Properties["spec"].Properties
		switch v.Name {
		case "v2":
			rules := spec["engine"].XKubernetesValidations
			if len(rules) != 1 || rules[0].Rule != CELRule() || rules[0].Message != CELMessage() {
				t.Errorf("v2 spec.engine's rule is\n%+v\nwant\n  rule: %q\n  message: %q", rules, CELRule(), CELMessage())
			}
			seen++
		case "v1":
			if got := spec["version"].Enum; !slices.Equal(got, all) {
				t.Errorf("v1 spec.version's enum is %v, want %v", got, all)
			}
			seen++
		}
	}
	if seen != 2 {
		t.Errorf("found %d of the CRD's two versions", seen)
	}
}

func TestClusterRefusal(t *testing.T) {
	for _, r := range Releases {
		if got := ClusterRefusal(r.Engine, r.Version); got != "" {
			t.Errorf("%s %s: %q; every release in the matrix runs in cluster mode", r.Engine, r.Version, got)
		}
	}
	saved := Releases
	defer func() { Releases = saved }()
	Releases = []Release{{Engine: "redis", Version: "7.0", Repository: "redis", RDB: 10}}
	if got, want := ClusterRefusal("redis", "7.0.15"), "redis 7.0 cannot run in cluster mode (a sharded cache)"; got != want {
		t.Errorf("a release without cluster mode: %q; want %q", got, want)
	}
	if got := ClusterRefusal("redis", "6.2"); got != "" {
		t.Errorf("a pair outside the matrix: %q; want \"\" (Unsupported's to refuse)", got)
	}
}
