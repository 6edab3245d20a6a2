package operator

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"example.com/cache-operator/e2e/framework"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
)

func storageDoc(ns, name string, replicas int, size, class string) string {
	cls := ""
	if class != "" {
		cls = ", storageClassName: " + class
	}
	return fmt.Sprintf("apiVersion: cache.example.com/v2\nkind: ManagedCache\nmetadata: {name: %s, namespace: %s}\n"+
		"spec: {replicas: %d, engine: {version: \"7.2\"}, storage: {size: %s%s}}\n", name, ns, replicas, size, cls)
}

// conditionsSeen watches a cache and records every StorageResizing condition it shows, until stop.
func conditionsSeen(t *testing.T, c *framework.Cluster, ns, name string) (stop func() []string) {
	t.Helper()
	w, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Watch(context.Background(), metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan []string, 1)
	go func() {
		var out []string
		for ev := range w.ResultChan() {
			if ev.Type != watch.Modified {
				continue
			}
			conds, _, _ := unstructured.NestedSlice(ev.Object.(*unstructured.Unstructured).Object, "status", "conditions")
			for _, cond := range conds {
				m := cond.(map[string]interface{})
				if m["type"] == "StorageResizing" {
					s := fmt.Sprintf("%v/%v: %v", m["status"], m["reason"], m["message"])
					if len(out) == 0 || out[len(out)-1] != s {
						out = append(out, s)
					}
				}
			}
		}
		seen <- out
	}()
	return func() []string { w.Stop(); return <-seen }
}

// TestStorageGrowth grows the volumes of a cache of three real redis-server members: every claim
// is expanded, the StatefulSet is replaced without its pods (no restart, the data stays), a
// condition shows the resize while it runs, and later changes land. Before, the immutable
// volumeClaimTemplates made every later StatefulSet apply fail.
func TestStorageGrowth(t *testing.T) {
	parallel(t)
	c := framework.Setup(t)
	ctx := context.Background()
	ns := c.RealNamespace(t, "grow")
	startOperatorIn(t, c, ns)
	deleteCachesOnCleanup(t, c, ns)
	if err := c.ApplyServerSide(ctx, storageDoc(ns, "g", 3, "1Gi", "")); err != nil {
		t.Fatal(err)
	}
	// The election picks the primary; it need not be g-0.
	primary := waitWhole(t, c, ns, "g", 3, 3*time.Minute)
	pw := password(t, c, ns, "g")
	if out, err := redisCLI(ctx, primary.Status.PodIP, pw, "set", "grow:key", "kept"); err != nil || !strings.Contains(out, "OK") {
		t.Fatalf("SET: %q %v", out, err)
	}
	before := map[string]podIdentity{}
	pods, err := c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=g"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		before[p.Name] = podIdentity{uid: string(p.UID), restarts: restarts(&p)}
	}
	oldSTS, err := c.Kube.AppsV1().StatefulSets(ns).Get(ctx, "g", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	stop := conditionsSeen(t, c, ns, "g")
	start := time.Now()
	if err := c.ApplyServerSide(ctx, storageDoc(ns, "g", 3, "2Gi", "")); err != nil {
		t.Fatal(err)
	}
	want := resource.MustParse("2Gi")
	framework.Eventually(t, 2*time.Minute, "every claim at 2Gi and a StatefulSet with 2Gi templates", func() (bool, string, error) {
		claims, err := c.Kube.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=g"})
		if err != nil {
			return false, "", err
		}
		var seen []string
		grown := 0
		for _, pvc := range claims.Items {
			capacity := pvc.Status.Capacity[corev1.ResourceStorage]
			seen = append(seen, pvc.Name+"="+capacity.String())
			if capacity.Cmp(want) >= 0 {
				grown++
			}
		}
		sts, err := c.Kube.AppsV1().StatefulSets(ns).Get(ctx, "g", metav1.GetOptions{})
		if err != nil {
			return false, strings.Join(seen, " "), nil
		}
		vct := sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[corev1.ResourceStorage]
		seen = append(seen, "StatefulSet template "+vct.String())
		return grown == 3 && len(claims.Items) == 3 && vct.Cmp(want) == 0 && sts.UID != oldSTS.UID, strings.Join(seen, " "), nil
	})
	framework.Eventually(t, time.Minute, "the resize condition to clear and the cache Ready", func() (bool, string, error) {
		mc, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Get(ctx, "g", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		status, reason, _ := readyReason(mc)
		resizing := false
		conds, _, _ := unstructured.NestedSlice(mc.Object, "status", "conditions")
		for _, cd := range conds {
			if m, _ := cd.(map[string]interface{}); m["type"] == "StorageResizing" {
				resizing = true
			}
		}
		return !resizing && status == "True", fmt.Sprintf("Ready %s %s, StorageResizing present %v", status, reason, resizing), nil
	})
	t.Logf("storage grown from 1Gi to 2Gi on 3 members in %v", time.Since(start).Round(100*time.Millisecond))
	if seen := stop(); len(seen) == 0 || !strings.HasPrefix(seen[0], "True/ExpandingVolumes") {
		t.Errorf("StorageResizing conditions seen: %q; want True/ExpandingVolumes while the volumes grew", seen)
	} else {
		t.Logf("conditions shown: %q", seen)
	}
	pods, err = c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=g"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if b, ok := before[p.Name]; !ok || b.uid != string(p.UID) || restarts(&p) != b.restarts {
			t.Errorf("pod %s: uid %s restarts %d; before %+v: the resize restarted or replaced it", p.Name, p.UID, restarts(&p), b)
		}
	}
	if out, err := redisCLI(ctx, primary.Status.PodIP, pw, "get", "grow:key"); err != nil || strings.TrimSpace(out) != "kept" {
		t.Errorf("GET after the resize: %q %v; want kept", out, err)
	}
	// A later change lands.
	if err := c.ApplyServerSide(ctx, storageDoc(ns, "g", 4, "2Gi", "")); err != nil {
		t.Fatal(err)
	}
	waitReady(t, c, ns, "g", 4, 3*time.Minute)
}

type podIdentity struct {
	uid      string
	restarts int32
}

func restarts(p *corev1.Pod) int32 {
	var n int32
	for _, s := range p.Status.ContainerStatuses {
		n += s.RestartCount
	}
	return n
}

// TestStorageGrowthRefused: a class that does not allow expansion refuses the growth with a
// condition and an Event, keeps the volumes as they are, and every other change still lands.
func TestStorageGrowthRefused(t *testing.T) {
	parallel(t)
	c := framework.Setup(t)
	ctx := context.Background()
	ns := c.Namespace(t, "fixed")
	startOperatorIn(t, c, ns)
	deleteCachesOnCleanup(t, c, ns)
	if err := c.ApplyServerSide(ctx, storageDoc(ns, "f", 1, "1Gi", "fixed")); err != nil {
		t.Fatal(err)
	}
	waitReady(t, c, ns, "f", 1, 2*time.Minute)
	oldSTS, err := c.Kube.AppsV1().StatefulSets(ns).Get(ctx, "f", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ApplyServerSide(ctx, storageDoc(ns, "f", 2, "2Gi", "fixed")); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, time.Minute, "the growth refused with a condition, and the other change made", func() (bool, string, error) {
		mc, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Get(ctx, "f", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		refused := ""
		conds, _, _ := unstructured.NestedSlice(mc.Object, "status", "conditions")
		for _, cond := range conds {
			m := cond.(map[string]interface{})
			if m["type"] == "StorageResizing" && m["status"] == "False" && m["reason"] == "ExpansionNotAllowed" {
				refused = fmt.Sprint(m["message"])
			}
		}
		sts, err := c.Kube.AppsV1().StatefulSets(ns).Get(ctx, "f", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		vct := sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[corev1.ResourceStorage]
		return refused != "" && *sts.Spec.Replicas == 2, fmt.Sprintf("refusal %q, StatefulSet replicas %d, template %s", refused, *sts.Spec.Replicas, vct.String()), nil
	})
	sts, _ := c.Kube.AppsV1().StatefulSets(ns).Get(ctx, "f", metav1.GetOptions{})
	if vct := sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[corev1.ResourceStorage]; vct.String() != "1Gi" || sts.UID != oldSTS.UID {
		t.Errorf("StatefulSet template %s (uid changed: %v); want 1Gi, the same StatefulSet", vct.String(), sts.UID != oldSTS.UID)
	}
	framework.Eventually(t, 30*time.Second, "an ExpansionNotAllowed Warning", func() (bool, string, error) {
		out, err := c.Kubectl(ctx, "get", "events", "-n", ns, "--field-selector", "reason=ExpansionNotAllowed", "-o", "jsonpath={.items[*].message}")
		return err == nil && strings.Contains(out, "does not allow volume expansion"), out, err
	})
	waitReady(t, c, ns, "f", 2, 2*time.Minute)
}
