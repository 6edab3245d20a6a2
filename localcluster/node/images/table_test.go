package images

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRepository(t *testing.T) {
	for in, want := range map[string][2]string{
		"redis:7.4":                          {"redis", "7.4"},
		"docker.io/library/redis:7.4":        {"redis", "7.4"},
		"valkey/valkey:8.0":                  {"valkey/valkey", "8.0"},
		"cache-operator":                     {"cache-operator", ""},
		"redis@sha256:0123":                  {"redis", ""},
		"registry.local:5000/team/app:1.0.2": {"registry.local:5000/team/app", "1.0.2"},
	} {
		if repo, tag := Repository(in); repo != want[0] || tag != want[1] {
			t.Errorf("Repository(%q) = %q, %q, want %q", in, repo, tag, want)
		}
	}
}

func TestImageTable(t *testing.T) {
	table, err := Load("../images.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for ref, root := range map[string]string{
		"redis:7.0": "bookworm-redis", "redis:7.2": "bookworm-redis", "docker.io/library/redis:8.0": "trixie-redis",
		"valkey/valkey:8.0": "trixie-valkey", "valkey/valkey:8.1": "trixie-valkey", "busybox:1.36": Host, "cache-operator:dev": Scratch,
	} {
		im, err := table.Lookup(ref)
		if err != nil {
			t.Errorf("%s: %v", ref, err)
			continue
		}
		if im.Root != root {
			t.Errorf("%s: root %q, want %q", ref, im.Root, root)
		}
	}
	op, err := table.Lookup("cache-operator:dev")
	if err != nil {
		t.Fatal(err)
	}
	if p := op.Programs["cache-operator"]; !filepath.IsAbs(p) || !strings.HasSuffix(p, "/bin/cache-operator") {
		t.Errorf("the operator's program resolves to %q", p)
	}
	_, err = table.Lookup("nginx:1.27")
	if err == nil || !strings.Contains(err.Error(), "image table") || !strings.Contains(err.Error(), `"nginx"`) {
		t.Errorf("unknown image: want an error naming the table and the repository, got %v", err)
	}
	_, err = table.Lookup("redis:7.4")
	if err == nil || !strings.Contains(err.Error(), `has repository "redis" with tags 7.0, 7.2, 8.0, not "7.4"`) {
		t.Errorf("unknown tag: want an error naming the tags, got %v", err)
	}
	// The roots' recipes: the trixie ones share a suite (one package folder, built in turn).
	if table.Roots["trixie-redis"].Suite != "trixie" || table.Roots["trixie-valkey"].Suite != "trixie" || table.Roots["bookworm-redis"].Suite != "bookworm" {
		t.Errorf("roots: %+v", table.Roots)
	}
}

func TestDpkgVersionsAndUpstream(t *testing.T) {
	dir := t.TempDir()
	status := "Package: redis-server\nStatus: install ok installed\nVersion: 5:8.0.2-3\n\nPackage: gone\nStatus: deinstall ok config-files\nVersion: 1.0-1\n\nPackage: libc6\nStatus: install ok installed\nVersion: 2.41-12\n"
	if err := os.WriteFile(filepath.Join(dir, "status"), []byte(status), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := dpkgVersions(filepath.Join(dir, "status"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["redis-server"] != "5:8.0.2-3" || got["libc6"] != "2.41-12" {
		t.Errorf("versions %v", got)
	}
	for in, want := range map[string]string{"5:8.0.2-3": "8.0.2", "5:7.0.15-1~deb12u6": "7.0.15", "8.1.1+dfsg1-3": "8.1.1+dfsg1", "1.0": "1.0"} {
		if g := UpstreamVersion(in); g != want {
			t.Errorf("UpstreamVersion(%q) = %q, want %q", in, g, want)
		}
	}
}
