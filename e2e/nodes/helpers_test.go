package nodes

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"example.com/cache-operator/e2e/framework"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func ptr[T any](v T) *T { return &v }

// shellPod is a pod running script under sh from the host's /usr (image busybox in the node's
// image table), hardened as the operator's pods are unless the test changes it.
func shellPod(name, script string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr[int64](5),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr(true),
				RunAsUser:      ptr[int64](1234),
				RunAsGroup:     ptr[int64](1234),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:    "main",
				Image:   "busybox:1.36",
				Command: []string{"sh", "-c", script},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr(false),
					ReadOnlyRootFilesystem:   ptr(true),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
}

// withTmp gives a pod's first container a writable /tmp (an emptyDir): its root is read-only.
func withTmp(p *corev1.Pod) {
	p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "tmp", MountPath: "/tmp"})
}

func create(t *testing.T, c *framework.Cluster, ns string, pod *corev1.Pod) {
	t.Helper()
	if _, err := c.Kube.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s/%s: %v", ns, pod.Name, err)
	}
}

func get(t *testing.T, c *framework.Cluster, ns, name string) *corev1.Pod {
	t.Helper()
	p, err := c.Kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("getting pod %s/%s: %v", ns, name, err)
	}
	return p
}

func describe(p *corev1.Pod) string {
	var b strings.Builder
	fmt.Fprintf(&b, "phase=%s node=%s ip=%s ready=%v", p.Status.Phase, p.Spec.NodeName, p.Status.PodIP, framework.PodReady(p))
	for _, cs := range p.Status.ContainerStatuses {
		fmt.Fprintf(&b, " [%s restarts=%d", cs.Name, cs.RestartCount)
		switch {
		case cs.State.Waiting != nil:
			fmt.Fprintf(&b, " waiting %s: %s", cs.State.Waiting.Reason, cs.State.Waiting.Message)
		case cs.State.Running != nil:
			b.WriteString(" running")
		case cs.State.Terminated != nil:
			fmt.Fprintf(&b, " terminated %s exit=%d", cs.State.Terminated.Reason, cs.State.Terminated.ExitCode)
		}
		b.WriteString("]")
	}
	if p.Status.Reason != "" {
		fmt.Fprintf(&b, " reason=%s: %s", p.Status.Reason, p.Status.Message)
	}
	return b.String()
}

// waitPod polls a pod until cond holds.
func waitPod(t *testing.T, c *framework.Cluster, ns, name string, timeout time.Duration, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var last *corev1.Pod
	framework.Eventually(t, timeout, fmt.Sprintf("pod %s/%s %s", ns, name, what), func() (bool, string, error) {
		p, err := c.Kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		last = p
		return cond(p), describe(p), nil
	})
	return last
}

// waitRemoved waits until the pod is gone from the API server and returns how long after since.
func waitRemoved(t *testing.T, c *framework.Cluster, ns, name string, since time.Time, timeout time.Duration, what string) time.Duration {
	t.Helper()
	var gone time.Duration
	framework.Eventually(t, timeout, "pod "+name+" "+what, func() (bool, string, error) {
		p, err := c.Kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			gone = time.Since(since)
			return true, "gone", nil
		}
		if err != nil {
			return false, "", err
		}
		return false, describe(p), nil
	})
	return gone
}

// neverRunning watches a pod whose container cannot start through the given number of further
// attempts (restarts): no status in between may say Running, as the kubelet never does for a
// process that was not started.
func neverRunning(t *testing.T, c *framework.Cluster, p *corev1.Pod, attempts int32) {
	t.Helper()
	from := p.Status.ContainerStatuses[0].RestartCount
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	w, err := c.Kube.CoreV1().Pods(p.Namespace).Watch(ctx, metav1.ListOptions{
		FieldSelector: "metadata.name=" + p.Name, ResourceVersion: p.ResourceVersion,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	seen := 0
	for ev := range w.ResultChan() {
		q, ok := ev.Object.(*corev1.Pod)
		if !ok || len(q.Status.ContainerStatuses) != 1 {
			continue
		}
		seen++
		cs := q.Status.ContainerStatuses[0]
		if cs.State.Running != nil {
			t.Fatalf("%s: a container runc could not start shown Running (restart %d): %s", p.Name, cs.RestartCount, describe(q))
		}
		if cs.RestartCount >= from+attempts {
			t.Logf("%s: %d statuses over %d more attempts, none Running", p.Name, seen, attempts)
			return
		}
	}
	t.Fatalf("%s: fewer than %d more attempts in 45 s (%d statuses seen, restart count from %d)", p.Name, attempts, seen, from)
}

func waitRunning(t *testing.T, c *framework.Cluster, ns, name string) *corev1.Pod {
	t.Helper()
	return waitPod(t, c, ns, name, 90*time.Second, "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
}

func waitReady(t *testing.T, c *framework.Cluster, ns, name string) *corev1.Pod {
	t.Helper()
	return waitPod(t, c, ns, name, 90*time.Second, "Ready", framework.PodReady)
}

func logs(t *testing.T, c *framework.Cluster, ns, name string, extra ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := c.Kubectl(ctx, append([]string{"logs", "-n", ns, name}, extra...)...)
	if err != nil {
		t.Fatalf("kubectl logs: %v", err)
	}
	return out
}

func waitLog(t *testing.T, c *framework.Cluster, ns, name, want string) string {
	t.Helper()
	var out string
	framework.Eventually(t, 60*time.Second, fmt.Sprintf("log of %s/%s to contain %q", ns, name, want), func() (bool, string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		o, err := c.Kubectl(ctx, "logs", "-n", ns, name)
		out = o
		return strings.Contains(o, want), o, err
	})
	return out
}

// waitImagePullError waits until the pod's only container waits with ErrImagePull and returns its
// message.
func waitImagePullError(t *testing.T, c *framework.Cluster, ns, name string) string {
	t.Helper()
	p := waitPod(t, c, ns, name, 60*time.Second, "Waiting ErrImagePull", func(p *corev1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Waiting != nil &&
			p.Status.ContainerStatuses[0].State.Waiting.Reason == "ErrImagePull"
	})
	return p.Status.ContainerStatuses[0].State.Waiting.Message
}
