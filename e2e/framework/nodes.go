package framework

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Fault helpers for the real nodes (localcluster/node). Each acts on this machine the way the failure it
// names would: nothing is simulated through the API.

// RealNodes are the names of the test cluster's real nodes.
var RealNodes = []string{"real-a", "real-b", "real-c"}

// ClusterNetns is the network namespace that holds the cluster's bridge and kube-proxy's rules.
func (c *Cluster) ClusterNetns() string { return c.Name + "-net" }

// run runs a command on this machine and returns its combined output.
func run(ctx context.Context, name string, args ...string) (string, error) {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

func (c *Cluster) clusterScript(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.Root, "localcluster", "cluster.sh"), args...)
	cmd.Env = append(cmd.Environ(), "CLUSTER_NAME="+c.Name, "CLUSTER_DIR="+c.Dir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// StopNode kills a real node's agent and every process of its pods, as a node failure would. The
// node is started again when the test ends.
func (c *Cluster) StopNode(t testing.TB, node string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := c.clusterScript(ctx, "stop-node", node); err != nil {
		t.Fatalf("stopping node %s: %v\n%s", node, err, out)
	}
	t.Cleanup(func() { c.StartNode(t, node) })
}

// StartNode starts a stopped real node and waits for it to be Ready.
func (c *Cluster) StartNode(t testing.TB, node string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := c.clusterScript(ctx, "start-node", node); err != nil {
		t.Fatalf("starting node %s: %v\n%s", node, err, out)
	}
	Eventually(t, 90*time.Second, "node "+node+" Ready", func() (bool, string, error) {
		n, err := c.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return NodeReady(n) == corev1.ConditionTrue, fmt.Sprintf("Ready=%s", NodeReady(n)), nil
	})
}

// NodeReady returns the status of a node's Ready condition.
func NodeReady(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return corev1.ConditionUnknown
}

// PodReady reports whether a pod's Ready condition is True.
func PodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// CrashContainer kills a running container's main process with SIGKILL, as a crash would.
func (c *Cluster) CrashContainer(t testing.TB, pod *corev1.Pod, container string) {
	t.Helper()
	id := ""
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == container {
			id = strings.TrimPrefix(cs.ContainerID, "runc://")
		}
	}
	if id == "" || pod.Spec.NodeName == "" {
		t.Fatalf("pod %s/%s: container %q has no runc container ID (node %q)", pod.Namespace, pod.Name, container, pod.Spec.NodeName)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	root := filepath.Join(c.Dir, "nodes", pod.Spec.NodeName, "runc")
	if out, err := run(ctx, "runc", "--root", root, "kill", id, "KILL"); err != nil {
		t.Fatalf("crashing container %s of %s/%s: %v\n%s", container, pod.Namespace, pod.Name, err, out)
	}
}

// NodeProcesses returns the PIDs of processes running in the containers of a real node's pods
// (their cgroup is under /cache-nodes/<cluster>/<node>/).
func NodeProcesses(c *Cluster, node string) []string {
	entries, _ := os.ReadDir("/proc")
	var pids []string
	marker := "/cache-nodes/" + c.Name + "/" + node + "/"
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if err == nil && strings.Contains(string(data), marker) {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

// hostVeth is the bridge side of a pod's veth pair ("v" and the first 12 hex digits of its UID;
// localcluster/node/network.go names it).
func hostVeth(pod *corev1.Pod) string {
	hex := strings.ReplaceAll(string(pod.UID), "-", "")
	return "v" + hex[:12]
}

// CutNetwork takes a pod off the network (its link to the bridge goes down) until RestoreNetwork
// or the end of the test.
func (c *Cluster) CutNetwork(t testing.TB, pod *corev1.Pod) {
	t.Helper()
	c.setLink(t, pod, "down")
	t.Cleanup(func() { c.setLink(t, pod, "up") })
}

// RestoreNetwork puts a pod back on the network.
func (c *Cluster) RestoreNetwork(t testing.TB, pod *corev1.Pod) {
	t.Helper()
	c.setLink(t, pod, "up")
}

func (c *Cluster) setLink(t testing.TB, pod *corev1.Pod, state string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := run(ctx, "ip", "-n", c.ClusterNetns(), "link", "set", hostVeth(pod), state)
	if err != nil && !strings.Contains(out, "Cannot find device") {
		t.Fatalf("setting the network of %s/%s %s: %v", pod.Namespace, pod.Name, state, err)
	}
}

// Exec runs a command in a pod's container through the API server and the node's kubelet API
// (kubectl exec) and returns its standard output.
func (c *Cluster) Exec(ctx context.Context, ns, pod, container string, command ...string) (string, error) {
	return c.ExecInput(ctx, ns, pod, container, "", command...)
}

// ExecInput is Exec with stdin given to the command (kubectl exec -i): a secret a command needs
// goes there, never on its command line (which the API server's audit log records).
func (c *Cluster) ExecInput(ctx context.Context, ns, pod, container, stdin string, command ...string) (string, error) {
	args := []string{"exec", "-n", ns, pod}
	if stdin != "" {
		args = append(args, "-i")
	}
	if container != "" {
		args = append(args, "-c", container)
	}
	args = append(append(args, "--"), command...)
	cmd := c.KubectlCmd(ctx, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("kubectl exec %s/%s -- %s: %w: %s", ns, pod, strings.Join(command, " "), err, errOut.String())
	}
	return out.String(), nil
}

// RestartCluster stops the whole cluster (the real nodes with their pods, then the control plane)
// and starts it again from its stored state, as after a power cut, and waits for every real node
// to be Ready. It returns how long the restart took.
func (c *Cluster) RestartCluster(t testing.TB) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	if out, err := c.clusterScript(ctx, "restart"); err != nil {
		t.Fatalf("restarting the cluster: %v\n%s", err, out)
	}
	return time.Since(start)
}
