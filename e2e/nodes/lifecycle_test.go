package nodes

import (
	"context"
	"strings"
	"testing"
	"time"

	"example.com/cache-operator/e2e/framework"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestGracefulTermination(t *testing.T) {
	t.Parallel()
	c := framework.Setup(t)
	ctx := context.Background()
	ns := c.RealNamespace(t, "nodes-term")
	// This container's preStop hook leaves a file that its SIGTERM handler prints: the hook ran
	// first. It then exits after 1 s.
	polite := shellPod("polite", `trap 'cat /tmp/prestop; echo "got SIGTERM"; sleep 1; exit 0' TERM; echo started; while true; do sleep 0.2; done`)
	withTmp(polite)
	polite.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
		Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "echo preStop-ran > /tmp/prestop"}},
	}}
	create(t, c, ns, polite)
	// This one ignores SIGTERM: it must be killed when its 3 s grace period ends, not before.
	stubborn := shellPod("stubborn", `trap '' TERM; echo started; while true; do sleep 0.2; done`)
	stubborn.Spec.TerminationGracePeriodSeconds = ptr[int64](3)
	create(t, c, ns, stubborn)
	waitLog(t, c, ns, "polite", "started")
	waitLog(t, c, ns, "stubborn", "started")

	politeDeleted := time.Now()
	if err := c.Kube.CoreV1().Pods(ns).Delete(ctx, "polite", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 30*time.Second, "polite's log to show SIGTERM before it is gone", func() (bool, string, error) {
		out, err := c.Kubectl(ctx, "logs", "-n", ns, "polite")
		if err != nil {
			return false, out, err
		}
		return strings.Contains(out, "preStop-ran\ngot SIGTERM"), out, nil
	})
	// Once its process has exited, the pod leaves the API server at once, as with the kubelet,
	// not when its 30 s grace period ends.
	politeGone := waitRemoved(t, c, ns, "polite", politeDeleted, 40*time.Second, "to be removed from the API server")
	t.Logf("polite pod (exits 1 s after SIGTERM) gone %s after deletion (grace period 30 s)", politeGone.Round(100*time.Millisecond))
	if politeGone > 10*time.Second {
		t.Errorf("a pod whose process exited 1 s after SIGTERM stayed %s; want it removed once stopped, long before its 30 s grace period", politeGone)
	}

	start := time.Now()
	if err := c.Kube.CoreV1().Pods(ns).Delete(ctx, "stubborn", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	gone := waitRemoved(t, c, ns, "stubborn", start, 30*time.Second, "to be killed after its grace period")
	if gone < 3*time.Second || gone > 15*time.Second {
		t.Errorf("a container ignoring SIGTERM with a 3 s grace period was gone after %s; want between 3 s and 15 s", gone)
	}
	t.Logf("stubborn pod gone %s after deletion (grace period 3 s)", gone.Round(100*time.Millisecond))
}

// TestStoppedNodeGoesNotReady stops a node, so it runs alone; the package's other tests, each in
// a namespace of its own, run side by side after it (t.Parallel).
func TestStoppedNodeGoesNotReady(t *testing.T) {
	c := framework.Setup(t)
	ctx := context.Background()
	ns := c.RealNamespace(t, "nodes-stop")
	p := shellPod("victim", "sleep 3600")
	p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "real-c"}
	create(t, c, ns, p)
	p = waitRunning(t, c, ns, "victim")
	c.StopNode(t, "real-c")
	start := time.Now()
	framework.Eventually(t, 90*time.Second, "node real-c NotReady", func() (bool, string, error) {
		n, err := c.Kube.CoreV1().Nodes().Get(ctx, "real-c", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		st := framework.NodeReady(n)
		return st != corev1.ConditionTrue, "Ready=" + string(st), nil
	})
	t.Logf("real-c NotReady %s after it was stopped", time.Since(start).Round(time.Second))
	// Its pods' processes died with it.
	if left := framework.NodeProcesses(c, "real-c"); len(left) > 0 {
		t.Errorf("processes of real-c's pods still running after the node stopped: %v", left)
	}
}
