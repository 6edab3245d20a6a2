// Package nodes tests the local cluster's real nodes (localcluster/node): pods whose containers run as
// processes under runc, with their security context, volumes, environment, probes, network,
// kubectl streams, lifecycle and the fault helpers the other tests use.
package nodes

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"example.com/cache-operator/e2e/framework"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestSecurityContext(t *testing.T) {
	t.Parallel()
	c := framework.Setup(t)
	ns := c.RealNamespace(t, "nodes-sec")
	create(t, c, ns, shellPod("ids", `echo "uid=$(id -u) gid=$(id -g) groups=$(id -G)"; grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp):' /proc/self/status; echo ok > /probe-file && echo ROOT-WRITABLE || echo ROOT-READONLY; sleep 3600`))
	p := waitPod(t, c, ns, "ids", 90*time.Second, "running on a real node", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	if !strings.HasPrefix(p.Spec.NodeName, "real-") {
		t.Fatalf("pod ran on %q, want a real node", p.Spec.NodeName)
	}
	out := waitLog(t, c, ns, "ids", "ROOT-")
	for _, want := range []string{"uid=1234 gid=1234", "CapInh:\t0000000000000000", "CapPrm:\t0000000000000000",
		"CapEff:\t0000000000000000", "CapBnd:\t0000000000000000", "CapAmb:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2", "ROOT-READONLY"} {
		if !strings.Contains(out, want) {
			t.Errorf("container output lacks %q:\n%s", want, out)
		}
	}

	// An exec probe runs as the container's process does: its user and group, no capability,
	// no_new_privs, its environment, its hostname, its mounts (a file it wrote in its /tmp) and its
	// PID namespace (PID 1 is its own command). The node agent runs probes through nsenter, not
	// runc exec (localcluster/node/enter.go): this is what that path must keep.
	seen := shellPod("probe-ids", "touch /tmp/marker; sleep 3600")
	withTmp(seen)
	seen.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "FROM_SPEC", Value: "yes"}}
	seen.Spec.Containers[0].ReadinessProbe = &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c",
			`{ echo "uid=$(id -u) gid=$(id -g) groups=$(id -G) env=$FROM_SPEC host=$(cat /proc/sys/kernel/hostname) pid1=$(tr '\0' ' ' </proc/1/cmdline)"; ` +
				`grep -E '^(CapPrm|CapEff|NoNewPrivs):' /proc/self/status; test -f /tmp/marker && echo MARKER; } >/tmp/seen.new && mv /tmp/seen.new /tmp/seen`}}},
		PeriodSeconds: 1, FailureThreshold: 1,
	}
	create(t, c, ns, seen)
	waitReady(t, c, ns, "probe-ids")
	probeSaw, err := c.Exec(context.Background(), ns, "probe-ids", "", "cat", "/tmp/seen")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"uid=1234 gid=1234 groups=1234 ", "env=yes ", "host=probe-ids ", "pid1=sh -c touch /tmp/marker; sleep 3600",
		"CapPrm:\t0000000000000000", "CapEff:\t0000000000000000", "NoNewPrivs:\t1", "MARKER"} {
		if !strings.Contains(probeSaw, want) {
			t.Errorf("the exec probe saw no %q:\n%s", want, probeSaw)
		}
	}

	// A container that writes to its read-only root fails.
	pod := shellPod("writes-root", `echo data > /etc/written-by-pod`)
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	create(t, c, ns, pod)
	p = waitPod(t, c, ns, "writes-root", 60*time.Second, "Failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	if term := p.Status.ContainerStatuses[0].State.Terminated; term == nil || term.ExitCode == 0 {
		t.Fatalf("writing to the read-only root: want a non-zero exit, got %s", describe(p))
	}

	// runAsNonRoot with user 0 is refused, as the kubelet refuses it.
	pod = shellPod("root", "sleep 3600")
	pod.Spec.SecurityContext.RunAsUser = ptr[int64](0)
	create(t, c, ns, pod)
	waitPod(t, c, ns, "root", 60*time.Second, "refused (CreateContainerConfigError)", func(p *corev1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Waiting != nil &&
			p.Status.ContainerStatuses[0].State.Waiting.Reason == "CreateContainerConfigError"
	})
}

func TestBadInputFailsVisibly(t *testing.T) {
	t.Parallel()
	c := framework.Setup(t)
	ns := c.RealNamespace(t, "nodes-bad")
	bad := shellPod("nginx", "true")
	bad.Spec.Containers[0].Image = "nginx:1.27"
	create(t, c, ns, bad)
	if msg := waitImagePullError(t, c, ns, "nginx"); !strings.Contains(msg, "image table") {
		t.Errorf("ErrImagePull message does not name the image table: %q", msg)
	}

	host := shellPod("host-network", "sleep 3600")
	host.Spec.HostNetwork = true
	create(t, c, ns, host)
	p := waitPod(t, c, ns, "host-network", 60*time.Second, "Failed as unsupported", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	if p.Status.Reason != "UnsupportedPodSpec" || !strings.Contains(p.Status.Message, "hostNetwork") {
		t.Errorf("hostNetwork pod: want reason UnsupportedPodSpec naming hostNetwork, got %s", describe(p))
	}

	// A container the runtime cannot start is reported as the kubelet reports it: waiting with
	// RunContainerError and runc's error text, a StartError as its last state, a Warning Event
	// Failed, all of it in kubectl describe. Two ways runc fails: the executable does not exist,
	// and the working directory cannot be made.
	for _, tc := range []struct {
		name, want string
		change     func(*corev1.Container)
	}{
		{"no-executable", "no-such-program", func(c *corev1.Container) { c.Command = []string{"/usr/local/bin/no-such-program"} }},
		// runc makes a missing working directory, but not one where a file (the pod's /etc/hostname,
		// mounted by the node) stands.
		{"bad-workdir", "/etc/hostname: not a directory", func(c *corev1.Container) { c.WorkingDir = "/etc/hostname" }},
	} {
		pod := shellPod(tc.name, "sleep 3600")
		tc.change(&pod.Spec.Containers[0])
		create(t, c, ns, pod)
		p := waitPod(t, c, ns, tc.name, 60*time.Second, "waiting with RunContainerError", func(p *corev1.Pod) bool {
			return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Waiting != nil &&
				p.Status.ContainerStatuses[0].State.Waiting.Reason == "RunContainerError"
		})
		cs := p.Status.ContainerStatuses[0]
		if !strings.Contains(cs.State.Waiting.Message, tc.want) {
			t.Errorf("%s: waiting message %q does not carry runc's error about %s", tc.name, cs.State.Waiting.Message, tc.want)
		}
		if l := cs.LastTerminationState.Terminated; l == nil || l.Reason != "StartError" || !strings.Contains(l.Message, tc.want) {
			t.Errorf("%s: last state %+v; want a StartError naming %s", tc.name, cs.LastTerminationState, tc.want)
		}
		framework.Eventually(t, 30*time.Second, "a Warning Event Failed for "+tc.name, func() (bool, string, error) {
			evs, err := c.Kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + tc.name})
			if err != nil {
				return false, "", err
			}
			var seen []string
			for _, e := range evs.Items {
				seen = append(seen, e.Type+" "+e.Reason+": "+e.Message)
				if e.Type == corev1.EventTypeWarning && e.Reason == "Failed" && strings.Contains(e.Message, tc.want) {
					return true, "", nil
				}
			}
			return false, strings.Join(seen, "; "), nil
		})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := c.Kubectl(ctx, "describe", "pod", "-n", ns, tc.name)
		cancel()
		if err != nil {
			t.Fatalf("kubectl describe: %v", err)
		}
		for _, want := range []string{"RunContainerError", "StartError", "Warning  Failed", tc.want} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: kubectl describe lacks %q:\n%s", tc.name, want, out)
			}
		}
		neverRunning(t, c, p, 2)
	}

	// What make up prints when the sample is not Ready (hack/diagnose.sh): each member's state
	// and reason and the pods' Warning Events. Here a "cache" whose member cannot start.
	member := shellPod("blocked-0", "sleep 3600")
	member.Labels = map[string]string{"app.kubernetes.io/instance": "blocked"}
	member.Spec.Containers[0].Command = []string{"/usr/local/bin/redis-server-not-installed"}
	create(t, c, ns, member)
	waitPod(t, c, ns, "blocked-0", 60*time.Second, "waiting with RunContainerError", func(p *corev1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Waiting != nil &&
			p.Status.ContainerStatuses[0].State.Waiting.Reason == "RunContainerError"
	})
	var report string
	framework.Eventually(t, 30*time.Second, "hack/diagnose.sh to report the member and its Warning Event", func() (bool, string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(c.Root, "hack", "diagnose.sh"), ns, "blocked")
		cmd.Env = append(os.Environ(), "KUBECTL="+c.Bin("kubectl"), "KUBECONFIG="+c.Kubeconfig)
		out, err := cmd.CombinedOutput()
		report = string(out)
		if err != nil {
			return false, report, err
		}
		return strings.Contains(report, "blocked-0 Failed"), report, nil
	})
	for _, want := range []string{"ManagedCache " + ns + "/blocked not found", "blocked-0: phase ", "ready False", "waiting RunContainerError",
		"redis-server-not-installed", "last: StartError (exit 128)", "blocked-0 Failed"} {
		if !strings.Contains(report, want) {
			t.Errorf("hack/diagnose.sh lacks %q:\n%s", want, report)
		}
	}

	hp := shellPod("host-path", "sleep 3600")
	hp.Spec.Volumes = []corev1.Volume{{Name: "h", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/etc"}}}}
	create(t, c, ns, hp)
	p = waitPod(t, c, ns, "host-path", 60*time.Second, "Failed as unsupported", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	if !strings.Contains(p.Status.Message, `volume "h"`) {
		t.Errorf("hostPath pod: want a message naming the volume, got %s", describe(p))
	}
}

func TestVolumesAndEnv(t *testing.T) {
	t.Parallel()
	c := framework.Setup(t)
	ctx := context.Background()
	ns := c.RealNamespace(t, "nodes-vol")
	if _, err := c.Kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "s"}, StringData: map[string]string{"key": "first-value"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "cm"}, Data: map[string]string{"color": "blue"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kube.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := func(name string) *corev1.Pod {
		p := shellPod(name, "sleep 3600")
		p.Spec.SecurityContext.FSGroup = ptr[int64](1234)
		p.Spec.Volumes = []corev1.Volume{
			{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: ptr(resource.MustParse("8Mi"))}}},
			{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}},
			{Name: "secret", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s"}}},
			{Name: "info", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
				{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
			}}}},
		}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{
			{Name: "tmp", MountPath: "/tmp"}, {Name: "data", MountPath: "/data"},
			{Name: "secret", MountPath: "/etc/s", ReadOnly: true}, {Name: "info", MountPath: "/etc/info"},
		}
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}
		p.Spec.Containers[0].Env = []corev1.EnvVar{
			{Name: "EARLY", Value: "early-$(COLOR)"}, // a reference to a later variable stays as it is
			{Name: "COLOR", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}, Key: "color"}}},
			{Name: "PLAIN", Value: "plain-$(COLOR)"},
			{Name: "SECRET", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "key"}}},
			{Name: "MY_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
			{Name: "MY_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
			{Name: "MEM_MI", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}}},
		}
		// A projected service account token with the cluster CA, as the API server injects it.
		p.Spec.AutomountServiceAccountToken = ptr(true)
		return p
	}
	create(t, c, ns, pod("vol-1"))
	p := waitRunning(t, c, ns, "vol-1")

	exec := func(pod string, cmd string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := c.Exec(ctx, ns, pod, "", "sh", "-c", cmd)
		if err != nil {
			t.Fatalf("exec %q: %v", cmd, err)
		}
		return strings.TrimSpace(out)
	}
	env := exec("vol-1", "env")
	for _, want := range []string{"EARLY=early-$(COLOR)", "PLAIN=plain-blue", "COLOR=blue", "SECRET=first-value", "MY_IP=" + p.Status.PodIP, "MY_NAME=vol-1", "MEM_MI=64", "KUBERNETES_SERVICE_HOST=", "KUBERNETES_SERVICE_PORT=443"} {
		if !strings.Contains(env, want) {
			t.Errorf("environment lacks %q:\n%s", want, env)
		}
	}
	if got := exec("vol-1", "cat /etc/s/key"); got != "first-value" {
		t.Errorf("secret volume: got %q", got)
	}
	if got := exec("vol-1", "cat /etc/info/labels"); !strings.Contains(got+"\n", `app="vol-1"`+"\n") {
		t.Errorf("downward API volume: got %q", got)
	}
	if got := exec("vol-1", "df -k /tmp | tail -1"); !strings.HasPrefix(got, "tmpfs") || !strings.Contains(got, " 8192 ") {
		t.Errorf("memory emptyDir: want tmpfs of 8192 KiB, df says %q", got)
	}
	if got := exec("vol-1", "echo hi > /tmp/x && cat /tmp/x"); got != "hi" {
		t.Errorf("emptyDir write: got %q", got)
	}
	token := exec("vol-1", "cat /var/run/secrets/kubernetes.io/serviceaccount/token")
	if parts := strings.Split(token, "."); len(parts) != 3 {
		t.Errorf("projected token is not a JWT: %q", token)
	} else if claims, err := base64.RawURLEncoding.DecodeString(parts[1]); err != nil || !strings.Contains(string(claims), `"name":"vol-1"`) {
		t.Errorf("projected token is not bound to the pod: %s (%v)", claims, err)
	}
	if got := exec("vol-1", "head -1 /var/run/secrets/kubernetes.io/serviceaccount/ca.crt; cat /var/run/secrets/kubernetes.io/serviceaccount/namespace"); got != "-----BEGIN CERTIFICATE-----\n"+ns {
		t.Errorf("projected ca.crt and namespace: got %q", got)
	}
	exec("vol-1", "echo persisted > /data/file")

	// A Secret update reaches the mounted file, as the kubelet's sync does.
	if _, err := c.Kube.CoreV1().Secrets(ns).Update(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "s"}, StringData: map[string]string{"key": "second-value"},
	}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 60*time.Second, "the secret volume to show the new value", func() (bool, string, error) {
		got := exec("vol-1", "cat /etc/s/key")
		return got == "second-value", got, nil
	})

	// The PVC's data survives the pod: a new pod with the same claim reads it.
	if err := c.Kube.CoreV1().Pods(ns).Delete(ctx, "vol-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 60*time.Second, "pod vol-1 gone", func() (bool, string, error) {
		_, err := c.Kube.CoreV1().Pods(ns).Get(ctx, "vol-1", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err), nil
	})
	create(t, c, ns, pod("vol-2"))
	waitRunning(t, c, ns, "vol-2")
	if got := exec("vol-2", "cat /data/file"); got != "persisted" {
		t.Errorf("PVC data after the pod was replaced: got %q", got)
	}
}

func TestProbes(t *testing.T) {
	t.Parallel()
	c := framework.Setup(t)
	ctx := context.Background()
	ns := c.RealNamespace(t, "nodes-probe")
	p := shellPod("ready", "sleep 3600")
	withTmp(p)
	p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"test", "-f", "/tmp/ready"}}},
		PeriodSeconds: 1, FailureThreshold: 1,
	}
	p.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "x", ContainerPort: 8080}}
	create(t, c, ns, p)
	if _, err := c.Kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "ready"},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "ready"}, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt(8080)}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	readyEndpoint := func() (bool, string, error) {
		slices, err := c.Kube.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=ready"})
		if err != nil {
			return false, "", err
		}
		var seen []string
		ready := false
		for _, s := range slices.Items {
			for _, e := range s.Endpoints {
				r := e.Conditions.Ready != nil && *e.Conditions.Ready
				seen = append(seen, fmt.Sprintf("%v ready=%v", e.Addresses, r))
				ready = ready || r
			}
		}
		return ready, strings.Join(seen, ", "), nil
	}
	waitPod(t, c, ns, "ready", 60*time.Second, "Running and not Ready", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodRunning && !framework.PodReady(p)
	})
	if ok, seen, _ := readyEndpoint(); ok {
		t.Fatalf("endpoint ready before the readiness probe passed: %s", seen)
	}
	if _, err := c.Exec(ctx, ns, "ready", "", "touch", "/tmp/ready"); err != nil {
		t.Fatal(err)
	}
	waitReady(t, c, ns, "ready")
	framework.Eventually(t, 30*time.Second, "the Service endpoint ready", func() (bool, string, error) { return readyEndpoint() })
	// A label set by someone else (as the operator sets its role label) survives the node's next
	// status write: the node agent patches the status alone.
	if _, err := c.Kube.CoreV1().Pods(ns).Patch(ctx, "ready", types.MergePatchType, []byte(`{"metadata":{"labels":{"role":"primary"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, ns, "ready", "", "rm", "/tmp/ready"); err != nil {
		t.Fatal(err)
	}
	if p := waitPod(t, c, ns, "ready", 30*time.Second, "not Ready again", func(p *corev1.Pod) bool { return !framework.PodReady(p) }); p.Labels["role"] != "primary" {
		t.Errorf("labels after the node's status write: %v; want role=primary kept", p.Labels)
	}
	framework.Eventually(t, 30*time.Second, "the Service endpoint not ready", func() (bool, string, error) {
		ok, seen, err := readyEndpoint()
		return !ok, seen, err
	})

	// An HTTP readiness probe behind a startup probe: python3's file server answers 404 for
	// /ready until the file exists, then 200.
	web := shellPod("web", "mkdir -p /tmp/www && exec python3 -m http.server 8080 --bind 0.0.0.0 --directory /tmp/www")
	withTmp(web)
	web.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}
	web.Spec.Containers[0].StartupProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("http")}},
		PeriodSeconds: 1, FailureThreshold: 30,
	}
	web.Spec.Containers[0].ReadinessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")}},
		PeriodSeconds: 1, FailureThreshold: 1,
	}
	create(t, c, ns, web)
	waitPod(t, c, ns, "web", 60*time.Second, "started (startup probe passed) but not Ready (HTTP 404)", func(p *corev1.Pod) bool {
		cs := p.Status.ContainerStatuses
		return len(cs) == 1 && cs[0].Started != nil && *cs[0].Started && !framework.PodReady(p)
	})
	if _, err := c.Exec(ctx, ns, "web", "", "touch", "/tmp/www/ready"); err != nil {
		t.Fatal(err)
	}
	waitReady(t, c, ns, "web")

	// A failing liveness probe restarts the container; logs --previous shows the earlier run.
	live := shellPod("live", `echo "run started"; sleep 3600`)
	live.Spec.Containers[0].LivenessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt(9999)}},
		PeriodSeconds: 1, FailureThreshold: 2, InitialDelaySeconds: 1,
	}
	live.Spec.TerminationGracePeriodSeconds = ptr[int64](1)
	create(t, c, ns, live)
	waitPod(t, c, ns, "live", 90*time.Second, "restarted by its liveness probe", func(p *corev1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount >= 1
	})
	if prev := logs(t, c, ns, "live", "--previous"); !strings.Contains(prev, "run started") {
		t.Errorf("kubectl logs --previous: got %q", prev)
	}

	// Every status write of the nodes was a patch: an update of pods/status also writes the labels
	// and annotations of the copy it sends, and so reverted those set since (virtual-kubelet's
	// default, kubernetes/kubernetes#92022).
	events, err := c.AuditEvents()
	if err != nil {
		t.Fatal(err)
	}
	writes := map[string]int{}
	for _, e := range events {
		if strings.HasPrefix(e.UserAgent, "node-agent/") && e.ObjectRef != nil && e.ObjectRef.Namespace == ns &&
			e.ObjectRef.Resource == "pods" && e.ObjectRef.Subresource == "status" {
			writes[e.Verb]++
		}
	}
	t.Logf("the nodes' writes of pods/status in %s: %v", ns, writes)
	if writes["patch"] == 0 || len(writes) != 1 {
		t.Errorf("the nodes' writes of pods/status: %v; want patches only", writes)
	}
}

func TestNetwork(t *testing.T) {
	t.Parallel()
	c := framework.Setup(t)
	ctx := context.Background()
	ns := c.RealNamespace(t, "nodes-net")
	server := shellPod("server", "exec redis-server --port 6379 --save '' --appendonly no --protected-mode no")
	server.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "redis", ContainerPort: 6379}}
	create(t, c, ns, server)
	if _, err := c.Kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "server"},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "server"}, Ports: []corev1.ServicePort{{Port: 6379, TargetPort: intstr.FromString("redis")}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	create(t, c, ns, shellPod("client", "sleep 3600"))
	srv := waitRunning(t, c, ns, "server")
	waitRunning(t, c, ns, "client")
	ip := net.ParseIP(srv.Status.PodIP)
	if ip == nil || !strings.HasPrefix(srv.Status.PodIP, "198.18.") {
		t.Fatalf("pod IP %q is not in 198.18.0.0/15", srv.Status.PodIP)
	}
	svc, err := c.Kube.CoreV1().Services(ns).Get(ctx, "server", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(svc.Spec.ClusterIP, "198.19.") {
		t.Fatalf("ClusterIP %q is not in 198.18.0.0/15", svc.Spec.ClusterIP)
	}
	ping := func(what string, cmd ...string) {
		t.Helper()
		framework.Eventually(t, 60*time.Second, what, func() (bool, string, error) {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			out, err := c.Exec(cctx, ns, "client", "", cmd...)
			return strings.TrimSpace(out) == "PONG", out, err
		})
	}
	ping("pod to pod by IP", "redis-cli", "-h", srv.Status.PodIP, "ping")
	ping("pod to ClusterIP", "redis-cli", "-h", svc.Spec.ClusterIP, "ping")
	ping("pod to Service DNS name", "redis-cli", "-h", "server", "ping")
	ping("pod to fully qualified Service name", "redis-cli", "-h", "server."+ns+".svc.cluster.local", "ping")
	hostPing := func(what, host string) {
		t.Helper()
		framework.Eventually(t, 60*time.Second, what, func() (bool, string, error) {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			out, err := exec.CommandContext(cctx, "redis-cli", "-h", host, "ping").CombinedOutput()
			return strings.TrimSpace(string(out)) == "PONG", string(out), err
		})
	}
	hostPing("host to pod by IP", srv.Status.PodIP)
	hostPing("host to ClusterIP", svc.Spec.ClusterIP)

	// A cut network makes the pod unreachable; restored, it answers again.
	c.CutNetwork(t, srv)
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	out, err := exec.CommandContext(cctx, "redis-cli", "-h", srv.Status.PodIP, "ping").CombinedOutput()
	cancel()
	if err == nil && strings.TrimSpace(string(out)) == "PONG" {
		t.Fatalf("pod answered with its network cut")
	}
	c.RestoreNetwork(t, srv)
	hostPing("host to pod after the network is restored", srv.Status.PodIP)
}

func TestKubectlStreams(t *testing.T) {
	t.Parallel()
	c := framework.Setup(t)
	ctx := context.Background()
	ns := c.RealNamespace(t, "nodes-kubectl")
	// The script prints what a test drops into /tmp/say, so that the test can make it write to its
	// stdout at a moment of its choosing.
	p := shellPod("streams", `echo "hello from the pod"; (while true; do if [ -f /tmp/say ]; then cat /tmp/say; rm -f /tmp/say; fi; sleep 0.2; done) & exec redis-server --port 6379 --save '' --appendonly no --protected-mode no`)
	withTmp(p)
	create(t, c, ns, p)
	waitRunning(t, c, ns, "streams")
	waitLog(t, c, ns, "streams", "hello from the pod")
	if out, err := c.Exec(ctx, ns, "streams", "", "redis-cli", "ping"); err != nil || strings.TrimSpace(out) != "PONG" {
		t.Fatalf("kubectl exec redis-cli ping: %q %v", out, err)
	}
	// The exit status of the command reaches kubectl.
	_, err := c.Exec(ctx, ns, "streams", "", "sh", "-c", "exit 3")
	if err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("kubectl exec of a failing command: want exit status 3, got %v", err)
	}
	// Port-forward: a local port on 127.0.0.1 reaches the pod's port.
	port := freePort(t)
	pfCtx, stop := context.WithCancel(ctx)
	defer stop()
	pf := c.KubectlCmd(pfCtx, "port-forward", "-n", ns, "pod/streams", fmt.Sprintf("%d:6379", port))
	if err := pf.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stop(); _ = pf.Wait() }()
	framework.Eventually(t, 30*time.Second, "redis-cli through kubectl port-forward", func() (bool, string, error) {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		out, err := exec.CommandContext(cctx, "redis-cli", "-h", "127.0.0.1", "-p", strconv.Itoa(port), "ping").CombinedOutput()
		return strings.TrimSpace(string(out)) == "PONG", string(out), err
	})
	// logs -f follows new output: a line written to the container's stdout after the stream
	// opened arrives on it.
	follow := c.KubectlCmd(pfCtx, "logs", "-f", "-n", ns, "streams")
	var followed syncBuffer
	follow.Stdout = &followed
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 20*time.Second, "logs -f to show the earlier output", func() (bool, string, error) {
		return strings.Contains(followed.String(), "hello from the pod"), followed.String(), nil
	})
	if _, err := c.Exec(ctx, ns, "streams", "", "sh", "-c", "echo followed-line > /tmp/say"); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 20*time.Second, "logs -f to show a new line", func() (bool, string, error) {
		return strings.Contains(followed.String(), "followed-line"), followed.String(), nil
	})

	// A crash (SIGKILL) restarts the container with exit code 137 recorded.
	c.CrashContainer(t, get(t, c, ns, "streams"), "main")
	waitPod(t, c, ns, "streams", 60*time.Second, "restarted after a crash", func(p *corev1.Pod) bool {
		cs := p.Status.ContainerStatuses
		return len(cs) == 1 && cs[0].RestartCount >= 1 && cs[0].LastTerminationState.Terminated != nil && cs[0].LastTerminationState.Terminated.ExitCode == 137
	})
}

// syncBuffer is a bytes.Buffer safe for a command writing while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
