package hack

import (
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
)

// goListModules lists the packages that `go list args` names with the module version each comes
// from (standard library packages have none and are left out).
func goListModules(t *testing.T, dir string, args ...string) map[string]string {
	t.Helper()
	argv := append([]string{"list", "-f", "{{.ImportPath}}\t{{with .Module}}{{.Path}}@{{.Version}}{{end}}"}, args...)
	cmd := exec.Command("go", argv...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=") // the workspace of localcluster/go.work where there is one
	out, err := cmd.Output()
	if err != nil {
		stderr := ""
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go %s in %s: %v\n%s", strings.Join(argv, " "), dir, err, stderr)
	}
	pkgs := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, mod, _ := strings.Cut(line, "\t")
		if mod != "" && !strings.Contains(pkg, " ") && !strings.HasSuffix(pkg, ".test") {
			pkgs[pkg] = mod
		}
	}
	return pkgs
}

// Every package the operator shares with the cluster binaries comes from the same module version
// in both: with the Makefile's build flags (no cgo, -trimpath, the same as make cluster-bin's),
// the build cache then compiles client-go, apimachinery, k8s.io/api, gRPC and the rest once for
// both, which make test's cold run depends on (BENCHMARKS.md, "A cold CI run").
func TestOperatorBuildsWithTheClusterBinariesVersions(t *testing.T) {
	if testing.Short() {
		t.Skip("lists the cluster binaries' dependencies (downloads their modules on a new machine)")
	}
	operator := goListModules(t, "..", "-deps", "-test", "./...")
	cluster := goListModules(t, "../localcluster", "-deps", "./kube", "go.etcd.io/etcd/server/v3")
	var differ []string
	shared := 0
	seen := map[string]bool{}
	for pkg, mod := range operator {
		other, ok := cluster[pkg]
		if !ok {
			continue
		}
		shared++
		if other != mod && !seen[mod] {
			seen[mod] = true
			differ = append(differ, "operator "+mod+", cluster binaries "+other)
		}
	}
	if shared < 100 {
		t.Errorf("the operator shares %d packages with the cluster binaries; want client-go's and more (over 100)", shared)
	}
	sort.Strings(differ)
	if len(differ) > 0 {
		t.Errorf("%d modules differ between the operator's go.mod and localcluster/go.work's selection, so their packages (and all above them) compile twice; "+
			"`go get` the cluster binaries' version in the root, or raise the module in localcluster/go.mod and run `go work sync` in localcluster/:\n  %s",
			len(differ), strings.Join(differ, "\n  "))
		return
	}
	t.Logf("%d packages shared, all from the same module versions", shared)
}
