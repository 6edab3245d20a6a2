package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// schemaNode is the part of an OpenAPI v3 schema the field tables read.
type schemaNode struct {
	Type        string                `json:"type"`
	Description string                `json:"description"`
	Default     any                   `json:"default"`
	Enum        []any                 `json:"enum"`
	Properties  map[string]schemaNode `json:"properties"`
	Items       *schemaNode           `json:"items"`
	Minimum     *float64              `json:"minimum"`
	Maximum     *float64              `json:"maximum"`
}

type crdFile struct {
	Spec struct {
		Versions []struct {
			Name   string `json:"name"`
			Schema struct {
				OpenAPIV3Schema schemaNode `json:"openAPIV3Schema"`
			} `json:"schema"`
		} `json:"versions"`
	} `json:"spec"`
}

// fieldTable returns a generator of the table of every spec and status field of one version of
// a CRD in crd/: path, type, default and allowed values, and the schema's own description (what
// kubectl explain prints).
func fieldTable(file, version string) func() string {
	return func() string {
		data, err := os.ReadFile(filepath.Join("..", "crd", file))
		if err != nil {
			return "error: " + err.Error() + "\n"
		}
		var c crdFile
		if err := yaml.Unmarshal(data, &c); err != nil {
			return "error: " + err.Error() + "\n"
		}
		var b strings.Builder
		b.WriteString("| field | type | default | description |\n|---|---|---|---|\n")
		for _, v := range c.Spec.Versions {
			if v.Name != version {
				continue
			}
			props := v.Schema.OpenAPIV3Schema.Properties
			for _, top := range []string{"spec", "status"} {
				if n, ok := props[top]; ok {
					writeFields(&b, top, n)
				}
			}
			return b.String()
		}
		return "error: no version " + version + " in " + file + "\n"
	}
}

func writeFields(b *strings.Builder, path string, n schemaNode) {
	typ := n.Type
	if n.Items != nil {
		typ = "[]" + n.Items.Type
	}
	var def []string
	if n.Default != nil && n.Type != "object" {
		def = append(def, fmt.Sprintf("`%v`", n.Default))
	}
	var rules []string
	if len(n.Enum) > 0 {
		var vs []string
		for _, e := range n.Enum {
			vs = append(vs, fmt.Sprintf("`%v`", e))
		}
		rules = append(rules, "one of "+strings.Join(vs, ", "))
	}
	if n.Minimum != nil || n.Maximum != nil {
		lo, hi := "", ""
		if n.Minimum != nil {
			lo = fmt.Sprint(*n.Minimum)
		}
		if n.Maximum != nil {
			hi = fmt.Sprint(*n.Maximum)
		}
		rules = append(rules, fmt.Sprintf("%s–%s", lo, hi))
	}
	desc := strings.Join(strings.Fields(n.Description), " ")
	if len(rules) > 0 {
		desc = strings.TrimSpace(desc + " (" + strings.Join(rules, "; ") + ")")
	}
	fmt.Fprintf(b, "| `%s` | %s | %s | %s |\n", path, typ, strings.Join(def, ""), strings.ReplaceAll(desc, "|", `\|`))
	children := n.Properties
	prefix := path + "."
	if n.Items != nil && n.Items.Properties != nil {
		children = n.Items.Properties
		prefix = path + "[]."
	}
	names := make([]string, 0, len(children))
	for k := range children {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		writeFields(b, prefix+k, children[k])
	}
}
