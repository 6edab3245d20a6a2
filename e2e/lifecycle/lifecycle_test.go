// Package lifecycle tests that the local cluster's scripts are safe to repeat and clean up after
// themselves. It deletes the test cluster, so `make test-e2e` runs it last and on its own
// (CACHE_E2E_LIFECYCLE=1); otherwise it skips.
package lifecycle

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"example.com/cache-operator/e2e/framework"
)

// clusterProcesses returns "pid cmdline" of every running process of the test cluster: started
// from bin/cluster/ (or from the copies kwokctl keeps in the cluster's folder) with the cluster's
// folder on its command line. A development cluster started by `make up` is not counted.
func clusterProcesses(t *testing.T, c *framework.Cluster) []string {
	t.Helper()
	prefix := filepath.Join(c.Root, "bin", "cluster") + "/"
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatalf("reading /proc: %v", err)
	}
	var found []string
	for _, e := range entries {
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(raw) == 0 {
			continue
		}
		cmdline := strings.ReplaceAll(strings.TrimRight(string(raw), "\x00"), "\x00", " ")
		fromOurs := strings.HasPrefix(cmdline, prefix) || strings.HasPrefix(cmdline, c.Dir+"/")
		if fromOurs && strings.Contains(cmdline, c.Dir+"/") {
			found = append(found, e.Name()+" "+cmdline)
		}
	}
	return found
}

func runScript(t *testing.T, c *framework.Cluster, arg string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(c.Root, "localcluster", "cluster.sh"), arg)
	cmd.Env = append(os.Environ(), "CLUSTER_NAME="+c.Name, "CLUSTER_DIR="+c.Dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cluster.sh %s: %v\n%s", arg, err, out)
	}
	return string(out)
}

func TestClusterLifecycle(t *testing.T) {
	if os.Getenv("CACHE_E2E_LIFECYCLE") != "1" {
		t.Skip("deletes the test cluster: run by `make test-e2e` after every other end-to-end test")
	}
	c := framework.Setup(t)
	ctx := context.Background()
	before := clusterProcesses(t, c)
	if len(before) < 11 {
		t.Fatalf("expected the running cluster's processes (etcd, apiserver, controller-manager, scheduler, kwok, provisioner, kube-proxy, CoreDNS, three node agents), found %d: %v", len(before), before)
	}
	if _, err := c.Kubectl(ctx, "create", "namespace", "survives-rerun"); err != nil {
		t.Fatal(err)
	}
	c.WaitDefaultServiceAccount(t, "survives-rerun")

	// A second `up` on a running cluster is harmless: same processes, same data.
	out := runScript(t, c, "up")
	t.Logf("second up:\n%s", out)
	after := clusterProcesses(t, c)
	if strings.Join(before, "\n") != strings.Join(after, "\n") {
		t.Fatalf("a second up changed the cluster's processes:\nbefore:\n%s\nafter:\n%s", strings.Join(before, "\n"), strings.Join(after, "\n"))
	}
	if _, err := c.Kubectl(ctx, "get", "namespace", "survives-rerun"); err != nil {
		t.Fatalf("data lost by a second up: %v", err)
	}

	// A real pod gives down something to clean: a network namespace and veth pair, a memory
	// emptyDir mount, a runc container and its cgroups.
	pod := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"leftover","namespace":"survives-rerun"},
	  "spec":{"terminationGracePeriodSeconds":30,"containers":[{"name":"main","image":"busybox","command":["sh","-c","trap '' TERM; while true; do sleep 1; done"],
	  "volumeMounts":[{"name":"mem","mountPath":"/mem"}]}],"volumes":[{"name":"mem","emptyDir":{"medium":"Memory","sizeLimit":"4Mi"}}]}}`
	apply := c.KubectlCmd(ctx, "apply", "-f", "-")
	apply.Stdin = strings.NewReader(pod)
	if out, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("creating a real pod: %v\n%s", err, out)
	}
	if _, err := c.Kubectl(ctx, "wait", "-n", "survives-rerun", "--for=condition=Ready", "pod/leftover", "--timeout=90s"); err != nil {
		t.Fatal(err)
	}
	if n := len(framework.NodeProcesses(c, "real-a")) + len(framework.NodeProcesses(c, "real-b")) + len(framework.NodeProcesses(c, "real-c")); n == 0 {
		t.Fatal("the real pod has no process on this machine")
	}
	// The cluster's end of its uplink is found by its peer's namespace, so that another local
	// cluster's link (a `make up` cluster, cache-dev, may run beside cache-test) is not counted.
	uplink := hostLink(t, c)
	if uplink == "" {
		t.Fatalf("no link on this machine has its peer in the network namespace %s-net", c.Name)
	}
	if got := hostState(t, c, uplink); !strings.Contains(got, "netns "+c.Name+"-net") || !strings.Contains(got, "mount ") ||
		!strings.Contains(got, "link ") || !strings.Contains(got, "route ") {
		t.Fatalf("expected the cluster's network namespaces, its link and routes and the pod's mount before down, found:\n%s", got)
	}
	rootRules := rootIptables(t)

	// down leaves no process, file, mount, network namespace, link, route, cgroup or rule behind.
	out = runScript(t, c, "down")
	t.Logf("down:\n%s", out)
	if left := clusterProcesses(t, c); len(left) > 0 {
		t.Fatalf("processes left after down:\n%s", strings.Join(left, "\n"))
	}
	if _, err := os.Stat(c.Dir); !os.IsNotExist(err) {
		t.Fatalf("cluster folder %s still exists after down (stat: %v)", c.Dir, err)
	}
	if left := hostState(t, c, uplink); left != "" {
		t.Fatalf("left on this machine after down:\n%s", left)
	}
	for _, node := range framework.RealNodes {
		if pids := framework.NodeProcesses(c, node); len(pids) > 0 {
			t.Fatalf("processes of %s's pods left after down: %v", node, pids)
		}
	}
	if after := rootIptables(t); after != rootRules {
		t.Fatalf("this machine's own iptables rules changed across down:\nbefore:\n%s\nafter:\n%s", rootRules, after)
	}
}

// hostLink names the link on this machine whose peer is in the cluster's network namespace.
func hostLink(t *testing.T, c *framework.Cluster) string {
	t.Helper()
	out, err := exec.Command("ip", "-o", "link", "show").CombinedOutput()
	if err != nil {
		t.Fatalf("ip link show: %v: %s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) > 1 && strings.HasSuffix(strings.TrimSpace(line), " link-netns "+c.Name+"-net") {
			name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
			return name
		}
	}
	return ""
}

// hostState lists what of the cluster exists on this machine outside its folder: network
// namespaces, its uplink (named uplink) and the routes through it, mounts under its folder, and
// cgroups. Another local cluster's namespaces, link and routes are not counted.
func hostState(t *testing.T, c *framework.Cluster, uplink string) string {
	t.Helper()
	var found []string
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatalf("ip netns list: %v: %s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], c.Name+"-net") {
			found = append(found, "netns "+f[0])
		}
	}
	links, _ := exec.Command("ip", "-o", "link", "show").CombinedOutput()
	for _, line := range strings.Split(string(links), "\n") {
		if f := strings.Fields(line); len(f) > 1 && (strings.HasPrefix(f[1], uplink+"@") || f[1] == uplink+":" ||
			strings.HasSuffix(strings.TrimSpace(line), " link-netns "+c.Name+"-net")) {
			found = append(found, "link "+strings.TrimSpace(line))
		}
	}
	routes, _ := exec.Command("ip", "route", "show").CombinedOutput()
	for _, line := range strings.Split(string(routes), "\n") {
		if strings.Contains(line, " dev "+uplink+" ") || strings.HasSuffix(line, " dev "+uplink) {
			found = append(found, "route "+line)
		}
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], c.Dir+"/") {
			found = append(found, "mount "+f[4])
		}
	}
	cgroups, _ := filepath.Glob("/sys/fs/cgroup/*/cache-nodes/" + c.Name)
	for _, cg := range cgroups {
		found = append(found, "cgroup "+cg)
	}
	return strings.Join(found, "\n")
}

// rootIptables is this machine's own ruleset (counters dropped). The cluster's rules live in its
// network namespace; the root namespace must not gain any.
func rootIptables(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("iptables-save").CombinedOutput()
	if err != nil {
		t.Fatalf("iptables-save: %v: %s", err, out)
	}
	var lines []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.Index(line, " ["); strings.HasPrefix(line, ":") && i > 0 {
			line = line[:i]
		}
		lines = append(lines, line)
	}
	rules := strings.Join(lines, "\n")
	if strings.Contains(rules, "KUBE-") {
		t.Fatalf("kube-proxy rules in this machine's own iptables:\n%s", rules)
	}
	return rules
}
