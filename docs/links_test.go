// Package docs tests the project's pages (README.md, BENCHMARKS.md and docs/*.md): every relative
// link and anchor resolves, the README stays a short front page that links every page, and the
// tables that code can generate equal what it generates (generated_test.go).
package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// pages returns every page the link test reads, as paths relative to the repository's root.
func pages(t *testing.T) []string {
	t.Helper()
	out := []string{"README.md", "BENCHMARKS.md"}
	md, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range md {
		out = append(out, filepath.Join("docs", p))
	}
	return out
}

func read(t *testing.T, rel string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

var (
	heading = regexp.MustCompile(`^(#{1,6}) +(.*?) *$`)
	link    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// What GitHub drops from a heading when it makes its anchor.
	notInAnchor = regexp.MustCompile(`[^\p{L}\p{N}\- _]`)
)

// anchors returns the anchors GitHub gives a page's headings: lower case, punctuation dropped,
// spaces as hyphens, and -1, -2, ... after repeats.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, line := range prose(text) {
		m := heading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		a := strings.ReplaceAll(notInAnchor.ReplaceAllString(strings.ToLower(m[2]), ""), " ", "-")
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// prose returns a page's lines outside fenced code blocks.
func prose(text string) []string {
	var out []string
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out = append(out, line)
		}
	}
	return out
}

// TestLinks: every relative link of every page names a file or folder that exists, and every
// anchor one of the target page's headings.
func TestLinks(t *testing.T) {
	checked := 0
	for _, page := range pages(t) {
		for n, line := range prose(read(t, page)) {
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, anchor, _ := strings.Cut(target, "#")
				dest := page
				if path != "" {
					dest = filepath.Join(filepath.Dir(page), path)
					if _, err := os.Stat(filepath.Join("..", dest)); err != nil {
						t.Errorf("%s (prose line %d): link %q: no %s", page, n+1, target, dest)
						continue
					}
				}
				checked++
				if anchor == "" {
					continue
				}
				if !strings.HasSuffix(dest, ".md") {
					t.Errorf("%s: link %q: an anchor into %s, which is not a page", page, target, dest)
					continue
				}
				if !anchors(read(t, dest))[anchor] {
					t.Errorf("%s (prose line %d): link %q: %s has no heading with anchor #%s", page, n+1, target, dest, anchor)
				}
			}
		}
	}
	if checked < 50 {
		t.Errorf("only %d relative links checked: the pattern misses links", checked)
	}
	t.Logf("%d relative links resolve", checked)
}

// TestREADME: the README is a front page (at most 250 lines) that links every page of docs/.
func TestREADME(t *testing.T) {
	text := read(t, "README.md")
	if n := strings.Count(text, "\n"); n > 250 {
		t.Errorf("README.md has %d lines; it is the front page (at most 250): move the rest to docs/", n)
	}
	var linked []string
	for _, m := range link.FindAllStringSubmatch(text, -1) {
		path, _, _ := strings.Cut(m[1], "#")
		linked = append(linked, filepath.Clean(path))
	}
	for _, page := range pages(t)[2:] {
		if !slices.Contains(linked, page) {
			t.Errorf("README.md does not link %s", page)
		}
	}
	if !slices.Contains(linked, "BENCHMARKS.md") {
		t.Error("README.md does not link BENCHMARKS.md")
	}
}

// TestAnchors: the anchor rule on headings the pages use (so that a wrong rule cannot pass the
// link test by accident).
func TestAnchors(t *testing.T) {
	got := anchors("# A b\n```\n# not a heading\n```\n## Metrics (`--metrics-bind-address`, default `:8080`)\n## A b\n")
	want := []string{"a-b", "metrics---metrics-bind-address-default-8080", "a-b-1"}
	for _, w := range want {
		if !got[w] {
			t.Errorf("no anchor %q in %v", w, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("anchors %v; want %v", got, want)
	}
}
