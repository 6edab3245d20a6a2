package informers

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"example.com/cache-operator/engine/api"
)

// Pod is a pod as the pod informer holds it: what a member pass reads.
type Pod struct {
	metav1.ObjectMeta // name, namespace, UID, resourceVersion, deletion timestamp, the labels read, the controller
	IP                string
	Node              string // spec.nodeName: the node it is scheduled on ("" before)
	Ready             bool   // the Ready condition is True
	Running           bool   // every container runs (false while one has exited or waits to restart)
	// InitFailure is the last failure of an init container (the restore's), "<name>: <message>",
	// while the pod is still initializing; "" otherwise.
	InitFailure string
	// Stuck is why a container of the pod cannot start ("<reason>: <message>", a reason of
	// StuckReasons), "" when none waits for such a reason.
	Stuck string
}

// StuckReasons are the reasons a container waits for that it cannot get out of by waiting: its
// image cannot be pulled, it cannot be created, or it keeps crashing.
var StuckReasons = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true, "ErrImageNeverPull": true,
	"CreateContainerError": true, "CreateContainerConfigError": true, "RunContainerError": true,
	"CrashLoopBackOff": true,
}

// stuck returns why a container of statuses cannot start ("" if none is stuck).
func stuck(statuses []corev1.ContainerStatus) string {
	for _, cs := range statuses {
		if w := cs.State.Waiting; w != nil && StuckReasons[w.Reason] {
			msg := w.Reason
			if w.Message != "" {
				msg += ": " + w.Message
			}
			if len(msg) > 200 {
				msg = msg[:197] + "..."
			}
			return msg
		}
	}
	return ""
}

// initFailure is the failure of an init container that exited with an error and has not yet
// succeeded: its termination message, or its exit code.
func initFailure(statuses []corev1.ContainerStatus) string {
	for _, cs := range statuses {
		t := cs.State.Terminated
		if t == nil && cs.State.Running == nil {
			t = cs.LastTerminationState.Terminated // waiting to run again
		}
		if t == nil || t.ExitCode == 0 {
			continue
		}
		msg := t.Message
		if msg == "" {
			msg = fmt.Sprintf("exited with %d (%s)", t.ExitCode, t.Reason)
		}
		return cs.Name + ": " + msg
	}
	return ""
}

// podLabels are the pod labels a member pass reads.
var podLabels = []string{api.LabelInstance, api.LabelRole, api.LabelReadWrite, api.LabelTLS, api.LabelServer, api.LabelShard, "controller-revision-hash"}

// podTransform is the pod informer's transform.
func podTransform(obj interface{}) (interface{}, error) {
	switch pod := obj.(type) {
	case *corev1.Pod:
		return typedMemberPod(pod), nil
	case *unstructured.Unstructured:
		return unstructuredMemberPod(pod), nil
	}
	return obj, nil
}

func podMeta(o metav1.Object) Pod {
	p := Pod{ObjectMeta: metav1.ObjectMeta{
		Name: o.GetName(), Namespace: o.GetNamespace(), UID: o.GetUID(), ResourceVersion: o.GetResourceVersion(),
		DeletionTimestamp: o.GetDeletionTimestamp(),
	}}
	p.Labels = keepLabels(o.GetLabels(), podLabels...)
	if ref := metav1.GetControllerOfNoCopy(o); ref != nil {
		p.OwnerReferences = []metav1.OwnerReference{*ref}
	}
	return p
}

// typedMemberPod reads a pod from the typed (protobuf) informer.
func typedMemberPod(pod *corev1.Pod) *Pod {
	p := podMeta(pod)
	p.IP, p.Node = pod.Status.PodIP, pod.Spec.NodeName
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			p.Ready = c.Status == corev1.ConditionTrue
		}
	}
	p.InitFailure = initFailure(pod.Status.InitContainerStatuses)
	p.Stuck = stuck(pod.Status.ContainerStatuses)
	p.Running = len(pod.Status.ContainerStatuses) > 0
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.State.Running == nil {
			p.Running = false
		}
	}
	return &p
}

// unstructuredMemberPod reads a pod from a dynamic informer.
func unstructuredMemberPod(u *unstructured.Unstructured) *Pod {
	p := podMeta(u)
	p.IP, _, _ = unstructured.NestedString(u.Object, "status", "podIP")
	p.Node, _, _ = unstructured.NestedString(u.Object, "spec", "nodeName")
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]interface{}); ok && m["type"] == string(corev1.PodReady) {
			p.Ready = m["status"] == string(corev1.ConditionTrue)
		}
	}
	p.InitFailure = initFailure(containerStatuses(u, "initContainerStatuses"))
	statuses, _, _ := unstructured.NestedSlice(u.Object, "status", "containerStatuses")
	p.Stuck = stuck(containerStatuses(u, "containerStatuses"))
	p.Running = len(statuses) > 0
	for _, cs := range statuses {
		if m, ok := cs.(map[string]interface{}); ok {
			if _, ok := m["state"].(map[string]interface{})["running"]; !ok {
				p.Running = false
			}
		}
	}
	return &p
}

// containerStatuses reads status.<field> of an unstructured pod (the entries that do not convert
// left out).
func containerStatuses(u *unstructured.Unstructured, field string) []corev1.ContainerStatus {
	raw, _, _ := unstructured.NestedSlice(u.Object, "status", field)
	var out []corev1.ContainerStatus
	for _, r := range raw {
		var cs corev1.ContainerStatus
		if m, ok := r.(map[string]interface{}); ok && runtime.DefaultUnstructuredConverter.FromUnstructured(m, &cs) == nil {
			out = append(out, cs)
		}
	}
	return out
}

// InstanceIndex is the pod informer's index of pods by namespace/<their cache>.
const InstanceIndex = "instance"

// podInstance indexes a pod by namespace/<its cache>.
func podInstance(obj interface{}) ([]string, error) {
	o, ok := obj.(metav1.Object)
	if !ok {
		return nil, nil
	}
	if inst := o.GetLabels()[api.LabelInstance]; inst != "" {
		return []string{o.GetNamespace() + "/" + inst}, nil
	}
	return nil, nil
}

// PodCache returns the key (namespace/name) of the cache a pod (or its tombstone) belongs to, if
// it carries the label.
func PodCache(obj interface{}) (string, bool) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	keys, _ := podInstance(obj)
	if len(keys) == 0 {
		return "", false
	}
	return keys[0], true
}
