package operator

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"testing"
	"time"

	"example.com/cache-operator/e2e/framework"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// setHibernate sets spec.hibernate of a cache.
func setHibernate(t *testing.T, c *framework.Cluster, ns, cache string, on bool) {
	t.Helper()
	patch := []byte(fmt.Sprintf(`{"spec":{"hibernate":%v}}`, on))
	if _, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Patch(context.Background(), cache, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("setting spec.hibernate to %v: %v", on, err)
	}
}

// conditionOf reads a condition of a cache's status.
func conditionOf(mc *unstructured.Unstructured, typ string) *metav1.Condition {
	raw, _, _ := unstructured.NestedSlice(mc.Object, "status", "conditions")
	var conds []metav1.Condition
	for _, r := range raw {
		var cond metav1.Condition
		if m, ok := r.(map[string]interface{}); ok && runtime.DefaultUnstructuredConverter.FromUnstructured(m, &cond) == nil {
			conds = append(conds, cond)
		}
	}
	return meta.FindStatusCondition(conds, typ)
}

// TestHibernateAndResume: a size-3 redis 8.0 cache with 100,000 keys, whose primary is not member
// 0 (a switchover first: an election that merely picked the lowest ordinal would not tell), and a
// writer that records every acknowledged write until the members stop. spec.hibernate stops
// every member and keeps the volumes, the Secrets, the ConfigMap and the Services; status says
// Hibernated; the PDB blocks nothing. Resume brings every member back with the same key count and
// checksum, every acknowledged write, and the same primary.
func TestHibernateAndResume(t *testing.T) {
	parallel(t)
	c := framework.Setup(t)
	ctx := context.Background()
	ns := c.RealNamespace(t, "hibernate")
	startOperatorIn(t, c, ns)
	deleteCachesOnCleanup(t, c, ns)
	const name = "nap"
	createCacheV2(t, c, ns, name, map[string]interface{}{"replicas": int64(3), "engine": map[string]interface{}{"name": "redis", "version": "8.0"},
		"storage": map[string]interface{}{"size": "1Gi"}})
	first := waitWhole(t, c, ns, name, 3, 3*time.Minute)
	target := name + "-2"
	if first.Name == target {
		target = name + "-1"
	}
	patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{"cache.example.com/switchover-to":%q}}}`, target))
	if _, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, time.Minute, target+" to be the primary", func() (bool, string, error) {
		mc, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		p, _, _ := unstructured.NestedString(mc.Object, "status", "primary")
		return p == target, "primary " + p, nil
	})
	primary := waitWhole(t, c, ns, name, 3, time.Minute)
	if primary.Name != target {
		t.Fatalf("primary %s after the switchover; want %s", primary.Name, target)
	}
	const keys = 100_000
	cl := memberClient(t, c, ns, name, primary.Name)
	fillKeys(t, cl, "d", keys)
	before := fingerprint(t, cl)
	if before.Keys != keys {
		t.Fatalf("after filling: %v; want %d keys", before, keys)
	}
	uids := map[string]types.UID{}
	for _, kind := range []string{"Secret", "ConfigMap", "Service"} {
		if obj, err := getChild(c, kind, ns, name); err == nil {
			uids[kind] = obj.GetUID()
		}
	}
	pvcs, err := c.Kube.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(pvcs.Items) != 3 {
		t.Fatalf("%d volume claims (%v); want 3", len(pvcs.Items), err)
	}

	pw := password(t, c, ns, name)
	w := startWriterWith(t, net.JoinHostPort(clusterIP(t, c, ns, name+"-rw"), "6379"), pw, "w:", true, 100_000, 3*time.Minute)
	w.waitOK(t, time.Now(), 30*time.Second)
	start := time.Now()
	setHibernate(t, c, ns, name, true)
	var mc *unstructured.Unstructured
	framework.Eventually(t, 2*time.Minute, "every member stopped and status Hibernated", func() (bool, string, error) {
		var err error
		if mc, err = c.Dynamic.Resource(mcV2GVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			return false, "", err
		}
		pods := memberPods(t, c, ns, name)
		ready, hib := conditionOf(mc, "Ready"), conditionOf(mc, "Hibernated")
		return len(pods) == 0 && ready != nil && ready.Reason == "Hibernated" && hib != nil && hib.Status == "True",
			fmt.Sprintf("%d pods, ready %+v, hibernated %+v", len(pods), ready, hib), nil
	})
	stopped := time.Since(start)
	w.halt()
	hib, _, _ := unstructured.NestedStringMap(mc.Object, "status", "hibernation")
	if hib["primary"] != target {
		t.Errorf("status.hibernation %v; want the primary %s recorded", hib, target)
	}
	if p, _, _ := unstructured.NestedString(mc.Object, "status", "primary"); p != "" {
		t.Errorf("status.primary %q while no member runs", p)
	}
	for kind, uid := range uids {
		obj, err := getChild(c, kind, ns, name)
		if err != nil || obj.GetUID() != uid {
			t.Errorf("%s: %v; want the same object kept while hibernating", kind, err)
		}
	}
	if pvcs, err := c.Kube.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{}); err != nil || len(pvcs.Items) != 3 {
		t.Errorf("%d volume claims while hibernating (%v); want the 3 kept", len(pvcs.Items), err)
	}
	pdb, err := c.Kube.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil || pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 3 {
		t.Errorf("PDB while hibernating: %v (%v); want maxUnavailable 3, blocking nothing", pdb.Spec.MaxUnavailable, err)
	}
	out, err := c.Kubectl(ctx, "get", "managedcaches.v2.cache.example.com", "-n", ns, name)
	if err != nil || !strings.Contains(out, "Hibernated") {
		t.Errorf("kubectl get: %q (%v); want the Status column to say Hibernated", out, err)
	}
	t.Logf("hibernated in %.1f s; the writer had %d writes acknowledged", stopped.Seconds(), w.ackedCount())

	start = time.Now()
	setHibernate(t, c, ns, name, false)
	waitReady(t, c, ns, name, 3, 3*time.Minute)
	resumed := time.Since(start)
	after := waitWhole(t, c, ns, name, 3, time.Minute)
	if after.Name != target {
		t.Errorf("primary %s after resuming; want %s, the primary before hibernation", after.Name, target)
	}
	mc, err = c.Dynamic.Resource(mcV2GVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h, found, _ := unstructured.NestedMap(mc.Object, "status", "hibernation"); found || conditionOf(mc, "Hibernated") != nil {
		t.Errorf("after resuming: status.hibernation %v, Hibernated %+v; want neither", h, conditionOf(mc, "Hibernated"))
	}
	lost := w.lost(t, net.JoinHostPort(clusterIP(t, c, ns, name+"-rw"), "6379"), pw)
	t.Logf("resumed Ready in %.1f s with %s as primary; %d of %d acknowledged writes lost", resumed.Seconds(), after.Name, len(lost), w.ackedCount())
	if len(lost) > 0 {
		t.Errorf("%d acknowledged writes lost over hibernation (first %v)", len(lost), lost[:min(5, len(lost))])
	}
	checkDataSurvived(t, c, ns, name, before)
	events, err := c.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, e := range events.Items {
		switch e.Reason {
		case "Hibernating", "Hibernated", "Resuming", "Resumed":
			reasons = append(reasons, e.Reason)
		}
	}
	sort.Strings(reasons)
	if strings.Join(reasons, ",") != "Hibernated,Hibernating,Resumed,Resuming" {
		t.Errorf("Events %v; want one each of Hibernating, Hibernated, Resuming, Resumed", reasons)
	}
}
