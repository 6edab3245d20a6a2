// Package images is the real nodes' image table (localcluster/node/images.yaml) and the store of the
// root filesystems its images run on, built from Debian packages with mmdebstrap.
package images

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// Table is the node's image table (localcluster/node/images.yaml): each image a pod may name, by
// repository and tag, mapped to a root filesystem built from Debian packages (store.go) or to
// programs on this machine.
type Table struct {
	Path string `json:"-"`
	// Roots are the root filesystems by name: a Debian suite and the packages installed on its
	// essential set.
	Roots map[string]Recipe `json:"roots"`
	// Images are the rows, looked up by repository and tag.
	Images []Image `json:"images"`
}

// Recipe is how a root filesystem is built.
type Recipe struct {
	Suite    string   `json:"suite"`
	Packages []string `json:"packages"`
}

// Image is one row of the table.
type Image struct {
	Repository string `json:"repository"`
	// Tags are the tags the row serves; none: any tag.
	Tags []string `json:"tags"`
	// Root names the root filesystem (Roots), "scratch" (an empty root: only Programs) or "host"
	// (this machine's /usr and /etc, for the node agent's own test pods).
	Root string `json:"root"`
	// VersionPackage is the Debian package whose version the image reports (in the container's
	// imageID), so that a tag mapped to a nearby version says what runs.
	VersionPackage string `json:"versionPackage"`
	// Note says how a tag is mapped when it is not the version that runs.
	Note       string   `json:"note"`
	Entrypoint []string `json:"entrypoint"`
	WorkingDir string   `json:"workingDir"`
	// Programs are files placed in the container's /usr/local/bin: name -> path on this machine.
	Programs map[string]string `json:"programs"`
}

// Root kinds that are not built.
const (
	Scratch = "scratch"
	Host    = "host"
)

// Load reads the table and resolves relative program paths against its folder.
func Load(path string) (*Table, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--images: %w", err)
	}
	t := &Table{Path: path}
	if err := yaml.UnmarshalStrict(data, t); err != nil {
		return nil, fmt.Errorf("--images %s: %w", path, err)
	}
	dir := filepath.Dir(path)
	for i := range t.Images {
		im := &t.Images[i]
		if _, ok := t.Roots[im.Root]; !ok && im.Root != Scratch && im.Root != Host {
			return nil, fmt.Errorf("--images %s: image %s names root %q, which is not in roots", path, im.Repository, im.Root)
		}
		for name, p := range im.Programs {
			if !filepath.IsAbs(p) {
				p = filepath.Join(dir, p)
			}
			abs, err := filepath.Abs(p)
			if err != nil {
				return nil, err
			}
			im.Programs[name] = abs
		}
	}
	return t, nil
}

// Repository returns an image reference without registry defaults, tag or digest, and its tag
// ("" when none): "docker.io/library/redis:7.4" -> "redis", "7.4".
func Repository(ref string) (repo, tag string) {
	if i := strings.Index(ref, "@"); i >= 0 {
		ref = ref[:i]
	}
	if i := strings.LastIndex(ref, ":"); i >= 0 && !strings.Contains(ref[i:], "/") {
		ref, tag = ref[:i], ref[i+1:]
	}
	ref = strings.TrimPrefix(ref, "docker.io/")
	ref = strings.TrimPrefix(ref, "index.docker.io/")
	ref = strings.TrimPrefix(ref, "library/")
	return ref, tag
}

// Lookup finds the row of an image reference, or explains that the image is not in the table.
func (t *Table) Lookup(ref string) (*Image, error) {
	repo, tag := Repository(ref)
	var tags []string
	found := false
	for i := range t.Images {
		im := &t.Images[i]
		if im.Repository != repo {
			continue
		}
		found = true
		if len(im.Tags) == 0 {
			return im, nil
		}
		for _, tg := range im.Tags {
			if tg == tag {
				return im, nil
			}
		}
		tags = append(tags, im.Tags...)
	}
	if found {
		sort.Strings(tags)
		return nil, fmt.Errorf("image %q: the node's image table %s has repository %q with tags %s, not %q; there are no registries on the local cluster",
			ref, t.Path, repo, strings.Join(tags, ", "), tag)
	}
	known := make([]string, 0, len(t.Images))
	for _, im := range t.Images {
		if len(known) == 0 || known[len(known)-1] != im.Repository {
			known = append(known, im.Repository)
		}
	}
	sort.Strings(known)
	return nil, fmt.Errorf("image %q (repository %q) is not in the node's image table %s (known: %s); there are no registries on the local cluster",
		ref, repo, t.Path, strings.Join(known, ", "))
}
