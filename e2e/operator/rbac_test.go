package operator

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"example.com/cache-operator/e2e/framework"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

const operatorSA = "system:serviceaccount:cache-operator-system:cache-operator"

// unobservable are granted permissions no request of the operator's shows in this cluster's
// audit log, each with the reason it is still needed.
var unobservable = func() map[string]string {
	m := map[string]string{
		"cache.example.com/managedcaches/finalizers update": "checked by the OwnerReferencesPermissionEnforcement admission plugin " +
			"(when enabled) because children set blockOwnerDeletion; it is an authorization check, not a request",
		"/persistentvolumeclaims delete":     "only the removal of a shard a scale-in emptied deletes claims: seen as the ServiceAccount in TestShardedCacheReshards",
		"policy/poddisruptionbudgets delete": "only the removal of a shard a scale-in emptied deletes a budget: seen as the ServiceAccount in TestShardedCacheReshards",
	}
	// client-go 1.37 informers fill their caches with a streaming watch (WatchListClient); they
	// fall back to a plain list on API servers that do not offer it.
	for _, r := range []string{"cache.example.com/managedcaches", "cache.example.com/managedcachebackups", "batch/jobs", "/secrets", "/configmaps", "/services", "apps/statefulsets", "policy/poddisruptionbudgets", "/pods"} {
		m[r+" list"] = "the informers' fallback when the API server offers no streaming list"
	}
	return m
}()

// saKubeconfig writes a kubeconfig that authenticates as the operator's ServiceAccount.
func saKubeconfig(t *testing.T, c *framework.Cluster) string {
	t.Helper()
	token, err := c.Kubectl(context.Background(), "create", "token", "cache-operator", "-n", "cache-operator-system", "--duration=1h")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.LoadFromFile(c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for name := range cfg.AuthInfos {
		cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: strings.TrimSpace(token)}
	}
	path := filepath.Join(c.Dir, "operator-sa.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRBACGrantsExactlyWhatTheOperatorUses runs the operator as its ServiceAccount, with only
// the permissions manifests/rbac.yaml grants, through every path that needs one. It proves that
// nothing is missing (no request is forbidden, every step succeeds) and that nothing is granted
// in vain (the audit log shows each granted verb used).
func TestRBACGrantsExactlyWhatTheOperatorUses(t *testing.T) {
	c := framework.Setup(t)
	ctx := context.Background()
	if _, err := c.Kubectl(ctx, "apply", "--server-side", "--force-conflicts", "-n", "cache-operator-system", "-f", filepath.Join(c.Root, "manifests", "rbac.yaml")); err != nil {
		t.Fatal(err)
	}
	// A clean slate for the paths that create or repair: the lease, the certificate Secret, the
	// webhook configuration, and a conversion webhook pointed elsewhere.
	ignoreNotFound := func(err error) {
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	ignoreNotFound(c.Kube.CoordinationV1().Leases("cache-operator-system").Delete(ctx, "cache-operator", metav1.DeleteOptions{}))
	ignoreNotFound(c.Kube.CoreV1().Secrets("cache-operator-system").Delete(ctx, "cache-operator-webhook-tls", metav1.DeleteOptions{}))
	ignoreNotFound(c.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, "cache-operator", metav1.DeleteOptions{}))
	kubeconfig := saKubeconfig(t, c)
	ns := c.Namespace(t, "rbac")
	if _, err := c.Kubectl(ctx, "create", "secret", "generic", "taken-auth", "-n", ns, "--from-literal=password=someone-elses"); err != nil {
		t.Fatal(err)
	}

	// What an older version left behind: a cache with the finalizer it used to add, and a CRD
	// that records v1 as stored, so that the finalizer's removal and the storage migration run.
	legacy := cacheObject(ns, "legacy", map[string]interface{}{"engine": map[string]interface{}{"version": "7.2"}})
	legacy.SetAPIVersion("cache.example.com/v2")
	legacy.SetFinalizers([]string{"cache.example.com/finalizer"})
	if _, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Create(ctx, legacy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kubectl(ctx, "patch", "crd", "managedcaches.cache.example.com", "--subresource=status", "--type=merge",
		"-p", `{"status":{"storedVersions":["v1","v2"]}}`); err != nil {
		t.Fatal(err)
	}

	since := time.Now()
	op := startOperator(t, c, "--kubeconfig="+kubeconfig, "--leader-elect", "--leader-elect-lease-duration=8s",
		"--leader-elect-renew-deadline=5s", "--leader-elect-retry-period=1s", "--webhook-cert-lifetime=15s", "--webhook-owner=cache-operator")
	deleteCachesOnCleanup(t, c, ns)

	// A cache, through creation, repair of its Secret, and deletion.
	if _, err := applyYAML(ctx, c, v1Doc(ns, "m", 3, "7.2")); err != nil {
		t.Fatal(err)
	}
	waitReady(t, c, ns, "m", 3, 2*time.Minute)
	framework.Eventually(t, 30*time.Second, "the legacy finalizer removed and only v2 recorded as stored", func() (bool, string, error) {
		mc, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Get(ctx, "legacy", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		stored, err := c.Kubectl(ctx, "get", "crd", "managedcaches.cache.example.com", "-o", "jsonpath={.status.storedVersions}")
		return len(mc.GetFinalizers()) == 0 && stored == `["v2"]`, fmt.Sprintf("finalizers %v, storedVersions %s", mc.GetFinalizers(), stored), err
	})
	// Storage growth: the claims expanded, the StatefulSet replaced; and one refused by a class
	// that does not allow expansion (read by name).
	if _, err := c.Kubectl(ctx, "patch", "managedcache", "m", "-n", ns, "--type=merge", "-p", `{"spec":{"storage":{"size":"2Gi"}}}`); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, time.Minute, "m's StatefulSet replaced with 2Gi templates", func() (bool, string, error) {
		out, err := c.Kubectl(ctx, "get", "statefulset", "m", "-n", ns, "-o", "jsonpath={.spec.volumeClaimTemplates[0].spec.resources.requests.storage}")
		return out == "2Gi", out, err
	})
	if err := c.ApplyServerSide(ctx, storageDoc(ns, "fx", 1, "1Gi", "fixed")); err != nil {
		t.Fatal(err)
	}
	waitReady(t, c, ns, "fx", 1, time.Minute)
	if err := c.ApplyServerSide(ctx, storageDoc(ns, "fx", 1, "2Gi", "fixed")); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 30*time.Second, "fx's growth refused", func() (bool, string, error) {
		out, err := c.Kubectl(ctx, "get", "managedcache", "fx", "-n", ns, "-o", `jsonpath={.status.conditions[?(@.type=="StorageResizing")].reason}`)
		return out == "ExpansionNotAllowed", out, err
	})
	// A scale-down is judged with the cache's annotations read live.
	if _, err := c.Kubectl(ctx, "scale", "managedcache", "m", "-n", ns, "--replicas=2"); err != nil {
		t.Fatal(err)
	}
	// Drift of an existing child: at 5 members the budget allows 2 unavailable (a patch).
	if _, err := c.Kubectl(ctx, "scale", "managedcache", "m", "-n", ns, "--replicas=5"); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 30*time.Second, "m's PodDisruptionBudget to allow 2 unavailable", func() (bool, string, error) {
		out, err := c.Kubectl(ctx, "get", "poddisruptionbudget", "m", "-n", ns, "-o", "jsonpath={.spec.maxUnavailable}")
		return out == "2", out, err
	})
	// A version change: the StatefulSet's updateStrategy is OnDelete, and the operator rolls the
	// members by deleting their pods.
	if _, err := c.Kubectl(ctx, "patch", "managedcache", "m", "-n", ns, "--type=merge", "-p", `{"spec":{"engine":{"version":"8.0"}}}`); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, time.Minute, "m's 5 members rolled to the new revision", func() (bool, string, error) {
		out, err := c.Kubectl(ctx, "get", "statefulset", "m", "-n", ns, "-o", "jsonpath={.status.updatedReplicas}/{.status.readyReplicas}")
		return out == "5/5", "updated/ready " + out, err
	})
	if _, err := c.Kubectl(ctx, "label", "secret", "m-auth", "-n", ns, "app.kubernetes.io/instance-"); err != nil {
		t.Fatal(err)
	}
	// Children whose managed-by label was removed: the informers no longer show them, the create
	// finds each (get), and the operator restores it.
	for _, kind := range []string{"service", "statefulset", "poddisruptionbudget", "configmap"} {
		name := "m"
		if kind == "configmap" {
			name = "m-config"
		}
		if _, err := c.Kubectl(ctx, "label", kind, name, "-n", ns, "app.kubernetes.io/managed-by-"); err != nil {
			t.Fatal(err)
		}
		framework.Eventually(t, 30*time.Second, "the "+kind+"'s label to be restored", func() (bool, string, error) {
			out, err := c.Kubectl(ctx, "get", kind, name, "-n", ns, "-o", "jsonpath={.metadata.labels.app\\.kubernetes\\.io/managed-by}")
			return out == "cache-operator", out, err
		})
	}
	framework.Eventually(t, 30*time.Second, "the Secret's label to be restored", func() (bool, string, error) {
		s, err := c.Kube.CoreV1().Secrets(ns).Get(ctx, "m-auth", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return s.Labels["app.kubernetes.io/instance"] == "m", fmt.Sprint(s.Labels), nil
	})
	// A cache whose Secret name is taken: create fails, get tells whose it is, the repeated
	// Warning is aggregated.
	createCache(t, c, ns, "taken", map[string]interface{}{"version": "7.2"})
	for i := 0; i < 2; i++ {
		if _, err := c.Kubectl(ctx, "annotate", "managedcache", "taken", "-n", ns, fmt.Sprintf("poke=%d", i), "--overwrite"); err != nil {
			t.Fatal(err)
		}
	}
	framework.Eventually(t, 30*time.Second, "the SecretFailed Warning to be counted twice or more", func() (bool, string, error) {
		out, err := c.Kubectl(ctx, "get", "events", "-n", ns, "--field-selector", "reason=SecretFailed", "-o", "jsonpath={.items[*].count}")
		return err == nil && out != "" && out != "1", "counts " + out, err
	})
	// Someone edits the webhook configuration: the operator puts it back.
	if _, err := c.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Patch(ctx, "cache-operator", types.JSONPatchType,
		[]byte(`[{"op":"replace","path":"/webhooks/0/timeoutSeconds","value":10}]`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 30*time.Second, "the webhook configuration to be restored, the certificate renewed", func() (bool, string, error) {
		vwc, err := c.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "cache-operator", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		log, _ := os.ReadFile(op.log)
		renewed := strings.Contains(string(log), "Renewed webhook certificates")
		return *vwc.Webhooks[0].TimeoutSeconds == 5 && renewed, fmt.Sprintf("timeout %d, renewed %v", *vwc.Webhooks[0].TimeoutSeconds, renewed), nil
	})
	// Backups (on the real nodes: a KWOK Job runs nothing): a store's Secret read, Jobs created,
	// backups' status written, one created by the schedule, one deleted by retention, the rest
	// with the cache (onDelete: Delete).
	outer := ns
	ns = c.RealNamespace(t, "rbac-backup")
	c.StoreSecret(t, ns, "store", c.ObjectStore(t), nil)
	createCacheV2(t, c, ns, "bk", v2Spec(1, map[string]interface{}{
		"backup": map[string]interface{}{"store": map[string]interface{}{"secretName": "store"}, "keep": int64(1), "onDelete": "Delete"},
	}))
	waitReady(t, c, ns, "bk", 1, 2*time.Minute)
	createBackup(t, c, ns, "bk-first", "bk")
	if st := waitBackup(t, c, ns, "bk-first", 2*time.Minute); st.Phase != "Completed" {
		t.Fatalf("backup as the ServiceAccount: %+v", st)
	}
	if _, err := c.Kubectl(ctx, "patch", "managedcache", "bk", "-n", ns, "--type=merge", "-p", `{"spec":{"backup":{"schedule":"@every 15s"}}}`); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 2*time.Minute, "a scheduled backup completed and the first deleted by retention", func() (bool, string, error) {
		l, err := c.Dynamic.Resource(mcbGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		var names []string
		first := false
		for _, b := range l.Items {
			names = append(names, b.GetName()+"="+readBackup(&b).Phase)
			first = first || b.GetName() == "bk-first"
		}
		return !first && len(l.Items) >= 1, fmt.Sprint(names), nil
	})
	if err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Delete(ctx, "bk", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, time.Minute, "bk deleted with its backups", func() (bool, string, error) {
		gone, err := isGone(c, mcV2GVR, ns, "bk")
		return gone, "", err
	})
	ns = outer
	if err := c.Dynamic.Resource(mcGVR).Namespace(ns).Delete(ctx, "m", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, time.Minute, "the cache to be deleted", func() (bool, string, error) {
		gone, err := isGone(c, mcGVR, ns, "m")
		return gone, "", err
	})

	// What the ServiceAccount did, from the audit log.
	used := map[string]bool{}
	var forbidden []string
	framework.Eventually(t, 15*time.Second, "the audit log to show the operator's requests", func() (bool, string, error) {
		events, err := c.AuditEventsAnyStage()
		if err != nil {
			return false, "", err
		}
		used, forbidden = map[string]bool{}, nil
		for _, ev := range events {
			if ev.User.Username != operatorSA || ev.ObjectRef == nil || ev.RequestReceivedTimestamp.Before(since) {
				continue
			}
			res := ev.ObjectRef.APIGroup + "/" + ev.ObjectRef.Resource
			if ev.ObjectRef.Subresource != "" {
				res += "/" + ev.ObjectRef.Subresource
			}
			if ev.ResponseStatus != nil && ev.ResponseStatus.Code == 403 {
				forbidden = append(forbidden, res+" "+ev.Verb)
				continue
			}
			used[res+" "+ev.Verb] = true
			if ev.Verb == "patch" && ev.ResponseStatus != nil && ev.ResponseStatus.Code == 201 {
				used[res+" create"] = true // a server-side apply that creates needs create too
			}
		}
		return len(used) > 10, fmt.Sprintf("%d distinct requests", len(used)), nil
	})
	if len(forbidden) > 0 {
		sort.Strings(forbidden)
		t.Errorf("requests the granted RBAC forbade: %v", forbidden)
	}

	// What the manifests grant.
	var granted []string
	cr, err := c.Kube.RbacV1().ClusterRoles().Get(ctx, "cache-operator", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	role, err := c.Kube.RbacV1().Roles("cache-operator-system").Get(ctx, "cache-operator-namespaced", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, rule := range append(cr.Rules, role.Rules...) {
		for _, g := range rule.APIGroups {
			for _, r := range rule.Resources {
				for _, v := range rule.Verbs {
					granted = append(granted, g+"/"+r+" "+v)
				}
			}
		}
	}
	var unused []string
	for _, g := range granted {
		if !used[g] && unobservable[g] == "" {
			unused = append(unused, g)
		}
	}
	if len(unused) > 0 {
		sort.Strings(unused)
		var seen []string
		for k := range used {
			seen = append(seen, k)
		}
		sort.Strings(seen)
		t.Errorf("granted but never used by the operator: %v\nused: %v", unused, seen)
	}
	t.Logf("%d granted permissions: %d seen used, %d needed without a request of their own (%d distinct requests seen)",
		len(granted), len(granted)-len(unobservable), len(unobservable), len(used))
}
