package framework

import (
	"os"
	"path/filepath"
	"testing"
)

// RepoRoot finds the repository from a package folder without source paths, which -trimpath
// builds do not have.
func TestRepoRoot(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Clean(filepath.Join(wd, "..", ".."))
	if got := RepoRoot(); got != want {
		t.Errorf("RepoRoot() from %s = %q; want %q", wd, got, want)
	}
	if _, err := os.Stat(filepath.Join(RepoRoot(), "localcluster", "cluster.sh")); err != nil {
		t.Errorf("the root has no localcluster/cluster.sh: %v", err)
	}
}
