// Package hack holds the scripts of the local cluster; its tests check the scripts themselves.
package hack

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// pathWith makes a PATH directory holding only the named commands of this machine (links to
// them), so that the script sees a machine that lacks the others.
func pathWith(t *testing.T, names ...string) string {
	t.Helper()
	dir := sharedDir(t)
	for _, n := range names {
		p, err := exec.LookPath(n)
		if err != nil {
			t.Skipf("this machine has no %s to offer the script", n)
		}
		if err := os.Symlink(p, filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// sharedDir is a temporary folder that other users may read and enter (t.TempDir's are the
// test user's alone), for the script run as another user.
func sharedDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "prereqs-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// runPrereqs runs a copy of prereqs.sh (in a folder any user can read: the clone may be in a home
// only root can enter) with the given PATH, as prefix says (setpriv, for another user).
func runPrereqs(t *testing.T, path string, prefix []string, args ...string) (string, int) {
	t.Helper()
	text, err := os.ReadFile("prereqs.sh")
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(sharedDir(t), "prereqs.sh")
	if err := os.WriteFile(script, text, 0o755); err != nil {
		t.Fatal(err)
	}
	argv := append(append(prefix, "/bin/bash", script), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = []string{"PATH=" + path, "HOME=" + t.TempDir()}
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running %v: %v", argv, err)
	}
	return string(out), code
}

// A machine without the cluster's Debian packages: the check stops at once, naming each missing
// command, its package and the one command that installs them all.
func TestPrereqsNameWhatIsMissing(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("the script's install path is for root; as another user it reports root missing (TestPrereqsWantRoot)")
	}
	path := pathWith(t, "id", "go", "make", "git", "unshare", "python3", "curl", "pgrep", "sha256sum")
	out, code := runPrereqs(t, path, nil, "--check")
	if code != 1 {
		t.Fatalf("exit %d, want 1; output:\n%s", code, out)
	}
	for _, want := range []string{
		"runc: not found", "Debian package runc", "iptables: not found", "redis-server: not found",
		"redis-cli: not found", "Debian package redis-tools", "ip: not found", "Debian package iproute2",
		"apt-get install -y --no-install-recommends",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "installing") || strings.Contains(out, "go: install") || strings.Contains(out, "root:") {
		t.Errorf("--check as root with Go present: want no install, no Go or root complaint:\n%s", out)
	}
	install := out[strings.Index(out, "apt-get install"):]
	for _, p := range []string{"runc", "iproute2", "iptables", "redis-server", "redis-tools"} {
		if !strings.Contains(install, p) {
			t.Errorf("the install command lacks package %s: %s", p, install)
		}
	}
}

// Without Go the check names it, with where to get it.
func TestPrereqsNameGo(t *testing.T) {
	path := pathWith(t, "id", "unshare")
	out, code := runPrereqs(t, path, nil, "--check")
	if code != 1 || !strings.Contains(out, "go: install Go") || !strings.Contains(out, "go.dev") {
		t.Errorf("exit %d; want 1 and a line naming Go and go.dev:\n%s", code, out)
	}
}

// As a user other than root the script installs nothing and says that root is needed.
func TestPrereqsWantRoot(t *testing.T) {
	if os.Getuid() != 0 {
		out, code := runPrereqs(t, os.Getenv("PATH"), nil)
		if code != 1 || !strings.Contains(out, "root:") {
			t.Errorf("exit %d; want 1 and a line asking for root:\n%s", code, out)
		}
		return
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("no setpriv to run the script as another user")
	}
	path := pathWith(t, "id", "go", "unshare")
	out, code := runPrereqs(t, path, []string{setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"})
	if code != 1 || !strings.Contains(out, "root:") {
		t.Errorf("exit %d; want 1 and a line asking for root:\n%s", code, out)
	}
	if strings.Contains(out, "installing") {
		t.Errorf("installed packages as a user other than root:\n%s", out)
	}
}

// On this machine, which make test has set up, the check passes and says which versions it found.
func TestPrereqsPassHere(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("make test runs as root")
	}
	out, code := runPrereqs(t, os.Getenv("PATH"), nil, "--check")
	if code != 0 || !strings.Contains(out, "prereqs: ok") {
		t.Errorf("exit %d on a machine make test prepared:\n%s", code, out)
	}
}
