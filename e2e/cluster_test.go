// Package e2e holds the end-to-end tests that run against the local test cluster. This file
// proves the cluster itself is fit for them: a real 1.37 control plane, Ready nodes, bound
// volumes, garbage collection and an audit log.
package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"example.com/cache-operator/e2e/framework"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestClusterVersionAndNodes(t *testing.T) {
	c := framework.Setup(t)
	v, err := c.Kube.Discovery().ServerVersion()
	if err != nil {
		t.Fatalf("server version: %v", err)
	}
	if !strings.HasPrefix(v.GitVersion, "v1.37.") {
		t.Fatalf("server reports %q, want v1.37.x", v.GitVersion)
	}
	zones := map[string]bool{}
	// Three KWOK nodes (type=kwok, tainted) and three real nodes, one of each per zone.
	framework.Eventually(t, time.Minute, "6 Ready nodes: 3 KWOK, 3 real", func() (bool, string, error) {
		nodes, err := c.Kube.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		var seen []string
		ready, real, kwok := 0, 0, 0
		for _, n := range nodes.Items {
			zones[n.Labels["topology.kubernetes.io/zone"]] = true
			switch n.Labels["type"] {
			case "real":
				real++
			case "kwok":
				kwok++
				if len(n.Spec.Taints) == 0 {
					return false, "", fmt.Errorf("KWOK node %s is not tainted: pods would land on it", n.Name)
				}
			}
			status := "NotReady"
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					status = "Ready"
					ready++
				}
			}
			seen = append(seen, n.Name+"="+status)
		}
		return real == 3 && kwok == 3 && ready == 6, strings.Join(seen, ","), nil
	})
	for _, z := range []string{"a", "b", "c"} {
		if !zones[z] {
			t.Errorf("no node in zone %q (zones seen: %v)", z, zones)
		}
	}
}

func TestStatefulSetWithVolumesBecomesReady(t *testing.T) {
	c := framework.Setup(t)
	ctx := context.Background()
	ns := c.Namespace(t, "sts")
	labels := map[string]string{"app": "probe"}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas:    ptr.To[int32](3),
			ServiceName: "probe",
			Selector:    &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "main", Image: "registry.invalid/probe:1",
					VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
				}}},
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceStorage: resource.MustParse("1Gi"),
					}},
				},
			}},
		},
	}
	if _, err := c.Kube.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating StatefulSet: %v", err)
	}
	framework.Eventually(t, 2*time.Minute, "3 ready replicas and 3 Bound claims", func() (bool, string, error) {
		got, err := c.Kube.AppsV1().StatefulSets(ns).Get(ctx, "probe", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		pvcs, err := c.Kube.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		bound := 0
		var phases []string
		for _, p := range pvcs.Items {
			phases = append(phases, p.Name+"="+string(p.Status.Phase))
			if p.Status.Phase == corev1.ClaimBound {
				bound++
			}
		}
		seen := fmt.Sprintf("readyReplicas=%d claims=%v", got.Status.ReadyReplicas, phases)
		return got.Status.ReadyReplicas == 3 && bound == 3, seen, nil
	})
}

func TestGarbageCollectionDeletesOwnedObjects(t *testing.T) {
	c := framework.Setup(t)
	ctx := context.Background()
	ns := c.Namespace(t, "gc")
	cms := c.Kube.CoreV1().ConfigMaps(ns)
	owner, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating owner: %v", err)
	}
	_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name: "child",
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID,
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
		}},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating child: %v", err)
	}
	if err := cms.Delete(ctx, "owner", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting owner: %v", err)
	}
	framework.Eventually(t, time.Minute, "the garbage collector to delete the child", func() (bool, string, error) {
		_, err := cms.Get(ctx, "child", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "child gone", nil
		}
		return false, "child still present", err
	})
}

func TestAuditLogRecordsMutatingRequests(t *testing.T) {
	c := framework.Setup(t)
	ctx := context.Background()
	ns := c.Namespace(t, "audit")
	if _, err := c.Kubectl(ctx, "create", "configmap", "audited", "-n", ns, "--from-literal=k=v"); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 30*time.Second, "the audit log to record kubectl's create", func() (bool, string, error) {
		events, err := c.AuditEvents()
		if err != nil {
			return false, "", err
		}
		var seen []string
		for _, ev := range events {
			if ev.ObjectRef == nil || ev.ObjectRef.Namespace != ns || ev.ObjectRef.Resource != "configmaps" {
				continue
			}
			if ev.Verb == "create" && ev.ObjectRef.Name == "audited" &&
				strings.HasPrefix(ev.UserAgent, "kubectl/") && ev.User.Username != "" &&
				ev.ResponseStatus != nil && ev.ResponseStatus.Code == 201 {
				return true, "", nil
			}
			seen = append(seen, fmt.Sprintf("%s %s/%s by %q (%s)", ev.Verb, ev.ObjectRef.Resource, ev.ObjectRef.Name, ev.UserAgent, ev.User.Username))
		}
		if len(seen) > 0 {
			return false, strings.Join(seen, "; "), nil
		}
		return false, fmt.Sprintf("%d events, none for namespace %s", len(events), ns), nil
	})
}
