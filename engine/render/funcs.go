package render

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig/v3"
	"sigs.k8s.io/yaml"
)

// forbiddenFunc matches the sprig functions templates may not use: anything that reads the time
// (now, date, toDate, durations), the environment or the network, or returns something different on
// every call (rand*, shuffle, uuidv4, key and certificate generation, salted hashes, encryptAES's
// random IV). The rule is a pattern over sprig's names rather than a list, so a function a later
// sprig adds under one of these names is denied too. A template that calls one fails to parse,
// with the function's name in the error.
var forbiddenFunc = regexp.MustCompile(`(?i)rand|date|^now$|^ago$|duration|epoch|uuid|^gen|crypt|passw|env|host|shuffle|cert`)

// maxIncludeDepth bounds how deeply include calls may nest, so that a template that includes
// itself fails with an error instead of overflowing the stack.
const maxIncludeDepth = 64

// FuncMap returns the functions the templates can use: sprig's text functions less the forbidden
// ones, plus toYaml and include (as in Helm). include is bound per render.
func FuncMap() template.FuncMap {
	f := sprig.TxtFuncMap()
	for name := range f {
		if forbiddenFunc.MatchString(name) {
			delete(f, name)
		}
	}
	f["toYaml"] = toYAML
	f["include"] = func(string, interface{}) (string, error) {
		return "", fmt.Errorf("include: not bound to a template set")
	}
	return f
}

// toYAML renders v as YAML without a trailing newline; an error fails the render.
func toYAML(v interface{}) (string, error) {
	b, err := yaml.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("toYaml: %w", err)
	}
	return strings.TrimSuffix(string(b), "\n"), nil
}

// bindInclude makes include render a named template of t, at most maxIncludeDepth deep. t must
// be used by one render at a time (Render binds a clone).
func bindInclude(t *template.Template) {
	depth := 0
	t.Funcs(template.FuncMap{"include": func(name string, data interface{}) (string, error) {
		if depth >= maxIncludeDepth {
			return "", fmt.Errorf("include %q: nested more than %d deep (does a template include itself?)", name, maxIncludeDepth)
		}
		depth++
		defer func() { depth-- }()
		var buf bytes.Buffer
		if err := t.ExecuteTemplate(&buf, name, data); err != nil {
			return "", err
		}
		return buf.String(), nil
	}})
}
