package main

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestStatusWriteKeepsLabels: a status write from a copy of the pod older than a label change
// sends only the status, as a patch of the status subresource. (The API server's own behaviour,
// which wrote labels through UpdateStatus, is proven in e2e/nodes, TestProbes.)
func TestStatusWriteKeepsLabels(t *testing.T) {
	ctx := context.Background()
	current := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1", ResourceVersion: "7",
		Labels: map[string]string{"app": "x", "role": "primary"}}}
	client := fake.NewClientset(current)
	stale := current.DeepCopy()
	stale.Labels = map[string]string{"app": "x"} // the provider's copy, from before the role label
	stale.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "198.18.129.9",
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}

	if _, err := (statusOnlyClient{client}).CoreV1().Pods("ns").UpdateStatus(ctx, stale, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var writes []string
	for _, a := range client.Actions() {
		if a.GetVerb() == "get" || a.GetVerb() == "list" || a.GetVerb() == "watch" {
			continue
		}
		writes = append(writes, a.GetVerb()+" "+a.GetSubresource())
		if p, ok := a.(k8stesting.PatchAction); ok {
			if got, want := string(p.GetPatch()), `{"metadata":{"uid":"u1"},"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True","lastProbeTime":null,"lastTransitionTime":null}],"podIP":"198.18.129.9"}}`; got != want {
				t.Errorf("patch:\n got %s\nwant %s", got, want)
			}
		}
	}
	if len(writes) != 1 || writes[0] != "patch status" {
		t.Fatalf("writes %v; want one patch of the status subresource", writes)
	}
	got, err := client.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Labels["role"] != "primary" || got.Status.PodIP != "198.18.129.9" || got.Status.Phase != corev1.PodRunning {
		t.Errorf("after the status write: labels %v, status %s %s; want the role label kept and the new status", got.Labels, got.Status.Phase, got.Status.PodIP)
	}
}
