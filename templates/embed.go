// Package templates holds the YAML templates of a ManagedCache's children, embedded into the
// operator binary. Each *.yaml file renders to one object (or several, separated by ---); files
// whose name starts with "_" only define named templates for the others to include.
//
// The templates are data, not code: they are rendered with text/template, strict about missing
// keys, with a curated sprig function map that has nothing random and no environment access
// (see render.FuncMap in engine/render). The values they see are described by render.Values. The operator sets the
// namespace, the standard labels and the owner reference on every rendered object itself.
package templates

import "embed"

// FS is the embedded copy of this folder's templates.
//
//go:embed *.yaml _*.tpl
var FS embed.FS
