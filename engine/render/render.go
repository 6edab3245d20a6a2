// Package render turns a ManagedCache into its children: it parses the templates (text/template
// with a curated sprig function map, strict about missing keys, nothing random or time-dependent)
// and executes them with the values of one cache, giving unstructured objects in the cache's
// namespace with its labels and controller reference.
//
// It is not for reading the API server or deciding whether a child needs writing; it is pure and
// deterministic: the same cache and password always give the same objects.
package render

import (
	"bytes"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strings"
	"text/template"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// Renderer renders a ManagedCache's children from a folder of templates: every *.yaml file is a
// template producing one or more YAML documents; *.tpl files only define named templates.
type Renderer struct {
	tmpl     *template.Template
	files    []string // the children's *.yaml templates, sorted
	jobFiles []string // the Jobs' (job-*.yaml), which are not children of the cache
}

// NewRenderer parses every template in fsys. It fails on a syntax error, an unknown or forbidden
// function, or a folder without *.yaml templates, naming the file and line.
func NewRenderer(fsys fs.FS) (*Renderer, error) {
	root := template.New("").Option("missingkey=error").Funcs(FuncMap())
	var files []string
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("reading templates: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !(strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".tpl")) {
			continue
		}
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, fmt.Errorf("reading template %s: %w", name, err)
		}
		if _, err := root.New(name).Parse(string(b)); err != nil {
			return nil, err // text/template names the file and line
		}
		if strings.HasSuffix(name, ".yaml") {
			files = append(files, name)
		}
	}
	var jobs, children []string
	for _, f := range files {
		if strings.HasPrefix(f, "job-") {
			jobs = append(jobs, f)
		} else {
			children = append(children, f)
		}
	}
	if len(children) == 0 {
		return nil, fmt.Errorf("no *.yaml templates found")
	}
	sort.Strings(children)
	sort.Strings(jobs)
	return &Renderer{tmpl: root, files: children, jobFiles: jobs}, nil
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// Render executes every template with v and returns the objects, in template-file order. Each
// object is decoded as JSON would be (integers as int64), gets the cache's namespace and the
// standard labels. It fails on a missing key, a YAML error, an object without apiVersion, kind or
// metadata.name, or one that names another namespace, naming the template.
func (r *Renderer) Render(v Values) ([]*unstructured.Unstructured, error) {
	return r.renderFiles(r.files, v)
}

func (r *Renderer) renderFiles(files []string, v Values) ([]*unstructured.Unstructured, error) {
	// A clone per render, so that include counts its depth for this render alone (workers render
	// concurrently); cloning copies the set of templates, not their parse trees.
	tmpl, err := r.tmpl.Clone()
	if err != nil {
		return nil, err
	}
	bindInclude(tmpl)
	var objs []*unstructured.Unstructured
	for _, file := range files {
		var buf bytes.Buffer
		if err := tmpl.ExecuteTemplate(&buf, file, v); err != nil {
			return nil, err
		}
		for i, doc := range docSeparator.Split(buf.String(), -1) {
			obj, err := decodeDocument(doc)
			if err != nil {
				return nil, fmt.Errorf("template %s (document %d): %w", file, i+1, err)
			}
			if obj == nil {
				continue
			}
			if ns := obj.GetNamespace(); ns != "" && ns != v.Namespace {
				return nil, fmt.Errorf("template %s: %s/%s names namespace %q; children live in the cache's namespace",
					file, obj.GetKind(), obj.GetName(), ns)
			}
			obj.SetNamespace(v.Namespace)
			labels := obj.GetLabels()
			if labels == nil {
				labels = map[string]string{}
			}
			for k, val := range v.Labels {
				labels[k] = val
			}
			obj.SetLabels(labels)
			objs = append(objs, obj)
		}
	}
	return objs, nil
}

func decodeDocument(doc string) (*unstructured.Unstructured, error) {
	j, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		return nil, err
	}
	if t := bytes.TrimSpace(j); len(t) == 0 || string(t) == "null" {
		return nil, nil // an empty document (only comments, or a disabled block)
	}
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(j); err != nil {
		return nil, err
	}
	if obj.GetName() == "" {
		return nil, fmt.Errorf("%s has no metadata.name", obj.GetKind())
	}
	return obj, nil
}

// TemplateNames returns the *.yaml templates the renderer executes, for logs and errors.
func (r *Renderer) TemplateNames() []string {
	out := make([]string, len(r.files))
	for i, f := range r.files {
		out[i] = path.Base(f)
	}
	return out
}
