package main

import (
	"bytes"
	"flag"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/ (review the diff before committing)")

// `cache-operator render -f` prints the children of every cache in the file, as the operator
// would create them; the output is compared with a golden file (`go test . -update` rewrites it).
func TestRenderCommand(t *testing.T) {
	const in, golden = "testdata/render-command/caches.yaml", "testdata/render-command/caches.golden.yaml"
	var out, errOut bytes.Buffer
	if code := renderCommand([]string{"-f", in}, nil, &out, &errOut); code != 0 {
		t.Fatalf("exit code %d: %s", code, errOut.String())
	}
	got := out.String()
	if *update {
		if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run `go test . -update` to create it)", err)
	}
	if got != string(want) {
		t.Errorf("render output differs from %s (run `go test . -update` and review the diff):\n%s", golden, got)
	}
	if strings.Count(got, "\nkind: StatefulSet\n") != 2 || !strings.Contains(got, "# Children of ManagedCache default/sessions") {
		t.Errorf("want the children of both caches, sessions in namespace default")
	}

	// Standard input, and errors that name what is wrong.
	for _, tc := range []struct {
		name, input string
		args        []string
		code        int
		stderr      string
	}{
		{"stdin", "apiVersion: cache.example.com/v1\nkind: ManagedCache\nmetadata: {name: a}\nspec: {version: \"7.2\"}\n", []string{"-f", "-"}, 0, ""},
		{"invalid spec", "apiVersion: cache.example.com/v2\nkind: ManagedCache\nmetadata: {name: a}\nspec: {replicas: 12, engine: {version: \"7.2\"}}\n", []string{"-f", "-"}, 1, "spec.replicas: must be between 1 and 9"},
		{"not a cache", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n", []string{"-f", "-"}, 1, "document 1: a ConfigMap, not a ManagedCache"},
		{"empty", "# nothing\n", []string{"-f", "-"}, 1, "no ManagedCache in the input"},
		{"no file", "", nil, 2, "usage: cache-operator render -f FILE"},
		{"missing file", "", []string{"-f", "testdata/render-command/absent.yaml"}, 1, "no such file"},
	} {
		var out, errOut bytes.Buffer
		code := renderCommand(tc.args, strings.NewReader(tc.input), &out, &errOut)
		if code != tc.code || !strings.Contains(errOut.String(), tc.stderr) {
			t.Errorf("%s: exit %d, stderr %q; want exit %d and %q", tc.name, code, errOut.String(), tc.code, tc.stderr)
		}
		if tc.code == 0 && !strings.Contains(out.String(), "kind: StatefulSet") {
			t.Errorf("%s: no StatefulSet in the output:\n%s", tc.name, out.String())
		}
	}
}
