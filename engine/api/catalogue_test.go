package api

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// constants returns the string constants of a file of this package whose names start with one
// of the prefixes, by name.
func constants(t *testing.T, file string, prefixes ...string) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, n := range vs.Names {
				for _, p := range prefixes {
					if strings.HasPrefix(n.Name, p) {
						lit := vs.Values[i].(*ast.BasicLit)
						out[n.Name] = strings.Trim(lit.Value, `"`)
					}
				}
			}
		}
	}
	return out
}

// TestCatalogueComplete: every condition type, reason and Event reason declared in this package
// is explained in Conditions, BackupReasons or Events, so that the API page (generated from them)
// lists them all; and each condition type is in Conditions.
func TestCatalogueComplete(t *testing.T) {
	explained := map[string]bool{}
	types := map[string]bool{}
	for _, c := range Conditions {
		types[c.Type] = true
		if c.Meaning == "" {
			t.Errorf("condition %s has no meaning", c.Type)
		}
		for _, r := range c.Reasons {
			explained[r.Reason] = true
			if r.Meaning == "" || r.Status == "" {
				t.Errorf("reason %s of %s lacks its status or meaning", r.Reason, c.Type)
			}
		}
	}
	for _, r := range BackupReasons {
		explained[r.Reason] = true
	}
	for _, e := range Events {
		explained[e.Reason] = true
		if e.Type != "Normal" && e.Type != "Warning" {
			t.Errorf("Event %s has type %q", e.Reason, e.Type)
		}
	}
	for name, value := range constants(t, "conditions.go", "Condition") {
		if !types[value] {
			t.Errorf("condition %s (%q) is not in Conditions", name, value)
		}
	}
	for _, file := range []string{"conditions.go", "events.go"} {
		for name, value := range constants(t, file, "Reason", "Event") {
			if !explained[value] {
				t.Errorf("%s (%q, %s) is not explained in Conditions, BackupReasons or Events", name, value, file)
			}
		}
	}
}

// TestNoLiteralReasons: the engine's packages emit Events and set reasons through this package's
// constants only, never a string literal, so that the catalogue is the whole list.
func TestNoLiteralReasons(t *testing.T) {
	literal := regexp.MustCompile(`(Eventf?\([^,]+, *corev1\.EventType\w+, *"|Reason: *")`)
	files, err := filepath.Glob("../*/*.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for i, line := range strings.Split(string(data), "\n") {
			if literal.MatchString(line) {
				t.Errorf("%s:%d: a literal reason: %s", f, i+1, strings.TrimSpace(line))
			}
		}
	}
	if checked < 50 {
		t.Errorf("only %d files read", checked)
	}
}
