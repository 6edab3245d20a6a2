package framework

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// ContainerPID returns the host PID of a running container's main process (runc state).
func (c *Cluster) ContainerPID(pod *corev1.Pod, container string) (int, error) {
	id := ""
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == container {
			id = strings.TrimPrefix(cs.ContainerID, "runc://")
		}
	}
	if id == "" || pod.Spec.NodeName == "" {
		return 0, fmt.Errorf("pod %s/%s: container %q has no runc container ID", pod.Namespace, pod.Name, container)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := run(ctx, "runc", "--root", filepath.Join(c.Dir, "nodes", pod.Spec.NodeName, "runc"), "state", id)
	if err != nil {
		return 0, err
	}
	var st struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Pid == 0 {
		return 0, fmt.Errorf("runc state %s: %v: %s", id, err, out)
	}
	return st.Pid, nil
}

// Partition cuts a pod off from the addresses in cut, in both directions, in the pod's own network
// namespace (iptables), except for the TCP connections whose far end is one of keep (ip:port): an
// asymmetric partition, in which a client keeps the connection it has while the operator and the
// other members no longer reach the pod. Heal (or the end of the test) removes the rules.
func (c *Cluster) Partition(t testing.TB, pod *corev1.Pod, cut []string, keep []string) (heal func()) {
	t.Helper()
	pid, err := c.ContainerPID(pod, pod.Spec.Containers[0].Name)
	if err != nil {
		t.Fatal(err)
	}
	ns := strconv.Itoa(pid)
	var rules [][]string
	for _, k := range keep {
		host, port, ok := strings.Cut(k, ":")
		if !ok {
			t.Fatalf("keep %q: want ip:port", k)
		}
		rules = append(rules,
			[]string{"INPUT", "-p", "tcp", "-s", host, "--sport", port, "-j", "ACCEPT"},
			[]string{"OUTPUT", "-p", "tcp", "-d", host, "--dport", port, "-j", "ACCEPT"})
	}
	for _, ip := range cut {
		rules = append(rules, []string{"INPUT", "-s", ip, "-j", "DROP"}, []string{"OUTPUT", "-d", ip, "-j", "DROP"})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, r := range rules {
		if out, err := run(ctx, "nsenter", append([]string{"-t", ns, "-n", "iptables", "-w", "-A"}, r...)...); err != nil {
			t.Fatalf("partitioning %s/%s: %v\n%s", pod.Namespace, pod.Name, err, out)
		}
	}
	healed := false
	heal = func() {
		if healed {
			return
		}
		healed = true
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, chain := range []string{"INPUT", "OUTPUT"} {
			// The container may have exited meanwhile, taking its namespace: nothing to heal then.
			_, _ = run(ctx, "nsenter", "-t", ns, "-n", "iptables", "-w", "-F", chain)
		}
	}
	t.Cleanup(heal)
	return heal
}
