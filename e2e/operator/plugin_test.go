package operator

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"example.com/cache-operator/e2e/framework"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// pluginPath is a folder holding the plugin as kubectl finds it: kubectl-managedcache and
// kubectl-mc, links to the operator binary these tests built (as make build links them in bin/).
func pluginPath(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"kubectl-managedcache", "kubectl-mc"} {
		if err := os.Symlink(binary, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// kubectlPlugin runs `kubectl <args>` with the plugin folder first on the PATH.
func kubectlPlugin(t *testing.T, c *framework.Cluster, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(c.Bin("kubectl"), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig, "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// TestKubectlPlugin drives a size-3 cache through kubectl itself with the plugin on the PATH:
// status (also in the middle of a failover), switchover, rotate-password, backup, hibernate,
// resume and report, checking what each prints and does.
func TestKubectlPlugin(t *testing.T) {
	c := framework.Setup(t)
	ctx := context.Background()
	metricsAddr := freeAddr(t)
	ns := c.RealNamespace(t, "plugin")
	op := startOperator(t, c, "--metrics-bind-address="+metricsAddr)
	deleteCachesOnCleanup(t, c, ns)
	store := c.ObjectStore(t)
	c.StoreSecret(t, ns, "store", store, nil)
	const name = "pc"
	createCacheV2(t, c, ns, name, v2Spec(3, map[string]interface{}{
		"backup": map[string]interface{}{"store": map[string]interface{}{"secretName": "store"}, "keep": int64(3), "onDelete": "Delete"},
	}))
	dumpMembersOnFailure(t, c, ns, name)
	first := waitWhole(t, c, ns, name, 3, 3*time.Minute)
	fillKeys(t, memberClient(t, c, ns, name, first.Name), "d", 1000)
	dir := pluginPath(t)
	mc := func(args ...string) string {
		t.Helper()
		out, err := kubectlPlugin(t, c, dir, append(append([]string{"managedcache"}, args...), "-n", ns, "--metrics-url=http://"+metricsAddr+"/metrics")...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}

	list, err := kubectlPlugin(t, c, dir, "plugin", "list")
	if !strings.Contains(list, "kubectl-managedcache") || !strings.Contains(list, "kubectl-mc") {
		t.Errorf("kubectl plugin list: %v\n%s", err, list)
	}
	var out string
	// maxmemory: half the 1Gi volume; the keys as the member passes last counted them.
	primaryLine := regexp.MustCompile(`(?m)^` + first.Name + `\s+primary\s+true\s+0 B\s+[0-9.]+ MiB / 512.0 MiB\s+1000\s+`)
	framework.Eventually(t, 30*time.Second, "status with every member's figures", func() (bool, string, error) {
		out = mc("status", name)
		return strings.Count(out, "/ 512.0 MiB") == 3 && primaryLine.MatchString(out), out, nil
	})
	t.Logf("kubectl managedcache status:\n%s", out)
	for _, want := range []string{"ManagedCache " + ns + "/" + name + ": redis 7.0, 3 replicas", "Ready: True (AllReplicasReady",
		"Last failover: none recorded", "Backups: schedule \"\"", "Conditions:", "Degraded", "Warning Events (last hour):"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q", want)
		}
	}

	// kubectl mc is the same plugin.
	if short, err := kubectlPlugin(t, c, dir, "mc", "status", name, "-n", ns, "--metrics-url=http://"+metricsAddr+"/metrics"); err != nil || !strings.Contains(short, "MEMBER") {
		t.Errorf("kubectl mc status: %v\n%s", err, short)
	}

	// switchover, to the member named.
	target := name + "-2"
	if first.Name == target {
		target = name + "-1"
	}
	out = mc("switchover", name, "--to", target)
	t.Logf("kubectl managedcache switchover: %s", strings.TrimSpace(out))
	if !strings.Contains(out, target+" is the primary") {
		t.Errorf("switchover said %q", out)
	}
	if out = mc("status", name); !strings.Contains(out, "Last failover: switchover from "+first.Name+" to "+target) {
		t.Errorf("status after the switchover:\n%s", out)
	}

	// status in the middle of a failover: the primary's pod deleted at once.
	start := time.Now()
	if _, err := c.Kubectl(ctx, "delete", "pod", target, "-n", ns, "--grace-period=0", "--force", "--wait=false"); err != nil {
		t.Fatal(err)
	}
	var during string
	var took time.Duration
	framework.Eventually(t, time.Minute, "a status that shows the failover under way", func() (bool, string, error) {
		s := time.Now()
		o, err := kubectlPlugin(t, c, dir, "managedcache", "status", name, "-n", ns, "--metrics-url=http://"+metricsAddr+"/metrics")
		took = time.Since(s)
		during = o
		return err == nil && (strings.Contains(o, "FailingOver") || strings.Contains(o, "PrimaryUnreachable") || strings.Contains(o, "NoPrimary") ||
			strings.Contains(o, "(deleting)") || strings.Contains(o, "(not answering)")), o, err
	})
	t.Logf("kubectl managedcache status %.1f s into a failover (it took %.2f s):\n%s", time.Since(start).Seconds(), took.Seconds(), during)
	waitWhole(t, c, ns, name, 3, 3*time.Minute)
	framework.Eventually(t, time.Minute, "status to report the failover", func() (bool, string, error) {
		out = mc("status", name)
		return strings.Contains(out, "Last failover: failover from "+target), out, nil
	})
	if !strings.Contains(out, "FailoverStarted") {
		t.Errorf("status after a failover shows no FailoverStarted warning:\n%s", out)
	}

	// rotate-password: a new password in the Secret.
	before := password(t, c, ns, name)
	out = mc("rotate-password", name)
	if after := password(t, c, ns, name); after == before || !strings.Contains(out, "new password in Secret") {
		t.Errorf("rotate-password said %q; password changed: %v", out, after != before)
	}

	// backup: a ManagedCacheBackup that completes.
	out = mc("backup", name)
	t.Logf("kubectl managedcache backup: %s", strings.TrimSpace(out))
	if !strings.Contains(out, "completed in") {
		t.Errorf("backup said %q", out)
	}

	// hibernate and resume: the same primary.
	m, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	primary, _, _ := unstructured.NestedString(m.Object, "status", "primary")
	out = mc("hibernate", name)
	t.Logf("kubectl managedcache hibernate: %s", strings.TrimSpace(out))
	if !strings.Contains(out, "hibernated in") || len(memberPods(t, c, ns, name)) != 0 {
		t.Errorf("hibernate said %q", out)
	}
	if out = mc("status", name); !strings.Contains(out, "Members: none running") || !strings.Contains(out, "Hibernation: since") {
		t.Errorf("status while hibernated:\n%s", out)
	}
	out = mc("resume", name)
	t.Logf("kubectl managedcache resume: %s", strings.TrimSpace(out))
	if !strings.Contains(out, "with "+primary+" as primary") {
		t.Errorf("resume said %q; want %s primary again", out, primary)
	}

	// report: a tarball with the cache, children, members' INFO, Events and the operator's lines,
	// and no secret in it, even once someone has applied the cache's Secret with kubectl (its
	// last-applied annotation then holds the applied values on one line: the clients' password
	// as stringData, the internal one as data), with the values it has (nothing rotates).
	pw, internal := password(t, c, ns, name), internalPassword(t, c, ns, name)
	applied := fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata: {name: %s, namespace: %s}\nstringData: {password: %q}\ndata: {internal: %s}\n",
		name+"-auth", ns, pw, base64.StdEncoding.EncodeToString([]byte(internal)))
	apply := c.KubectlCmd(ctx, "apply", "-f", "-")
	apply.Stdin = strings.NewReader(applied)
	if out, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply of the cache's Secret: %v: %s", err, out)
	}
	report := filepath.Join(t.TempDir(), "report.tar.gz")
	out = mc("report", name, "-o", report, "--operator-log", op.log)
	t.Logf("kubectl managedcache report: %s", strings.TrimSpace(out))
	files := readTarball(t, report)
	secrets := []string{pw, internal, before, base64.StdEncoding.EncodeToString([]byte(pw)), base64.StdEncoding.EncodeToString([]byte(internal))}
	var names []string
	for path, body := range files {
		names = append(names, path)
		for _, s := range secrets {
			if s != "" && strings.Contains(body, s) {
				t.Errorf("the report's %s holds a password", path)
			}
		}
	}
	t.Logf("report files: %v", names)
	for _, want := range []struct{ path, text string }{
		{"managedcache.yaml", "kind: ManagedCache"},
		{"children/statefulset-" + name + ".yaml", "kind: StatefulSet"},
		{"children/secret-" + name + "-auth.yaml", "password"},
		{"children/secret-" + name + "-auth.yaml", "kubectl.kubernetes.io/last-applied-configuration: '<redacted: "},
		{"members/" + name + "-0-info.txt", "redis_version:"},
		{"members/" + name + "-2-info.txt", "role:"},
		{"events.txt", "FailoverStarted"},
		{"operator.log", ns + "/" + name},
		{"README.txt", "Not read:"},
	} {
		body, ok := files[name+"-report/"+want.path]
		if !ok || !strings.Contains(body, want.text) {
			t.Errorf("report: %s (present %v) lacks %q", want.path, ok, want.text)
		}
	}
}

func readTarball(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	out := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = string(b)
	}
}
