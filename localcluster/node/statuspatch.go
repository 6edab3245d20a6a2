package main

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
)

// statusOnlyClient is the client given to virtual-kubelet: its pods' UpdateStatus becomes a patch
// of the status subresource that carries only the status (and the pod's UID as a precondition).
//
// virtual-kubelet writes a pod's status with UpdateStatus of the provider's copy of the pod, with
// the resourceVersion of its own cache (node/pod.go, updatePodStatus). A pod's status subresource
// also writes labels and annotations (kubernetes/kubernetes#92022), so a label set by someone
// else between the provider's copy and the status write was reverted: the operator's role label,
// for one, which removed the primary from its read-write Service. The kubelet patches the status
// for the same reason (virtual-kubelet/virtual-kubelet#976, still open).
type statusOnlyClient struct{ kubernetes.Interface }

func (c statusOnlyClient) CoreV1() corev1client.CoreV1Interface {
	return statusOnlyCoreV1{c.Interface.CoreV1()}
}

type statusOnlyCoreV1 struct{ corev1client.CoreV1Interface }

func (c statusOnlyCoreV1) Pods(namespace string) corev1client.PodInterface {
	return statusOnlyPods{c.CoreV1Interface.Pods(namespace)}
}

type statusOnlyPods struct{ corev1client.PodInterface }

// UpdateStatus writes pod.Status, and nothing of pod's metadata, to the pod named pod.Name if its
// UID is still pod.UID. A status the provider no longer sets is not cleared, which a kubelet's
// patch would not do either for the fields a node owns all of (phase, conditions, IPs, container
// statuses: they are always sent whole).
func (p statusOnlyPods) UpdateStatus(ctx context.Context, pod *corev1.Pod, opts metav1.UpdateOptions) (*corev1.Pod, error) {
	patch, err := statusPatch(pod)
	if err != nil {
		return nil, err
	}
	return p.Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: opts.FieldManager, DryRun: opts.DryRun}, "status")
}

// statusPatch is the merge patch statusOnlyPods sends: the UID (a precondition: the API server
// refuses to change it) and the whole status.
func statusPatch(pod *corev1.Pod) ([]byte, error) {
	patch, err := json.Marshal(map[string]interface{}{
		"metadata": map[string]interface{}{"uid": pod.UID},
		"status":   pod.Status,
	})
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s: encoding the status patch: %w", pod.Namespace, pod.Name, err)
	}
	return patch, nil
}
