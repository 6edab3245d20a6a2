package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// ImageTable maps image repositories to programs on this machine (hack/node/images.yaml).
type ImageTable struct {
	Path   string  `json:"-"`
	Images []Image `json:"images"`
}

// Image is one row of the table.
type Image struct {
	Repository string            `json:"repository"`
	Entrypoint []string          `json:"entrypoint"`
	WorkingDir string            `json:"workingDir"`
	Programs   map[string]string `json:"programs"`
}

// LoadImageTable reads the table and resolves relative program paths against its folder.
func LoadImageTable(path string) (*ImageTable, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--images: %w", err)
	}
	t := &ImageTable{Path: path}
	if err := yaml.UnmarshalStrict(data, t); err != nil {
		return nil, fmt.Errorf("--images %s: %w", path, err)
	}
	dir := filepath.Dir(path)
	for i := range t.Images {
		for name, p := range t.Images[i].Programs {
			if !filepath.IsAbs(p) {
				p = filepath.Join(dir, p)
			}
			abs, err := filepath.Abs(p)
			if err != nil {
				return nil, err
			}
			t.Images[i].Programs[name] = abs
		}
	}
	return t, nil
}

// Repository returns an image reference without registry defaults, tag or digest:
// "docker.io/library/redis:7.4" -> "redis".
func Repository(ref string) string {
	if i := strings.Index(ref, "@"); i >= 0 {
		ref = ref[:i]
	}
	if i := strings.LastIndex(ref, ":"); i >= 0 && !strings.Contains(ref[i:], "/") {
		ref = ref[:i]
	}
	ref = strings.TrimPrefix(ref, "docker.io/")
	ref = strings.TrimPrefix(ref, "index.docker.io/")
	ref = strings.TrimPrefix(ref, "library/")
	return ref
}

// Lookup finds the row of an image reference, or explains that the image is not in the table.
func (t *ImageTable) Lookup(ref string) (*Image, error) {
	repo := Repository(ref)
	for i := range t.Images {
		if t.Images[i].Repository == repo {
			return &t.Images[i], nil
		}
	}
	known := make([]string, 0, len(t.Images))
	for _, im := range t.Images {
		known = append(known, im.Repository)
	}
	sort.Strings(known)
	return nil, fmt.Errorf("image %q (repository %q) is not in the node's image table %s (known: %s); there are no registries on the local cluster",
		ref, repo, t.Path, strings.Join(known, ", "))
}
