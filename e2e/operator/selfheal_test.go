package operator

import (
	"context"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"example.com/cache-operator/e2e/framework"
)

// healRow is one line of TestDeletingAChildCostsNothing's table.
type healRow struct {
	action                       string
	stall                        time.Duration
	keysBefore, keysAfter, base  int64
	lost                         int
	passwordsChanged, switchover string
}

// TestDeletingAChildCostsNothing: a cache of 3 members holding 10,000 keys, under a writer that
// records every acknowledged write, has each of its children deleted as a user would with
// kubectl, one after the other: the ConfigMap, each Service, the PDB, one replica's claim and pod,
// every pod at once, the StatefulSet with each cascade, a StatefulSet whose pods were made from a
// drifted template, and the password Secret (with the operator running, with its finalizer
// removed by hand, with the operator stopped, then the StatefulSet deleted too). After each: the
// cache whole again, every one of the 10,000 keys present, no acknowledged write lost, both
// passwords unchanged, every claim owned by the cache, and a switchover that succeeds (the
// operator is in control). The table is logged.
func TestDeletingAChildCostsNothing(t *testing.T) {
	parallel(t)
	ctx := context.Background()
	const name = "keep"
	rc := newRealCache(t, "heal", name)
	c, ns, pw, op := rc.c, rc.ns, rc.password, rc.op
	internal := internalPassword(t, c, ns, name)

	// The read-write Service's address, read anew at each dial: deleting the Service gives it
	// another ClusterIP, which a client finds through DNS.
	rwAddr := func() string {
		svc, err := c.Kube.CoreV1().Services(ns).Get(ctx, name+"-rw", metav1.GetOptions{})
		if err != nil || svc.Spec.ClusterIP == "" {
			return rc.addr
		}
		return net.JoinHostPort(svc.Spec.ClusterIP, "6379")
	}
	const baseKeys = 10_000
	seedKeys(t, rc.addr, pw, "base:", baseKeys)
	w := startWriterDial(t, func() *redis.Client { return newClient(rwAddr(), pw) }, "w:", true, 0, 20_000_000, 40*time.Minute)
	w.waitOK(t, time.Now(), time.Minute)

	// baseKeysPresent counts the seeded keys the primary holds, and its DBSIZE.
	baseKeysPresent := func() (int64, int64) {
		return countKeys(t, rwAddr(), pw, "base:", baseKeys)
	}
	claimsOwned := func() string {
		mc, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		claims, err := c.Kube.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + name})
		if err != nil {
			return err.Error()
		}
		var bad []string
		for _, cl := range claims.Items {
			owned := false
			for _, ref := range cl.OwnerReferences {
				owned = owned || (ref.UID == mc.GetUID() && ref.Kind == "ManagedCache")
			}
			if !owned {
				bad = append(bad, cl.Name)
			}
		}
		if len(claims.Items) < 3 || len(bad) > 0 {
			return fmt.Sprintf("%d claims, not owned by the cache: %v", len(claims.Items), bad)
		}
		return ""
	}
	framework.Eventually(t, time.Minute, "every claim owned by the cache", func() (bool, string, error) {
		why := claimsOwned()
		return why == "", why, nil
	})
	switchover := func() string {
		primary := statusPrimary(t, c, ns, name)
		target := ""
		for _, p := range memberPods(t, c, ns, name) {
			if p.Name != primary && target == "" {
				target = p.Name
			}
		}
		patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{"cache.example.com/switchover-to":%q}}}`, target))
		if _, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		framework.Eventually(t, 2*time.Minute, "the switchover to "+target, func() (bool, string, error) {
			mc, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			p, _, _ := unstructured.NestedString(mc.Object, "status", "primary")
			_, pending := mc.GetAnnotations()["cache.example.com/switchover-to"]
			return p == target && !pending, fmt.Sprintf("status.primary %s, annotation pending %v", p, pending), nil
		})
		waitWhole(t, c, ns, name, 3, 3*time.Minute)
		return fmt.Sprintf("%s -> %s in %v", primary, target, time.Since(start).Round(100*time.Millisecond))
	}
	kubectl := func(args ...string) {
		t.Helper()
		if out, err := c.Kubectl(ctx, append(args, "-n", ns)...); err != nil {
			t.Fatalf("kubectl %v: %v: %s", args, err, out)
		}
	}
	secretGone := func(uid types.UID) func() (bool, string, error) {
		return func() (bool, string, error) {
			s, err := c.Kube.CoreV1().Secrets(ns).Get(ctx, name+"-auth", metav1.GetOptions{})
			if err != nil {
				return false, err.Error(), nil
			}
			return s.UID != uid, fmt.Sprintf("Secret UID %s, finalizers %v", s.UID, s.Finalizers), nil
		}
	}
	secretTerminating := func() (bool, string, error) {
		s, err := c.Kube.CoreV1().Secrets(ns).Get(ctx, name+"-auth", metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		return s.DeletionTimestamp != nil, fmt.Sprintf("deletionTimestamp %v, finalizers %v", s.DeletionTimestamp, s.Finalizers), nil
	}
	replica := func() string {
		primary := statusPrimary(t, c, ns, name)
		for _, p := range memberPods(t, c, ns, name) {
			if p.Name != primary {
				return p.Name
			}
		}
		t.Fatal("no replica")
		return ""
	}

	// uidOf is the UID of an object of the cache's namespace ("" when it is not there).
	uidOf := func(kind, obj string) string {
		out, err := c.Kubectl(ctx, "get", kind, obj, "-n", ns, "-o", "jsonpath={.metadata.uid}")
		if err != nil {
			return ""
		}
		return strings.TrimSpace(out)
	}
	// remade waits until the object is there again under another UID: the deletion took effect
	// and the operator wrote it back.
	remade := func(kind, obj, old string) {
		t.Helper()
		framework.Eventually(t, 2*time.Minute, kind+" "+obj+" made anew", func() (bool, string, error) {
			uid := uidOf(kind, obj)
			return uid != "" && uid != old, "uid " + uid, nil
		})
	}
	podUIDs := func() map[string]types.UID {
		out := map[string]types.UID{}
		for _, p := range memberPods(t, c, ns, name) {
			out[p.Name] = p.UID
		}
		return out
	}
	// podsRemade waits until every member named in old has a pod made anew.
	podsRemade := func(old map[string]types.UID) {
		t.Helper()
		framework.Eventually(t, 3*time.Minute, "the members' pods made anew", func() (bool, string, error) {
			now := podUIDs()
			var waiting []string
			for n, uid := range old {
				if cur, ok := now[n]; !ok || cur == uid {
					waiting = append(waiting, n)
				}
			}
			return len(waiting) == 0, fmt.Sprintf("not yet made anew: %v", waiting), nil
		})
	}

	var rows []healRow
	lostSoFar := 0
	step := func(action string, do func()) {
		t.Helper()
		base, before := baseKeysPresent()
		t0 := time.Now()
		do()
		waitWhole(t, c, ns, name, 3, 5*time.Minute)
		w.waitOK(t, time.Now(), 2*time.Minute)
		stall := w.longestStall(t0)
		framework.Eventually(t, time.Minute, "every claim owned by the cache after: "+action, func() (bool, string, error) {
			why := claimsOwned()
			return why == "", why, nil
		})
		present, after := baseKeysPresent()
		lost := len(w.lost(t, rwAddr(), pw))
		changed := []string{}
		if password(t, c, ns, name) != pw {
			changed = append(changed, "clients'")
		}
		if internalPassword(t, c, ns, name) != internal {
			changed = append(changed, "internal")
		}
		row := healRow{action: action, stall: stall, keysBefore: before, keysAfter: after, base: present, lost: lost - lostSoFar,
			passwordsChanged: strings.Join(changed, ", "), switchover: switchover()}
		lostSoFar = lost
		rows = append(rows, row)
		t.Logf("%s: longest stretch without an acknowledged write %v; keys %d -> %d (seeded keys present %d of %d); acknowledged writes lost %d; passwords changed: %q; switchover %s",
			action, stall.Round(100*time.Millisecond), before, after, present, base, row.lost, row.passwordsChanged, row.switchover)
		if present != baseKeys || row.lost != 0 || len(changed) > 0 {
			t.Errorf("%s: seeded keys present %d of %d, %d acknowledged writes lost, passwords changed %v; want every key, none lost, none changed",
				action, present, baseKeys, row.lost, changed)
		}
	}

	// A cache as an older operator left it: claims deleted with the StatefulSet (its controller
	// reference on each) and none owned by the cache. The operator moves it in place: no pod
	// restarts, the policy back to Retain, the claims the cache's, the StatefulSet's reference
	// dropped by its controller.
	step("an older operator's volume ownership moved in place", func() {
		op.stop(syscall.SIGTERM)
		// The cache's references off first: the StatefulSet controller adds its own as soon as the
		// policy says Delete.
		claims, err := c.Kube.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + name})
		if err != nil {
			t.Fatal(err)
		}
		for _, cl := range claims.Items {
			kubectl("patch", "pvc", cl.Name, "--type=json", `-p=[{"op":"remove","path":"/metadata/ownerReferences"}]`)
		}
		kubectl("patch", "statefulset", name, "--type=merge", `-p={"spec":{"persistentVolumeClaimRetentionPolicy":{"whenDeleted":"Delete"}}}`)
		framework.Eventually(t, time.Minute, "every claim controlled by the StatefulSet alone, as an older operator left them", func() (bool, string, error) {
			claims, err := c.Kube.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + name})
			if err != nil {
				return false, "", err
			}
			var seen []string
			ok := len(claims.Items) == 3
			for _, cl := range claims.Items {
				ref := metav1.GetControllerOf(&cl)
				ok = ok && ref != nil && ref.Kind == "StatefulSet" && len(cl.OwnerReferences) == 1
				seen = append(seen, fmt.Sprintf("%s: %v", cl.Name, cl.OwnerReferences))
			}
			return ok, fmt.Sprint(seen), nil
		})
		uids := map[string]types.UID{}
		for _, p := range memberPods(t, c, ns, name) {
			uids[p.Name] = p.UID
		}
		op = startOperatorIn(t, c, ns)
		framework.Eventually(t, time.Minute, "the claims the cache's alone, the StatefulSet's policy Retain", func() (bool, string, error) {
			sts, err := c.Kube.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			policy := sts.Spec.PersistentVolumeClaimRetentionPolicy
			claims, err := c.Kube.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + name})
			if err != nil {
				return false, "", err
			}
			ok := policy != nil && policy.WhenDeleted == "Retain" && claimsOwned() == ""
			var seen []string
			for _, cl := range claims.Items {
				ok = ok && len(cl.OwnerReferences) == 1
				seen = append(seen, fmt.Sprintf("%s: %v", cl.Name, cl.OwnerReferences))
			}
			return ok, fmt.Sprintf("policy %v; %v", policy, seen), nil
		})
		for _, p := range memberPods(t, c, ns, name) {
			if uids[p.Name] != p.UID {
				t.Errorf("%s restarted in the move (uid %s -> %s); want no pod made anew", p.Name, uids[p.Name], p.UID)
			}
		}
	})
	for _, child := range [][2]string{{"configmap", name + "-config"}, {"service", name + "-rw"}, {"service", name + "-ro"},
		{"service", name}, {"poddisruptionbudget", name}} {
		step("delete "+child[0]+" "+child[1], func() {
			old := uidOf(child[0], child[1])
			kubectl("delete", child[0], child[1], "--wait=false")
			remade(child[0], child[1], old)
		})
	}
	step("delete one replica's claim and pod", func() {
		r := replica()
		old := uidOf("pvc", "data-"+r)
		pods := podUIDs()
		kubectl("delete", "pvc", "data-"+r, "--wait=false")
		kubectl("delete", "pod", r, "--wait=false")
		remade("pvc", "data-"+r, old)
		podsRemade(map[string]types.UID{r: pods[r]})
	})
	step("delete every pod at once", func() {
		pods := podUIDs()
		kubectl("delete", "pod", "-l", "app.kubernetes.io/instance="+name, "--wait=false")
		podsRemade(pods)
	})
	for _, cascade := range []string{"background", "foreground"} {
		step("delete StatefulSet (--cascade="+cascade+")", func() {
			old, pods := uidOf("statefulset", name), podUIDs()
			kubectl("delete", "statefulset", name, "--cascade="+cascade, "--wait=false")
			remade("statefulset", name, old)
			podsRemade(pods)
		})
	}
	step("delete StatefulSet (--cascade=orphan)", func() {
		old := uidOf("statefulset", name)
		kubectl("delete", "statefulset", name, "--cascade=orphan", "--wait=false")
		remade("statefulset", name, old)
		sts := uidOf("statefulset", name)
		framework.Eventually(t, 2*time.Minute, "the running pods adopted by the StatefulSet made anew", func() (bool, string, error) {
			var seen []string
			adopted := 0
			for _, p := range memberPods(t, c, ns, name) {
				ref := metav1.GetControllerOf(&p)
				if ref != nil && string(ref.UID) == sts {
					adopted++
				}
				seen = append(seen, fmt.Sprintf("%s: %v", p.Name, ref))
			}
			return adopted == 3, fmt.Sprint(seen), nil
		})
	})
	step("pods made from a drifted template (operator stopped meanwhile)", func() {
		replaced := eventCount(t, c, ns, name, "ReplacingStuckMember")
		op.stop(syscall.SIGTERM)
		kubectl("set", "image", "statefulset/"+name, "*=example.invalid/drifted:1")
		kubectl("delete", "pod", "-l", "app.kubernetes.io/instance="+name, "--wait=false")
		framework.Eventually(t, 3*time.Minute, "every member made anew from the drifted template, unable to start", func() (bool, string, error) {
			var seen []string
			stuck := 0
			for _, p := range memberPods(t, c, ns, name) {
				for _, cs := range p.Status.ContainerStatuses {
					if w := cs.State.Waiting; w != nil {
						seen = append(seen, p.Name+":"+w.Reason)
						if w.Reason == "ErrImagePull" || w.Reason == "ImagePullBackOff" {
							stuck++
						}
					}
				}
			}
			return stuck == 3, fmt.Sprint(seen), nil
		})
		op = startOperatorIn(t, c, ns)
		framework.Eventually(t, 2*time.Minute, "the stuck members replaced, with an Event each", func() (bool, string, error) {
			n := eventCount(t, c, ns, name, "ReplacingStuckMember") - replaced
			return n >= 3, fmt.Sprintf("%d ReplacingStuckMember Events", n), nil
		})
	})
	step("delete Secret (operator running)", func() {
		kept := eventCount(t, c, ns, name, "CredentialsKept")
		kubectl("delete", "secret", name+"-auth", "--wait=false")
		framework.Eventually(t, time.Minute, "the Secret kept, Terminating", secretTerminating)
		framework.Eventually(t, time.Minute, "a CredentialsKept Event", func() (bool, string, error) {
			n := eventCount(t, c, ns, name, "CredentialsKept") - kept
			return n == 1, fmt.Sprintf("%d CredentialsKept Events", n), nil
		})
	})
	step("Secret's finalizer removed by hand (operator running)", func() {
		s, err := c.Kube.CoreV1().Secrets(ns).Get(ctx, name+"-auth", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		kubectl("patch", "secret", name+"-auth", "--type=json", `-p=[{"op":"remove","path":"/metadata/finalizers"}]`)
		framework.Eventually(t, time.Minute, "the Secret written back", secretGone(s.UID))
		framework.Eventually(t, time.Minute, "a CredentialsRestored Event", func() (bool, string, error) {
			n := eventCount(t, c, ns, name, "CredentialsRestored")
			return n >= 1, fmt.Sprintf("%d CredentialsRestored Events", n), nil
		})
	})
	step("delete Secret (operator stopped)", func() {
		op.stop(syscall.SIGTERM)
		kubectl("delete", "secret", name+"-auth", "--wait=false")
		framework.Eventually(t, time.Minute, "the Secret kept, Terminating", secretTerminating)
		op = startOperatorIn(t, c, ns)
	})
	step("delete StatefulSet (--cascade=background) while its Secret is Terminating", func() {
		old, pods := uidOf("statefulset", name), podUIDs()
		kubectl("delete", "statefulset", name, "--wait=false")
		remade("statefulset", name, old)
		podsRemade(pods)
	})
	w.halt()
	lost := w.lost(t, rwAddr(), pw)
	var table strings.Builder
	table.WriteString("| action | longest stretch without writes | keys before | keys after | seeded keys | acknowledged writes lost | passwords changed | switchover |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		changed := r.passwordsChanged
		if changed == "" {
			changed = "none"
		}
		fmt.Fprintf(&table, "| %s | %.1f s | %d | %d | %d/%d | %d | %s | %s |\n", r.action, r.stall.Seconds(), r.keysBefore, r.keysAfter, r.base, baseKeys, r.lost, changed, r.switchover)
	}
	t.Logf("every deletion, %d acknowledged writes in all, %d lost:\n%s", len(w.acked), len(lost), table.String())
	if len(lost) != 0 {
		t.Errorf("%d acknowledged writes lost in all", len(lost))
	}

	// The data gone for good: every claim deleted with every pod. No healing brings it back; the
	// operator must say so, with the keys it last saw. An operator whose metrics this test reads,
	// once its member passes have seen the keys.
	metricsAddr := freeAddr(t)
	op.stop(syscall.SIGTERM)
	op = startOperatorIn(t, c, ns, "--metrics-bind-address="+metricsAddr)
	framework.Eventually(t, time.Minute, "the operator's member passes to see the keys", func() (bool, string, error) {
		v, err := framework.Metric(metricsAddr, "cache_operator_member_keys")
		return err == nil && v > 0, fmt.Sprintf("cache_operator_member_keys %v (%v)", v, err), nil
	})
	_, keysBefore := baseKeysPresent()
	kubectl("delete", "pvc", "-l", "app.kubernetes.io/instance="+name, "--wait=false")
	pods := podUIDs()
	kubectl("delete", "pod", "-l", "app.kubernetes.io/instance="+name, "--wait=false")
	podsRemade(pods)
	waitWhole(t, c, ns, name, 3, 5*time.Minute)
	var msg string
	framework.Eventually(t, 2*time.Minute, "the loss reported: Event, condition and metric", func() (bool, string, error) {
		events, err := c.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=DataLost"})
		if err != nil {
			return false, "", err
		}
		if len(events.Items) > 0 {
			msg = events.Items[0].Message
		}
		mc, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		cond := ""
		conds, _, _ := unstructured.NestedSlice(mc.Object, "status", "conditions")
		for _, raw := range conds {
			if m, ok := raw.(map[string]interface{}); ok && m["type"] == "DataLost" {
				cond = fmt.Sprint(m["status"])
			}
		}
		count, _ := framework.Metric(metricsAddr, "cache_operator_data_lost_total")
		keys, _ := framework.Metric(metricsAddr, "cache_operator_data_lost_keys_total")
		return len(events.Items) == 1 && cond == "True" && count == 1 && keys > 0,
			fmt.Sprintf("%d DataLost Events %q; condition %q; cache_operator_data_lost_total %v, keys %v", len(events.Items), msg, cond, count, keys), nil
	})
	_, keysAfter := baseKeysPresent()
	t.Logf("every claim and pod deleted: keys %d -> %d; reported: %s", keysBefore, keysAfter, msg)
	if keysAfter != 0 || !strings.Contains(msg, "keys at the last poll") {
		t.Errorf("after every volume was deleted: %d keys, DataLost %q; want 0 keys and the keys last seen named", keysAfter, msg)
	}

	// The double fault: the Secret's finalizer removed by hand while no operator runs, so the
	// Secret is gone with no copy anywhere. The operator, back, can only make new passwords, which
	// the members refuse: it says so (Degraded, OperatorRefused, and an Event), and the members'
	// probes, which read the new Secret, restart them on it. Then the operator is in control again
	// with no manual step, and the data is kept; the passwords changed, with no overlap.
	seedKeys(t, rwAddr(), pw, "df:", 1000)
	op.stop(syscall.SIGTERM)
	t0 := time.Now()
	kubectl("patch", "secret", name+"-auth", "--type=json", `-p=[{"op":"remove","path":"/metadata/finalizers"}]`)
	framework.Eventually(t, time.Minute, "the Secret gone", func() (bool, string, error) {
		_, err := c.Kube.CoreV1().Secrets(ns).Get(ctx, name+"-auth", metav1.GetOptions{})
		return err != nil, fmt.Sprint(err), nil
	})
	op = startOperatorIn(t, c, ns)
	var refused string
	framework.Eventually(t, 2*time.Minute, "the members' refusal reported (Degraded OperatorRefused, an Event)", func() (bool, string, error) {
		mc, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		conds, _, _ := unstructured.NestedSlice(mc.Object, "status", "conditions")
		for _, raw := range conds {
			if m, ok := raw.(map[string]interface{}); ok && m["type"] == "Degraded" && m["reason"] == "OperatorRefused" {
				refused = fmt.Sprint(m["message"])
			}
		}
		events := eventCount(t, c, ns, name, "OperatorRefused")
		return refused != "" && events > 0, fmt.Sprintf("Degraded OperatorRefused %q, %d Events", refused, events), nil
	})
	pw2 := password(t, c, ns, name)
	waitWhole(t, c, ns, name, 3, 5*time.Minute)
	back := time.Since(t0)
	kept, _ := countKeys(t, rwAddr(), pw2, "df:", 1000)
	sw := switchover()
	t.Logf("the Secret gone with no operator and no copy: refusal reported (%s); whole again with new passwords %v after; keys kept %d of 1000; switchover %s",
		refused, back.Round(100*time.Millisecond), kept, sw)
	if pw2 == pw || kept != 1000 {
		t.Errorf("after the double fault: password changed %v, %d of 1000 keys; want new passwords and every key", pw2 != pw, kept)
	}

	// The cache deleted: the volumes and the password Secret go with it.
	if err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 2*time.Minute, "the claims and the password Secret gone with the cache", func() (bool, string, error) {
		claims, err := c.Kube.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + name})
		if err != nil {
			return false, "", err
		}
		_, err = c.Kube.CoreV1().Secrets(ns).Get(ctx, name+"-auth", metav1.GetOptions{})
		return len(claims.Items) == 0 && err != nil, fmt.Sprintf("%d claims; Secret: %v", len(claims.Items), err), nil
	})
}

// seedKeys sets <prefix>0 .. <prefix>n-1 through addr, a thousand per round trip.
func seedKeys(t *testing.T, addr, pw, prefix string, n int) {
	t.Helper()
	cl := bulkClient(addr, pw)
	defer cl.Close()
	for i := 0; i < n; i += 1000 {
		pipe := cl.Pipeline()
		for j := i; j < min(i+1000, n); j++ {
			pipe.Set(context.Background(), fmt.Sprintf("%s%d", prefix, j), j, 0)
		}
		if _, err := pipe.Exec(context.Background()); err != nil {
			t.Fatalf("setting the keys %s*: %v", prefix, err)
		}
	}
}

// countKeys counts which of <prefix>0 .. <prefix>n-1 addr holds, and its DBSIZE.
func countKeys(t *testing.T, addr, pw, prefix string, n int) (present, size int64) {
	t.Helper()
	ctx := context.Background()
	cl := bulkClient(addr, pw)
	defer cl.Close()
	for i := 0; i < n; i += 1000 {
		keys := make([]string, 0, 1000)
		for j := i; j < min(i+1000, n); j++ {
			keys = append(keys, fmt.Sprintf("%s%d", prefix, j))
		}
		k, err := cl.Exists(ctx, keys...).Result()
		if err != nil {
			t.Fatalf("reading the keys %s*: %v", prefix, err)
		}
		present += k
	}
	size, err := cl.DBSize(ctx).Result()
	if err != nil {
		t.Fatalf("DBSIZE: %v", err)
	}
	return present, size
}
