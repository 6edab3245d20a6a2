package operator

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"example.com/cache-operator/e2e/framework"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

var sessionsSpec = map[string]interface{}{"size": int64(3), "version": "7.2", "storageGi": int64(10), "evictionPolicy": "allkeys-lru"}

// TestInvalidSpecsAreRejectedAtApply: the API server answers bad input at once, naming the field
// and the rule.
func TestInvalidSpecsAreRejectedAtApply(t *testing.T) {
	c := framework.Setup(t)
	ctx := context.Background()
	ns := c.Namespace(t, "invalid")
	startOperator(t, c) // a v1 request is converted to v2, the stored version
	deleteCachesOnCleanup(t, c, ns)
	apply := func(name, spec string) error {
		doc := fmt.Sprintf("apiVersion: cache.example.com/v1\nkind: ManagedCache\nmetadata: {name: %s, namespace: %s}\nspec: %s\n", name, ns, spec)
		cmd := c.KubectlCmd(ctx, "apply", "-f", "-")
		cmd.Stdin = strings.NewReader(doc)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s", out)
		}
		return nil
	}
	long := strings.Repeat("a", 53)
	for _, tc := range []struct{ name, spec, want string }{
		{"size-0", `{size: 0, version: "7.2"}`, "spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1"},
		{"size-10", `{size: 10, version: "7.2"}`, "spec.size: Invalid value: 10: spec.size in body should be less than or equal to 9"},
		{"latest", `{version: latest}`, `spec.version: Invalid value: "latest": spec.version in body should match '^[0-9]+\.[0-9]+$'`},
		{"no-version", `{size: 1}`, "spec.version: Required value"},
		{"lru", `{version: "7.2", evictionPolicy: lru}`, `spec.evictionPolicy: Unsupported value: "lru": supported values: "noeviction", "allkeys-lru", "volatile-lru"`},
		{"storage-0", `{version: "7.2", storageGi: 0}`, "spec.storageGi: Invalid value: 0"},
		{long, `{version: "7.2"}`, "metadata.name may be at most 52 characters"},
		{"a.b", `{version: "7.2"}`, "metadata.name may not contain '.'"},
	} {
		err := apply(tc.name, tc.spec)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: kubectl apply said %v; want an error containing %q", tc.name, err, tc.want)
		}
	}
	// storageGi may grow but never shrink.
	if err := apply("grow", `{version: "7.2", storageGi: 10}`); err != nil {
		t.Fatal(err)
	}
	if err := apply("grow", `{version: "7.2", storageGi: 20}`); err != nil {
		t.Errorf("growing storageGi was rejected: %v", err)
	}
	err := apply("grow", `{version: "7.2", storageGi: 5}`)
	if want := "spec.storageGi: Invalid value: 5: storageGi may not shrink"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("shrinking storageGi: kubectl said %v; want %q", err, want)
	}
	// Defaults fill what the user left out.
	mc, err := c.Dynamic.Resource(mcGVR).Namespace(ns).Get(ctx, "grow", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if spec := mc.Object["spec"].(map[string]interface{}); spec["size"] != int64(1) || spec["evictionPolicy"] != "noeviction" {
		t.Errorf("defaults not applied: %v", spec)
	}
}

// TestCacheLifecycle follows one cache as a user would: Ready, idempotent, self-healing,
// scalable, and garbage-collected.
func TestCacheLifecycle(t *testing.T) {
	parallel(t)
	c := framework.Setup(t)
	ctx := context.Background()
	ns := c.Namespace(t, "shop")
	op := startOperatorIn(t, c, ns)
	deleteCachesOnCleanup(t, c, ns)
	createCache(t, c, ns, "sessions", sessionsSpec)
	mc := waitReady(t, c, ns, "sessions", 3, 2*time.Minute)
	// The operator has nothing to clean up outside the cluster, so it holds no deletion.
	if got := mc.GetFinalizers(); len(got) != 0 {
		t.Errorf("finalizers %v, want none", got)
	}
	if ep, _, _ := unstructured.NestedString(mc.Object, "status", "endpoint"); ep != "sessions-rw."+ns+".svc.cluster.local:6379" {
		t.Errorf("endpoint %q; want the read-write Service", ep)
	}
	if ep, _, _ := unstructured.NestedString(mc.Object, "status", "readEndpoint"); ep != "sessions-ro."+ns+".svc.cluster.local:6379" {
		t.Errorf("readEndpoint %q; want the read-only Service", ep)
	}
	pw := password(t, c, ns, "sessions")

	t.Run("columns", func(t *testing.T) {
		for _, tc := range []struct {
			resource string
			header   []string
			row      map[string]string
		}{
			// Simulated members are not observed: member 0 is labelled primary. SHARDS is empty
			// for a primary/replica cache.
			{"managedcache", []string{"NAME", "SHARDS", "REPLICAS", "READY", "ENGINE", "VERSION", "STATUS", "AGE", "ENDPOINT", "PRIMARY", "LAST-BACKUP"},
				map[string]string{"SHARDS": "", "REPLICAS": "3", "READY": "3", "ENGINE": "redis", "VERSION": "7.2", "STATUS": "AllReplicasReady",
					"ENDPOINT": "sessions-rw." + ns + ".svc.cluster.local:6379", "PRIMARY": "sessions-0"}},
			{"managedcaches.v1.cache.example.com", []string{"NAME", "SIZE", "READY", "STATUS", "AGE", "ENDPOINT", "PRIMARY"},
				map[string]string{"SIZE": "3", "READY": "3", "STATUS": "AllReplicasReady", "ENDPOINT": "sessions-rw." + ns + ".svc.cluster.local:6379", "PRIMARY": "sessions-0"}},
		} {
			out, err := c.Kubectl(ctx, "get", tc.resource, "sessions", "-n", ns, "-o", "wide")
			if err != nil {
				t.Fatal(err)
			}
			header, row := tableRow(out)
			if !reflect.DeepEqual(header, tc.header) {
				t.Errorf("%s: columns %v, want %v", tc.resource, header, tc.header)
				continue
			}
			for col, want := range tc.row {
				if row[col] != want {
					t.Errorf("%s: column %s is %q, want %q", tc.resource, col, row[col], want)
				}
			}
		}
	})

	t.Run("idempotence", func(t *testing.T) {
		since := time.Now()
		before := resourceVersions(t, c, ns, "sessions")
		for i := 0; i < 3; i++ {
			n := op.reconciles(ns, "sessions")
			out, err := c.Kubectl(ctx, "annotate", "managedcache", "sessions", "-n", ns, fmt.Sprintf("reconcile=force-%d", i), "--overwrite", "-o", "jsonpath={.metadata.resourceVersion}")
			if err != nil {
				t.Fatal(err)
			}
			before["ManagedCache"] = out // the user's own write
			op.waitReconciled(ns, "sessions", n)
			if after := resourceVersions(t, c, ns, "sessions"); !reflect.DeepEqual(before, after) {
				t.Fatalf("a reconcile of a correct cache changed resourceVersions:\nbefore %v\nafter  %v", before, after)
			}
		}
		if writes := operatorWrites(t, c, ns, since); len(writes) > 0 {
			t.Fatalf("the operator wrote while the cache was already right: %v", writes)
		}
	})

	t.Run("self-healing", func(t *testing.T) {
		for _, kind := range []string{"StatefulSet", "Service", "PodDisruptionBudget"} {
			old, err := getChild(c, kind, ns, "sessions")
			if err != nil {
				t.Fatal(err)
			}
			ch := children[kind]
			if err := c.Dynamic.Resource(ch.gvr).Namespace(ns).Delete(ctx, ch.name("sessions"), metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			framework.Eventually(t, 30*time.Second, kind+" to be recreated", func() (bool, string, error) {
				cur, err := getChild(c, kind, ns, "sessions")
				if err != nil {
					return false, "", err
				}
				return cur.GetUID() != old.GetUID() && cur.GetDeletionTimestamp() == nil, "uid " + string(cur.GetUID()), nil
			})
			t.Logf("%s recreated in %s", kind, time.Since(start).Round(time.Millisecond))
		}
		waitReady(t, c, ns, "sessions", 3, time.Minute)
		if got := password(t, c, ns, "sessions"); got != pw {
			t.Fatal("the password changed when the StatefulSet was recreated")
		}
		// The Secret informer selects on the managed-by label: removing it hides the Secret from
		// the cache, and the operator must still find it, restore the label and keep the password.
		if _, err := c.Kubectl(ctx, "label", "secret", "sessions-auth", "-n", ns, "app.kubernetes.io/managed-by-"); err != nil {
			t.Fatal(err)
		}
		framework.Eventually(t, 30*time.Second, "the Secret's managed-by label to be restored", func() (bool, string, error) {
			s, err := getChild(c, "Secret", ns, "sessions")
			if err != nil {
				return false, "", err
			}
			return s.GetLabels()["app.kubernetes.io/managed-by"] == "cache-operator", fmt.Sprint(s.GetLabels()), nil
		})
		if got := password(t, c, ns, "sessions"); got != pw {
			t.Fatal("the password changed when the Secret's label was restored")
		}

		// A field we own is reverted; a field we do not own is kept.
		sts := children["StatefulSet"]
		patch := `{"metadata":{"annotations":{"team.example.com/owner":"payments"}},"spec":{"replicas":7}}`
		if _, err := c.Dynamic.Resource(sts.gvr).Namespace(ns).Patch(ctx, "sessions", types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: "someone-else"}); err != nil {
			t.Fatal(err)
		}
		framework.Eventually(t, 30*time.Second, "spec.replicas reverted to 3, the other annotation kept", func() (bool, string, error) {
			cur, err := getChild(c, "StatefulSet", ns, "sessions")
			if err != nil {
				return false, "", err
			}
			replicas, _, _ := unstructured.NestedInt64(cur.Object, "spec", "replicas")
			owner := cur.GetAnnotations()["team.example.com/owner"]
			return replicas == 3 && owner == "payments", fmt.Sprintf("replicas=%d annotation=%q", replicas, owner), nil
		})
	})

	t.Run("scale", func(t *testing.T) {
		if _, err := c.Kubectl(ctx, "scale", "managedcache/sessions", "-n", ns, "--replicas=5"); err != nil {
			t.Fatal(err)
		}
		waitReady(t, c, ns, "sessions", 5, 2*time.Minute)
		cur, err := getChild(c, "StatefulSet", ns, "sessions")
		if err != nil {
			t.Fatal(err)
		}
		if r, _, _ := unstructured.NestedInt64(cur.Object, "spec", "replicas"); r != 5 {
			t.Errorf("StatefulSet replicas %d after kubectl scale --replicas=5", r)
		}
		// The StatefulSet was made with a plain create and has been applied since: the operator's
		// fields moved to its Apply entry (computed from its informer's copy), and the other
		// managers' entries are intact.
		entries := map[string]bool{}
		for _, e := range cur.GetManagedFields() {
			entries[e.Manager+"/"+string(e.Operation)+"/"+e.Subresource] = true
		}
		if entries["cache-operator/Update/"] || !entries["cache-operator/Apply/"] ||
			!entries["kube-controller-manager/Update/status"] || !entries["someone-else/Update/"] {
			t.Errorf("StatefulSet managedFields %v; want the operator's Apply entry, no Update entry of its own, and the others' kept", entries)
		}
		if got := password(t, c, ns, "sessions"); got != pw {
			t.Fatal("the password changed on scale")
		}
	})

	t.Run("garbage-collection", func(t *testing.T) {
		if err := c.Dynamic.Resource(mcGVR).Namespace(ns).Delete(ctx, "sessions", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		framework.Eventually(t, time.Minute, "the cache and every child to be gone", func() (bool, string, error) {
			var left []string
			if gone, err := isGone(c, mcGVR, ns, "sessions"); err != nil || !gone {
				left = append(left, "ManagedCache")
			}
			for kind, ch := range children {
				if gone, err := isGone(c, ch.gvr, ns, ch.name("sessions")); err != nil || !gone {
					left = append(left, kind)
				}
			}
			return len(left) == 0, "still present: " + strings.Join(left, ","), nil
		})
	})
}

// TestForeignChildIsNotAdopted: a Service of the same name that the cache does not own is left
// alone, and the cache says so.
func TestForeignChildIsNotAdopted(t *testing.T) {
	c := framework.Setup(t)
	ctx := context.Background()
	ns := c.Namespace(t, "conflict")
	if _, err := c.Kubectl(ctx, "create", "service", "clusterip", "taken", "-n", ns, "--tcp=80:80"); err != nil {
		t.Fatal(err)
	}
	startOperator(t, c)
	deleteCachesOnCleanup(t, c, ns)
	createCache(t, c, ns, "taken", map[string]interface{}{"version": "7.2"})
	framework.Eventually(t, time.Minute, "Ready=False with reason ServiceFailed", func() (bool, string, error) {
		mc, err := c.Dynamic.Resource(mcGVR).Namespace(ns).Get(ctx, "taken", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		status, reason, msg := readyReason(mc)
		return status == "False" && reason == "ServiceFailed" && strings.Contains(msg, "not adopting it"),
			fmt.Sprintf("Ready=%s reason=%s message=%q", status, reason, msg), nil
	})
	svc, err := getChild(c, "Service", ns, "taken")
	if err != nil {
		t.Fatal(err)
	}
	if len(svc.GetOwnerReferences()) != 0 || svc.GetLabels()["app.kubernetes.io/managed-by"] != "" {
		t.Errorf("the foreign Service was modified: owners %v labels %v", svc.GetOwnerReferences(), svc.GetLabels())
	}
	out, err := c.Kubectl(ctx, "get", "events", "-n", ns, "--field-selector", "reason=ServiceFailed,type=Warning", "-o", "name")
	if err != nil || strings.TrimSpace(out) == "" {
		t.Errorf("no Warning event ServiceFailed (err %v)", err)
	}
}

// tableRow reads kubectl's table of one object: the column names, and the row's cells by column,
// cut at the columns' starts (an empty cell, such as SHARDS of a primary/replica cache, is "").
func tableRow(out string) ([]string, map[string]string) {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) < 2 {
		return nil, nil
	}
	head, line := lines[0], lines[1]
	var names []string
	var starts []int
	for i := 0; i < len(head); i++ {
		if head[i] != ' ' && (i == 0 || head[i-1] == ' ') {
			starts = append(starts, i)
			end := strings.IndexByte(head[i:], ' ')
			if end < 0 {
				end = len(head) - i
			}
			names = append(names, head[i:i+end])
		}
	}
	row := map[string]string{}
	for k, from := range starts {
		to := len(line)
		if k+1 < len(starts) {
			to = min(starts[k+1], len(line))
		}
		if from < len(line) {
			row[names[k]] = strings.TrimSpace(line[from:to])
		}
	}
	return names, row
}
