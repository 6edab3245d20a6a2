package hack

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// hack/e2e.sh gives track b the operator tests it names (-run) and track a the rest (-skip). A
// name that no test has any more would leave track b that test's share of nothing and track a
// all of it, silently: every name must be a test of e2e/operator.
func TestE2ETracksNameExistingTests(t *testing.T) {
	script, err := os.ReadFile("e2e.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^slow='([^']+)'$`).FindSubmatch(script)
	if m == nil {
		t.Fatal("e2e.sh has no line slow='TestA|TestB|...'")
	}
	files, err := filepath.Glob("../e2e/operator/*_test.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no test files in e2e/operator (%v)", err)
	}
	var all strings.Builder
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		all.Write(b)
	}
	names := strings.Split(string(m[1]), "|")
	if len(names) < 2 {
		t.Errorf("track b takes %d operator tests (%q); the tracks are balanced with several", len(names), m[1])
	}
	for _, name := range names {
		if !regexp.MustCompile(`(?m)^func ` + regexp.QuoteMeta(name) + `\(t \*testing\.T\) \{`).MatchString(all.String()) {
			t.Errorf("e2e.sh names %s for track b, but e2e/operator has no such test", name)
		}
	}
}
