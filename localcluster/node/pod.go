package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// podRuntime is one pod on this node: its sandbox (network namespace, /etc files, volumes) and a
// supervisor per container. Its status is what virtual-kubelet publishes.
type podRuntime struct {
	p   *Provider
	cfg Config
	uid types.UID
	dir string

	mu    sync.Mutex
	pod   *corev1.Pod
	phase corev1.PodPhase
	// tornDown is set once a deleted pod's containers have exited and its volumes, network and
	// files are gone: its phase is then terminal, which tells virtual-kubelet to remove the pod
	// from the API server at once instead of after the whole grace period.
	tornDown    bool
	reason, msg string
	podIP       net.IP
	netns       string
	startTime   *metav1.Time
	sandboxOK   bool
	initDone    bool
	containers  []*containerState // init containers first, then regular ones
	conditions  map[corev1.PodConditionType]*corev1.PodCondition
	volumes     *volumeSet

	terminating chan struct{} // closed when the pod is being deleted
	killed      chan struct{} // closed when everything must stop at once (agent shutdown)
	stop        chan struct{} // closed on either
	termOnce    sync.Once
	killOnce    sync.Once
	stopOnce    sync.Once
	graceUntil  time.Time
}

func newPodRuntime(p *Provider, pod *corev1.Pod) *podRuntime {
	r := &podRuntime{
		p: p, cfg: p.cfg, uid: pod.UID, pod: pod,
		dir:         filepath.Join(p.cfg.StateDir, "pods", string(pod.UID)),
		phase:       corev1.PodPending,
		conditions:  map[corev1.PodConditionType]*corev1.PodCondition{},
		terminating: make(chan struct{}),
		killed:      make(chan struct{}),
		stop:        make(chan struct{}),
	}
	for i := range pod.Spec.InitContainers {
		r.containers = append(r.containers, newContainerState(&pod.Spec.InitContainers[i], true))
	}
	for i := range pod.Spec.Containers {
		r.containers = append(r.containers, newContainerState(&pod.Spec.Containers[i], false))
	}
	return r
}

// unsupported names the first field of a pod that this node cannot honour, or returns "".
func unsupported(pod *corev1.Pod) string {
	s := &pod.Spec
	switch {
	case s.HostNetwork:
		return "spec.hostNetwork is not supported: every pod gets its own network namespace"
	case s.HostPID:
		return "spec.hostPID is not supported"
	case s.HostIPC:
		return "spec.hostIPC is not supported"
	case s.ShareProcessNamespace != nil && *s.ShareProcessNamespace:
		return "spec.shareProcessNamespace is not supported: each container has its own PID namespace"
	case len(s.EphemeralContainers) > 0:
		return "spec.ephemeralContainers are not supported"
	case len(s.ReadinessGates) > 0:
		return "spec.readinessGates are not supported"
	case s.RuntimeClassName != nil && *s.RuntimeClassName != "":
		return "spec.runtimeClassName is not supported: the only runtime is runc"
	case s.OS != nil && s.OS.Name != corev1.Linux:
		return fmt.Sprintf("spec.os.name %q is not supported", s.OS.Name)
	}
	if sc := s.SecurityContext; sc != nil {
		if sc.SELinuxOptions != nil {
			return "spec.securityContext.seLinuxOptions is not supported (no SELinux on this machine)"
		}
		if sc.AppArmorProfile != nil && sc.AppArmorProfile.Type != corev1.AppArmorProfileTypeUnconfined {
			return "spec.securityContext.appArmorProfile is not supported (no AppArmor on this machine)"
		}
		if len(sc.Sysctls) > 0 {
			return "spec.securityContext.sysctls are not supported"
		}
		if sc.SeccompProfile != nil && sc.SeccompProfile.Type == corev1.SeccompProfileTypeLocalhost {
			return "spec.securityContext.seccompProfile type Localhost is not supported (RuntimeDefault and Unconfined are)"
		}
	}
	for i := range s.Volumes {
		v := &s.Volumes[i]
		if !volumeSupported(v) {
			return fmt.Sprintf("volume %q: only emptyDir, persistentVolumeClaim, secret, configMap, projected and downwardAPI volumes are supported", v.Name)
		}
	}
	all := append(append([]corev1.Container{}, s.InitContainers...), s.Containers...)
	for i := range all {
		c := &all[i]
		where := "container " + c.Name
		if c.Stdin || c.TTY {
			return where + ": stdin and tty are not supported (use kubectl exec)"
		}
		if c.RestartPolicy != nil {
			return where + ": sidecar containers (restartPolicy on a container) are not supported"
		}
		for _, d := range c.VolumeDevices {
			return fmt.Sprintf("%s: volumeDevices (%s) are not supported", where, d.Name)
		}
		for _, p := range c.Ports {
			if p.HostPort != 0 {
				return fmt.Sprintf("%s: hostPort %d is not supported", where, p.HostPort)
			}
		}
		for _, m := range c.VolumeMounts {
			if m.MountPropagation != nil && *m.MountPropagation != corev1.MountPropagationNone {
				return fmt.Sprintf("%s: mountPropagation %s is not supported", where, *m.MountPropagation)
			}
			if m.SubPathExpr != "" {
				return where + ": subPathExpr is not supported"
			}
		}
		for _, pr := range []*corev1.Probe{c.StartupProbe, c.ReadinessProbe, c.LivenessProbe} {
			if pr != nil && pr.GRPC != nil {
				return where + ": gRPC probes are not supported (exec, httpGet and tcpSocket are)"
			}
		}
		if sc := c.SecurityContext; sc != nil {
			switch {
			case sc.Privileged != nil && *sc.Privileged:
				return where + ": privileged containers are not supported"
			case sc.SELinuxOptions != nil:
				return where + ": seLinuxOptions is not supported"
			case sc.AppArmorProfile != nil && sc.AppArmorProfile.Type != corev1.AppArmorProfileTypeUnconfined:
				return where + ": appArmorProfile is not supported"
			case sc.ProcMount != nil && *sc.ProcMount != corev1.DefaultProcMount:
				return where + ": procMount other than Default is not supported"
			case sc.SeccompProfile != nil && sc.SeccompProfile.Type == corev1.SeccompProfileTypeLocalhost:
				return where + ": seccompProfile type Localhost is not supported"
			}
		}
	}
	return ""
}

// run is the pod's life: sandbox, volumes, init containers, containers, then teardown.
func (r *podRuntime) run() {
	r.mu.Lock()
	now := metav1.Now()
	r.startTime = &now
	r.setCondition(corev1.PodScheduled, true, "", "")
	r.mu.Unlock()
	defer r.teardown()

	if why := unsupported(r.pod); why != "" {
		klog.InfoS("Refusing pod", "pod", klog.KObj(r.pod), "reason", why)
		r.mu.Lock()
		r.phase, r.reason, r.msg = corev1.PodFailed, "UnsupportedPodSpec", "node "+r.cfg.NodeName+": "+why
		for _, c := range r.containers {
			c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "UnsupportedPodSpec", Message: why}}
		}
		r.mu.Unlock()
		r.publish()
		<-r.stopped()
		return
	}
	r.publish()

	if !r.retry("sandbox", r.setupSandbox) {
		return
	}
	r.mu.Lock()
	r.sandboxOK = true
	r.setCondition(corev1.PodReadyToStartContainers, true, "", "")
	r.mu.Unlock()
	r.publish()

	if !r.retry("volumes", r.setupVolumes) {
		return
	}
	go r.volumes.refreshLoop(r.stoppedCtx())

	for _, c := range r.containers {
		if !c.init {
			continue
		}
		if !r.runInit(c) {
			return
		}
	}
	r.mu.Lock()
	r.initDone = true
	r.mu.Unlock()
	r.publish()

	var wg sync.WaitGroup
	for _, c := range r.containers {
		if c.init {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.supervise(c)
		}()
	}
	wg.Wait()
	<-r.stopped()
}

// stopped is closed when the pod is being deleted or killed.
func (r *podRuntime) stopped() <-chan struct{} { return r.stop }

func (r *podRuntime) stoppedCtx() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-r.stop
		cancel()
	}()
	return ctx
}

// removeCgroups removes a pod's cgroup folders (runc removes each container's own on delete).
func removeCgroups(path string) {
	dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", path))
	for _, d := range dirs {
		_ = os.Remove(d)
	}
}

func (r *podRuntime) isStopping() bool {
	select {
	case <-r.stop:
		return true
	default:
		return false
	}
}

// retry runs step until it succeeds or the pod stops; failures show as the containers' waiting
// message (ContainerCreating), as the kubelet shows a FailedMount.
func (r *podRuntime) retry(what string, step func(context.Context) error) bool {
	backoff := 250 * time.Millisecond // a claim binds within a second or two: look again soon
	ctx := r.stoppedCtx()
	for {
		err := step(ctx)
		if err == nil {
			return true
		}
		klog.InfoS("Pod setup step failed; retrying", "pod", klog.KObj(r.pod), "step", what, "err", err.Error())
		r.mu.Lock()
		for _, c := range r.containers {
			if c.state.Waiting != nil {
				c.state.Waiting.Message = what + ": " + err.Error()
			}
		}
		r.mu.Unlock()
		r.publish()
		select {
		case <-r.stopped():
			return false
		case <-time.After(backoff):
		}
		if backoff < 8*time.Second {
			backoff *= 2
		}
	}
}

// setupSandbox allocates the pod's IP, creates its network namespace and writes /etc files.
func (r *podRuntime) setupSandbox(ctx context.Context) error {
	if r.netns == "" {
		ip, err := r.cfg.IPAM.Allocate(r.uid)
		if err != nil {
			return err
		}
		ns, err := SetupPodNetwork(ctx, r.cfg, r.uid, ip)
		if err != nil {
			r.cfg.IPAM.Release(r.uid)
			return err
		}
		r.mu.Lock()
		r.podIP, r.netns = ip, ns
		r.mu.Unlock()
		if err := os.MkdirAll(r.dir, 0o755); err != nil {
			return err
		}
		// CleanupNode finds the namespace of a pod left by a crash through this folder.
		if err := os.WriteFile(filepath.Join(r.dir, "netns"), []byte(ns), 0o644); err != nil {
			return err
		}
	}
	return r.writeEtc()
}

func (r *podRuntime) setupVolumes(ctx context.Context) error {
	if r.volumes == nil {
		r.volumes = newVolumeSet(r)
	}
	return r.volumes.setup(ctx)
}

// update takes the pod's new metadata from the API (labels and annotations for the downward API,
// a shorter deletion grace period).
func (r *podRuntime) update(pod *corev1.Pod) {
	r.mu.Lock()
	r.pod.Labels, r.pod.Annotations = pod.Labels, pod.Annotations
	r.mu.Unlock()
}

// terminate starts the graceful stop of every container.
func (r *podRuntime) terminate(pod *corev1.Pod) {
	grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
	if r.pod.Spec.TerminationGracePeriodSeconds != nil {
		grace = *r.pod.Spec.TerminationGracePeriodSeconds
	}
	if pod.DeletionGracePeriodSeconds != nil {
		grace = *pod.DeletionGracePeriodSeconds
	}
	r.termOnce.Do(func() {
		klog.InfoS("Stopping pod", "pod", klog.KObj(pod), "gracePeriod", grace)
		r.mu.Lock()
		r.graceUntil = time.Now().Add(time.Duration(grace) * time.Second)
		r.pod.DeletionTimestamp, r.pod.DeletionGracePeriodSeconds = pod.DeletionTimestamp, pod.DeletionGracePeriodSeconds
		r.mu.Unlock()
		close(r.terminating)
		r.stopOnce.Do(func() { close(r.stop) })
	})
}

// kill stops every container at once with SIGKILL (the agent is shutting down).
func (r *podRuntime) kill() {
	r.killOnce.Do(func() { close(r.killed) })
	r.stopOnce.Do(func() { close(r.stop) })
}

// teardown runs once every container has exited: volumes, network, files; then the final status.
func (r *podRuntime) teardown() {
	<-r.stopped()
	for _, c := range r.containers {
		c.waitExited()
	}
	if r.volumes != nil {
		r.volumes.teardown()
	}
	unmountUnder(r.dir)
	TeardownPodNetwork(r.cfg, r.uid)
	r.cfg.IPAM.Release(r.uid)
	removeCgroups(r.cfg.CgroupParent + "/" + string(r.uid))
	if err := os.RemoveAll(r.dir); err != nil {
		klog.ErrorS(err, "Removing the pod's folder", "pod", klog.KObj(r.pod))
	}
	r.mu.Lock()
	r.tornDown = true
	for _, c := range r.containers {
		if c.state.Terminated == nil {
			c.state = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 0, Reason: "Completed", Message: "pod deleted before the container ran", FinishedAt: metav1.Now(),
			}}
		}
		c.ready = false
	}
	r.mu.Unlock()
	klog.InfoS("Pod stopped", "pod", klog.KObj(r.pod))
	select {
	case <-r.killed:
		// The agent is going away: no status is published for a pod that is not deleted.
		return
	default:
		r.publish()
	}
	select {
	case <-r.terminating:
		// As the kubelet does once a deleted pod is stopped and cleaned up: remove it from the API
		// server now (virtual-kubelet alone would wait out the whole grace period).
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		opts := metav1.NewDeleteOptions(0)
		opts.Preconditions = metav1.NewUIDPreconditions(string(r.uid))
		err := r.cfg.Client.CoreV1().Pods(r.pod.Namespace).Delete(ctx, r.pod.Name, *opts)
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			klog.ErrorS(err, "Removing the stopped pod from the API server; virtual-kubelet will after its grace period", "pod", klog.KObj(r.pod))
		}
	default:
	}
}

// setCondition records a pod condition; lastTransitionTime changes only with the status.
// Call with r.mu held.
func (r *podRuntime) setCondition(t corev1.PodConditionType, ok bool, reason, msg string) {
	status := corev1.ConditionFalse
	if ok {
		status = corev1.ConditionTrue
	}
	c := r.conditions[t]
	if c != nil && c.Status == status && c.Reason == reason && c.Message == msg {
		return
	}
	now := metav1.Now()
	if c == nil || c.Status != status {
		c = &corev1.PodCondition{Type: t, LastTransitionTime: now}
	}
	c.Status, c.Reason, c.Message, c.LastProbeTime = status, reason, msg, metav1.Time{}
	r.conditions[t] = c
}

// snapshot is the pod with its current status.
func (r *podRuntime) snapshot() *corev1.Pod {
	r.mu.Lock()
	defer r.mu.Unlock()
	pod := r.pod.DeepCopy()
	pod.Status = r.statusLocked()
	return pod
}

func (r *podRuntime) publish() { r.p.publish(r.snapshot()) }

// statusLocked computes the pod status from the containers' states. Call with r.mu held.
func (r *podRuntime) statusLocked() corev1.PodStatus {
	st := corev1.PodStatus{
		Phase:     r.phase,
		Reason:    r.reason,
		Message:   r.msg,
		StartTime: r.startTime,
		QOSClass:  r.pod.Status.QOSClass,
	}
	if host := nodeInternalIP(r.cfg.Node); host != "" {
		st.HostIP = host
		st.HostIPs = []corev1.HostIP{{IP: host}}
	}
	if r.podIP != nil {
		st.PodIP = r.podIP.String()
		st.PodIPs = []corev1.PodIP{{IP: st.PodIP}}
	}
	// A container is done when it exited and the restart policy will not start it again (or the
	// pod was deleted and torn down, as the kubelet gives a deleted pod a terminal phase); only
	// then may the pod's phase be terminal (virtual-kubelet stops publishing a Failed or Succeeded
	// pod's status, as the API server expects of a terminal phase).
	policy := r.pod.Spec.RestartPolicy
	allReady, allDone, anyFailed := true, true, false
	started, regular := 0, 0
	for _, c := range r.containers {
		cs := c.statusLocked()
		if c.init {
			st.InitContainerStatuses = append(st.InitContainerStatuses, cs)
			continue
		}
		regular++
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
		if !cs.Ready {
			allReady = false
		}
		if c.everStarted {
			started++
		}
		term := cs.State.Terminated
		done := term != nil && (r.tornDown || policy == corev1.RestartPolicyNever || (policy == corev1.RestartPolicyOnFailure && term.ExitCode == 0))
		if !done {
			allDone = false
		} else if term.ExitCode != 0 {
			anyFailed = true
		}
	}
	switch {
	case r.phase == corev1.PodFailed && r.reason != "":
		st.Phase = corev1.PodFailed
	case !r.initDone || started == 0:
		st.Phase = corev1.PodPending
	case allDone && regular > 0 && anyFailed:
		st.Phase = corev1.PodFailed
	case allDone && regular > 0:
		st.Phase = corev1.PodSucceeded
	default:
		st.Phase = corev1.PodRunning
	}
	ready := allReady && r.initDone && regular > 0
	notReadyMsg := ""
	if !ready {
		var names []string
		for _, c := range r.containers {
			if !c.init && !c.ready {
				names = append(names, c.spec.Name)
			}
		}
		notReadyMsg = fmt.Sprintf("containers with unready status: [%s]", strings.Join(names, " "))
	}
	reason := ""
	if !ready {
		reason = "ContainersNotReady"
	}
	r.setCondition(corev1.PodInitialized, r.initDone, map[bool]string{true: "", false: "ContainersNotInitialized"}[r.initDone], "")
	r.setCondition(corev1.ContainersReady, ready, reason, notReadyMsg)
	r.setCondition(corev1.PodReady, ready, reason, notReadyMsg)
	r.setCondition(corev1.PodReadyToStartContainers, r.sandboxOK, "", "")
	for _, t := range []corev1.PodConditionType{corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.PodReady, corev1.ContainersReady, corev1.PodScheduled} {
		if c := r.conditions[t]; c != nil {
			st.Conditions = append(st.Conditions, *c)
		}
	}
	return st
}

func nodeInternalIP(n *corev1.Node) string {
	if n == nil {
		return ""
	}
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}
