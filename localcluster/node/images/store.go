package images

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// rootRecipeVersion changes when the way roots are built changes, so that roots built the old way
// are built again.
const rootRecipeVersion = "1"

// DefaultMirror is the Debian registry the roots come from: the only registry this machine reaches.
const DefaultMirror = "http://deb.debian.org/debian"

// Store builds root filesystems from Debian packages with mmdebstrap and keeps them in Dir,
// outside the checkout's build outputs, so that every cluster and checkout of this machine
// shares them. A root is built once per recipe (suite, packages, mirror, the way it is built).
// The downloaded packages are kept per suite and given to the next build of that suite.
type Store struct {
	Dir        string
	Mirror     string
	Mmdebstrap string
}

// Root is a built root filesystem.
type Root struct {
	Name string `json:"name"`
	// Path is the root's folder; Digest identifies its recipe ("sha256:...").
	Path   string `json:"path"`
	Digest string `json:"digest"`
	Suite  string `json:"suite"`
	// Size is its size on disk in bytes; Versions the installed packages' versions.
	Size     int64             `json:"size"`
	Versions map[string]string `json:"versions"`
	// BuildSeconds is how long its build took.
	BuildSeconds float64 `json:"buildSeconds"`
}

// DefaultStoreDir is the store's folder: $XDG_CACHE_HOME/cache-operator/images, or
// ~/.cache/cache-operator/images.
func DefaultStoreDir() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	return filepath.Join(dir, "cache-operator", "images")
}

func (s *Store) mirror() string {
	if s.Mirror == "" {
		return DefaultMirror
	}
	return s.Mirror
}

// digest identifies a recipe.
func (s *Store) digest(r Recipe) string {
	pkgs := slices.Clone(r.Packages)
	slices.Sort(pkgs)
	sum := sha256.Sum256([]byte(strings.Join([]string{rootRecipeVersion, r.Suite, s.mirror(), strings.Join(pkgs, ",")}, "\n")))
	return "sha256:" + hex.EncodeToString(sum[:])
}

func (s *Store) paths(name string, r Recipe) (root, info string) {
	d := strings.TrimPrefix(s.digest(r), "sha256:")[:16]
	base := filepath.Join(s.Dir, "roots", name+"-"+d)
	return base, base + ".json"
}

// Find returns the root of name if it is built.
func (s *Store) Find(name string, r Recipe) (*Root, bool) {
	_, infoPath := s.paths(name, r)
	data, err := os.ReadFile(infoPath)
	if err != nil {
		return nil, false
	}
	var root Root
	if json.Unmarshal(data, &root) != nil {
		return nil, false
	}
	if _, err := os.Stat(root.Path); err != nil {
		return nil, false
	}
	return &root, true
}

// Ensure returns the root of name, building it first if it is not built (built is then true).
// Builds of one root, from this process or others (every node agent and make cluster-bin share the
// store), wait for each other; builds of one suite run one at a time, so that each finds the
// packages the last one downloaded. progress receives a line per step.
func (s *Store) Ensure(ctx context.Context, name string, r Recipe, progress func(string)) (root *Root, built bool, err error) {
	if root, ok := s.Find(name, r); ok {
		return root, false, nil
	}
	unlock, err := s.lock(ctx, "suite-"+r.Suite)
	if err != nil {
		return nil, false, err
	}
	defer unlock()
	if root, ok := s.Find(name, r); ok { // built by another process while this one waited
		return root, false, nil
	}
	root, err = s.build(ctx, name, r, progress)
	return root, err == nil, err
}

// lock takes an exclusive lock on a file of the store until unlock.
func (s *Store) lock(ctx context.Context, name string) (unlock func(), err error) {
	dir := filepath.Join(s.Dir, "locks")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, name+".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
		}
		if err != syscall.EWOULDBLOCK {
			f.Close()
			return nil, err
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond): // another process builds; its lock is released when it exits
		}
	}
}

func (s *Store) build(ctx context.Context, name string, r Recipe, progress func(string)) (*Root, error) {
	start := time.Now()
	rootPath, infoPath := s.paths(name, r)
	debs := filepath.Join(s.Dir, "debs", r.Suite)
	for _, d := range []string{debs, filepath.Dir(rootPath)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	tmp := fmt.Sprintf("%s.tmp-%d", rootPath, os.Getpid())
	_ = os.RemoveAll(tmp)
	defer os.RemoveAll(tmp)
	bin := s.Mmdebstrap
	if bin == "" {
		bin = "mmdebstrap"
	}
	if _, err := exec.LookPath(bin); err != nil {
		return nil, fmt.Errorf("building root %s: mmdebstrap is needed (Debian package mmdebstrap; hack/prereqs.sh installs it): %w", name, err)
	}
	args := []string{
		"--variant=essential", "--mode=root",
		"--include=" + strings.Join(r.Packages, ","),
		// No documentation: a server's root holds what runs.
		"--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-exclude=/usr/share/man/*",
		"--dpkgopt=path-exclude=/usr/share/locale/*", "--dpkgopt=path-exclude=/usr/share/info/*",
		// The packages come from, and go back to, the suite's shared folder.
		"--skip=download/empty", "--skip=essential/unlink",
		`--setup-hook=mkdir -p "$1"/var/cache/apt/archives/`,
		"--setup-hook=sync-in " + debs + " /var/cache/apt/archives/",
		"--customize-hook=sync-out /var/cache/apt/archives " + debs,
		`--customize-hook=rm -f "$1"/var/cache/apt/archives/*.deb "$1"/var/cache/apt/archives/partial/*.deb`,
		r.Suite, tmp, s.mirror(),
	}
	progress(fmt.Sprintf("building root %s: Debian %s with %s (mmdebstrap, packages shared in %s) ...", name, r.Suite, strings.Join(r.Packages, " "), debs))
	cmd := exec.CommandContext(ctx, bin, args...)
	out, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = cmd.Stderr
	var tail []string
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		tail = append(tail, line)
		if len(tail) > 20 {
			tail = tail[1:]
		}
		if strings.HasPrefix(line, "I: ") {
			progress(name + ": " + strings.TrimPrefix(line, "I: "))
		}
	}
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("building root %s: mmdebstrap: %w; its last lines:\n%s", name, err, strings.Join(tail, "\n"))
	}
	versions, err := dpkgVersions(filepath.Join(tmp, "var/lib/dpkg/status"))
	if err != nil {
		return nil, fmt.Errorf("building root %s: %w", name, err)
	}
	size, err := diskUsage(tmp)
	if err != nil {
		return nil, err
	}
	_ = os.RemoveAll(rootPath)
	if err := os.Rename(tmp, rootPath); err != nil {
		return nil, err
	}
	root := &Root{Name: name, Path: rootPath, Digest: s.digest(r), Suite: r.Suite, Size: size, Versions: versions,
		BuildSeconds: time.Since(start).Round(100 * time.Millisecond).Seconds()}
	data, _ := json.MarshalIndent(root, "", "  ")
	if err := os.WriteFile(infoPath+".tmp", data, 0o644); err != nil {
		return nil, err
	}
	if err := os.Rename(infoPath+".tmp", infoPath); err != nil {
		return nil, err
	}
	progress(fmt.Sprintf("built root %s in %.1fs: %d MiB", name, root.BuildSeconds, size>>20))
	return root, nil
}

// dpkgVersions reads the installed packages' versions from a dpkg status file.
func dpkgVersions(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, stanza := range strings.Split(string(data), "\n\n") {
		var pkg, version string
		installed := false
		for _, line := range strings.Split(stanza, "\n") {
			switch {
			case strings.HasPrefix(line, "Package: "):
				pkg = strings.TrimPrefix(line, "Package: ")
			case strings.HasPrefix(line, "Version: "):
				version = strings.TrimPrefix(line, "Version: ")
			case strings.HasPrefix(line, "Status: "):
				installed = strings.HasSuffix(line, " installed")
			}
		}
		if pkg != "" && installed {
			out[pkg] = version
		}
	}
	return out, nil
}

// diskUsage is the size of the files under dir, in bytes of blocks used.
func diskUsage(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			total += st.Blocks * 512
		}
		return nil
	})
	return total, err
}

// UpstreamVersion is a Debian version without epoch and revision: "5:8.0.2-3" -> "8.0.2".
func UpstreamVersion(v string) string {
	if _, rest, ok := strings.Cut(v, ":"); ok {
		v = rest
	}
	if i := strings.LastIndex(v, "-"); i >= 0 {
		v = v[:i]
	}
	return v
}
