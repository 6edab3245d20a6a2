package render

import (
	"bytes"
	"fmt"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig/v3"
	"sigs.k8s.io/yaml"
)

// forbiddenFuncs are sprig functions the templates may not use: anything that reads the
// environment or the network, or returns something different on every call. A template that
// calls one fails to parse, with the function's name in the error.
var forbiddenFuncs = []string{
	"env", "expandenv", "getHostByName",
	"now", "ago", "date", "dateInZone", "dateModify", "htmlDate", "htmlDateInZone", "unixEpoch", "duration", "durationRound",
	"randAlpha", "randAlphaNum", "randAscii", "randNumeric", "randBytes", "randInt", "shuffle", "uuidv4",
	"genPrivateKey", "genCA", "genCAWithKey", "genSelfSignedCert", "genSelfSignedCertWithKey",
	"genSignedCert", "genSignedCertWithKey", "derivePassword", "bcrypt", "htpasswd",
}

// FuncMap returns the functions the templates can use: sprig's text functions less
// forbiddenFuncs, plus toYaml and include (as in Helm). include is bound per template set.
func FuncMap() template.FuncMap {
	f := sprig.TxtFuncMap()
	for _, name := range forbiddenFuncs {
		delete(f, name)
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

// bindInclude makes include render a named template of t.
func bindInclude(t *template.Template) {
	t.Funcs(template.FuncMap{"include": func(name string, data interface{}) (string, error) {
		var buf bytes.Buffer
		if err := t.ExecuteTemplate(&buf, name, data); err != nil {
			return "", err
		}
		return buf.String(), nil
	}})
}
