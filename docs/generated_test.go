package docs

import (
	"flag"
	"fmt"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/metrics"
	"example.com/cache-operator/engine/support"
)

var update = flag.Bool("update", false, "rewrite the generated blocks of the pages (go test ./docs -update)")

// generated maps a block's name to what code generates for it. A page holds a block as
//
//	<!-- generated:NAME -->
//	...
//	<!-- /generated:NAME -->
//
// and TestGeneratedBlocks compares the text between the markers with the generator's.
var generated = map[string]func() string{
	"support-matrix":            support.MarkdownTable,
	"packages":                  packageMap,
	"conditions":                conditionsTable,
	"backup-reasons":            backupReasonsTable,
	"events":                    eventsTable,
	"managedcache-v2-fields":    fieldTable("cache.example.com_managedcaches.yaml", "v2"),
	"managedcache-v1-fields":    fieldTable("cache.example.com_managedcaches.yaml", "v1"),
	"managedcachebackup-fields": fieldTable("cache.example.com_managedcachebackups.yaml", "v2"),
}

var block = regexp.MustCompile(`(?s)<!-- generated:([a-z0-9-]+) -->\n(.*?)<!-- /generated:([a-z0-9-]+) -->`)

// TestGeneratedBlocks: every generated block equals its generator's output, every generator has
// its block on some page, and -update rewrites them.
func TestGeneratedBlocks(t *testing.T) {
	found := map[string]string{}
	for _, page := range pages(t) {
		text := read(t, page)
		changed := false
		text = block.ReplaceAllStringFunc(text, func(b string) string {
			m := block.FindStringSubmatch(b)
			name := m[1]
			if m[3] != name {
				t.Errorf("%s: block %q ends with the marker of %q", page, name, m[3])
				return b
			}
			gen, ok := generated[name]
			if !ok {
				t.Errorf("%s: block %q has no generator in docs/generated_test.go", page, name)
				return b
			}
			if prev, dup := found[name]; dup {
				t.Errorf("block %q is on %s and %s: every fact once", name, prev, page)
			}
			found[name] = page
			want := gen()
			if m[2] == want {
				return b
			}
			if *update {
				changed = true
				return "<!-- generated:" + name + " -->\n" + want + "<!-- /generated:" + name + " -->"
			}
			t.Errorf("%s: block %q differs from what the code generates (go test ./docs -update rewrites it):\n%s\nwant\n%s", page, name, m[2], want)
			return b
		})
		if changed {
			if err := os.WriteFile(filepath.Join("..", page), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("rewrote the generated blocks of %s", page)
		}
	}
	for name := range generated {
		if _, ok := found[name]; !ok {
			t.Errorf("no page holds the generated block %q", name)
		}
	}
}

// TestMetricsDocumented: the monitoring page's tables name every metric family the operator
// exports (engine/metrics.Names) and no other, client-go's and the runtime's apart.
func TestMetricsDocumented(t *testing.T) {
	var documented []string
	name := regexp.MustCompile("`((?:cache_operator|workqueue|rest_client)_[a-z0-9_]+)")
	for _, line := range prose(read(t, "docs/monitoring.md")) {
		if !strings.HasPrefix(line, "|") {
			continue
		}
		for _, m := range name.FindAllStringSubmatch(line, -1) {
			documented = append(documented, m[1])
		}
	}
	var exported []string
	for _, n := range metrics.Names() {
		if !strings.HasPrefix(n, "go_") && !strings.HasPrefix(n, "process_") {
			exported = append(exported, n) // the runtime's: documented as go_*, process_*
		}
	}
	for _, n := range exported {
		if !slices.Contains(documented, n) {
			t.Errorf("docs/monitoring.md does not document the exported metric %s", n)
		}
	}
	for _, n := range documented {
		if !slices.Contains(exported, n) {
			t.Errorf("docs/monitoring.md documents %s, which the operator does not export", n)
		}
	}
	t.Logf("%d metric families documented", len(exported))
}

// packageMap is the table of every Go package of the repository (the operator's module and the
// local cluster's modules under localcluster/, helm's under hack/), each with the first sentence of its package comment: the
// map a newcomer reads in docs/architecture.md.
func packageMap() string {
	var rows []string
	root := ".."
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != root && (strings.HasPrefix(name, ".") || name == "bin" || name == "testdata" || name == "node_modules") {
			return filepath.SkipDir
		}
		fset := token.NewFileSet()
		files, err := filepath.Glob(filepath.Join(path, "*.go"))
		if err != nil {
			return err
		}
		synopsis, found := "", false
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			found = true
			file, err := parser.ParseFile(fset, f, nil, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				return err
			}
			if file.Doc != nil {
				synopsis = new(doc.Package).Synopsis(file.Doc.Text())
				break
			}
		}
		if !found {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		if rel == "." {
			rel = "main.go"
		} else {
			rel += "/"
		}
		if synopsis == "" {
			synopsis = "(no package comment)"
		}
		rows = append(rows, fmt.Sprintf("| `%s` | %s |", rel, strings.ReplaceAll(synopsis, "|", `\|`)))
		return nil
	})
	if err != nil {
		return "error: " + err.Error() + "\n"
	}
	return "| package | what it is |\n|---|---|\n" + strings.Join(rows, "\n") + "\n"
}

// conditionsTable is the table of every condition and its reasons (engine/api.Conditions).
func conditionsTable() string {
	var b strings.Builder
	b.WriteString("| condition | what it says | reason | status | meaning |\n|---|---|---|---|---|\n")
	for _, c := range api.Conditions {
		for i, r := range c.Reasons {
			typ, meaning := "", ""
			if i == 0 {
				typ, meaning = "`"+c.Type+"`", c.Meaning
			}
			fmt.Fprintf(&b, "| %s | %s | `%s` | %s | %s |\n", typ, meaning, r.Reason, r.Status, r.Meaning)
		}
	}
	return b.String()
}

// backupReasonsTable is the table of a ManagedCacheBackup's reasons (engine/api.BackupReasons).
func backupReasonsTable() string {
	var b strings.Builder
	b.WriteString("| reason | phase | meaning |\n|---|---|---|\n")
	for _, r := range api.BackupReasons {
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", r.Reason, r.Status, r.Meaning)
	}
	return b.String()
}

// eventsTable is the table of the Events the operator emits (engine/api.Events).
func eventsTable() string {
	var b strings.Builder
	b.WriteString("| reason | type | meaning |\n|---|---|---|\n")
	for _, e := range api.Events {
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", e.Reason, e.Type, e.Meaning)
	}
	return b.String()
}
