// Package chart tests the Helm chart (charts/cache-operator) with a real helm (bin/cluster/helm,
// built by make cluster-bin): lint, template golden files, that it renders the objects the
// kustomize manifests do, and install, upgrade and uninstall on the local cluster with a cache
// Ready on the real nodes.
package chart

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"example.com/cache-operator/e2e/framework"
)

var update = flag.Bool("update", false, "rewrite the golden files in e2e/chart/testdata")

const opNS = "cache-operator-system"

func TestMain(m *testing.M) {
	flag.Parse()
	if os.Getenv("CACHE_E2E") == "1" {
		// The real nodes run image cache-operator from bin/cache-operator (localcluster/node/images.yaml).
		if _, err := framework.BuildOperator(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}

// tool returns bin/cluster/<name>; without it the test is skipped outside make test and fails in it.
func tool(t *testing.T, name string) string {
	t.Helper()
	path := filepath.Join(framework.RepoRoot(), "bin", "cluster", name)
	if _, err := os.Stat(path); err != nil {
		if os.Getenv("CACHE_E2E") == "" {
			t.Skipf("needs bin/cluster/%s (make cluster-bin); make test runs it", name)
		}
		t.Fatalf("%s: %v (make cluster-bin builds it)", name, err)
	}
	return path
}

// run runs a program and returns its standard output; standard error goes to the error.
func run(t *testing.T, env []string, bin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = framework.RepoRoot()
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %v\n%s%s", filepath.Base(bin), strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

func chartDir() string { return filepath.Join(framework.RepoRoot(), "charts", "cache-operator") }

// template renders the chart as release cache-operator in cache-operator-system with args.
func template(t *testing.T, args ...string) string {
	t.Helper()
	out, err := run(t, nil, tool(t, "helm"), append([]string{"template", "cache-operator", chartDir(), "--namespace", opNS}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

type objectKey struct{ kind, namespace, name string }

func (k objectKey) String() string { return k.kind + " " + k.namespace + "/" + k.name }

// objects parses a YAML stream into objects by kind, namespace and name.
func objects(t *testing.T, stream string) map[objectKey]*unstructured.Unstructured {
	t.Helper()
	out := map[objectKey]*unstructured.Unstructured{}
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(stream), 4096)
	for {
		var obj map[string]interface{}
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatal(err)
		}
		if obj == nil {
			continue
		}
		u := &unstructured.Unstructured{Object: obj}
		out[objectKey{u.GetKind(), u.GetNamespace(), u.GetName()}] = u
	}
}

func TestChartLint(t *testing.T) {
	out, err := run(t, nil, tool(t, "helm"), "lint", "--strict", chartDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Log(strings.TrimSpace(out))
}

// TestChartTemplates compares helm template's output for the default values and for a values
// file that sets every value with e2e/chart/testdata/*.golden.yaml (go test ./e2e/chart -update).
func TestChartTemplates(t *testing.T) {
	dir := filepath.Join(framework.RepoRoot(), "e2e", "chart", "testdata")
	for _, tc := range []struct{ name, values string }{{"default", ""}, {"every-value", "every-value.values.yaml"}} {
		t.Run(tc.name, func(t *testing.T) {
			var args []string
			if tc.values != "" {
				args = append(args, "--values", filepath.Join(dir, tc.values))
			}
			got := template(t, args...)
			golden := filepath.Join(dir, tc.name+".golden.yaml")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("helm template differs from %s (go test ./e2e/chart -update, then read the diff):\n%s", golden, firstDifference(string(want), got))
			}
		})
	}
}

func firstDifference(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < max(len(w), len(g)); i++ {
		var a, b string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			b = g[i]
		}
		if a != b {
			return fmt.Sprintf("line %d:\n  golden: %q\n  helm:   %q", i+1, a, b)
		}
	}
	return ""
}

// TestChartRendersTheKustomizeManifests: with the default values the chart renders the objects
// `kubectl kustomize manifests/` does, but the Namespace (Helm's --create-namespace) and the CRDs'
// helm.sh/resource-policy annotation; with monitoring on, the ServiceMonitor, PrometheusRule and
// dashboard of manifests/monitoring/.
func TestChartRendersTheKustomizeManifests(t *testing.T) {
	kust, err := run(t, nil, tool(t, "kubectl"), "kustomize", filepath.Join(framework.RepoRoot(), "manifests"))
	if err != nil {
		t.Fatal(err)
	}
	fromKustomize, fromHelm := objects(t, kust), objects(t, template(t))
	delete(fromKustomize, objectKey{"Namespace", "", opNS})
	for k, o := range fromHelm {
		if k.kind == "CustomResourceDefinition" {
			ann := o.GetAnnotations()
			if ann["helm.sh/resource-policy"] != "keep" {
				t.Errorf("%s: annotations %v; want helm.sh/resource-policy: keep", k, ann)
			}
			delete(ann, "helm.sh/resource-policy")
			if len(ann) == 0 {
				ann = nil
			}
			o.SetAnnotations(ann)
		}
	}
	compare(t, fromKustomize, fromHelm)

	monitoring := objects(t, template(t, "--set", "monitoring.serviceMonitor.enabled=true", "--set", "monitoring.prometheusRule.enabled=true",
		"--set", "monitoring.dashboard.enabled=true"))
	dir := filepath.Join(framework.RepoRoot(), "manifests", "monitoring")
	want := map[objectKey]*unstructured.Unstructured{}
	for _, f := range []string{"servicemonitor.yaml", "prometheusrule.yaml"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		for k, o := range objects(t, string(b)) {
			want[k] = o
		}
	}
	got := map[objectKey]*unstructured.Unstructured{}
	for k, o := range monitoring {
		if k.kind == "ServiceMonitor" || k.kind == "PrometheusRule" {
			got[k] = o
		}
	}
	compare(t, want, got)
	dashboard, err := os.ReadFile(filepath.Join(dir, "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	cm := monitoring[objectKey{"ConfigMap", opNS, "cache-operator-dashboard"}]
	if data, _, _ := unstructured.NestedString(cm.Object, "data", "cache-operator.json"); data != strings.TrimRight(string(dashboard), "\n") {
		t.Errorf("the dashboard ConfigMap does not hold manifests/monitoring/grafana-dashboard.json")
	}
	t.Logf("%d objects the same from kustomize and Helm; with monitoring on, the ServiceMonitor, PrometheusRule and dashboard the same as manifests/monitoring", len(fromHelm))
}

func compare(t *testing.T, want, got map[objectKey]*unstructured.Unstructured) {
	t.Helper()
	var keys []objectKey
	for k := range want {
		keys = append(keys, k)
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: rendered by Helm only", k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	for _, k := range keys {
		g, ok := got[k]
		if !ok {
			t.Errorf("%s: not rendered by Helm", k)
			continue
		}
		if !reflect.DeepEqual(want[k].Object, g.Object) {
			t.Errorf("%s differs:\n  want %v\n  helm %v", k, want[k].Object, g.Object)
		}
	}
}

var (
	mcV2 = schema.GroupVersionResource{Group: "cache.example.com", Version: "v2", Resource: "managedcaches"}
	vwc  = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingwebhookconfigurations"}
)

// installed is every object the chart (default values) puts in a cluster, and those the operator
// makes for itself and its ClusterRole owns.
func installed() []struct {
	gvr        schema.GroupVersionResource
	namespace  string
	name       string
	byOperator bool
} {
	type o = struct {
		gvr        schema.GroupVersionResource
		namespace  string
		name       string
		byOperator bool
	}
	g := func(group, version, resource string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: group, Version: version, Resource: resource}
	}
	return []o{
		{g("apps", "v1", "deployments"), opNS, "cache-operator", false},
		{g("policy", "v1", "poddisruptionbudgets"), opNS, "cache-operator", false},
		{g("", "v1", "services"), opNS, "cache-operator-metrics", false},
		{g("", "v1", "services"), opNS, "cache-operator-webhook", false},
		{g("", "v1", "serviceaccounts"), opNS, "cache-operator", false},
		{g("rbac.authorization.k8s.io", "v1", "roles"), opNS, "cache-operator-namespaced", false},
		{g("rbac.authorization.k8s.io", "v1", "rolebindings"), opNS, "cache-operator-namespaced", false},
		{g("rbac.authorization.k8s.io", "v1", "clusterroles"), "", "cache-operator", false},
		{g("rbac.authorization.k8s.io", "v1", "clusterrolebindings"), "", "cache-operator", false},
		{vwc, "", "cache-operator", true},
		{g("", "v1", "secrets"), opNS, "cache-operator-webhook-tls", true},
		{g("coordination.k8s.io", "v1", "leases"), opNS, "cache-operator", true},
	}
}

// TestChartInstallUpgradeUninstall: helm install on the local cluster (the CRDs applied earlier
// with kubectl adopted, as README says), a cache Ready on the real nodes; helm upgrade with one
// replica and other flags; helm uninstall, which says it keeps the CRDs and leaves nothing else.
func TestChartInstallUpgradeUninstall(t *testing.T) {
	c := framework.Setup(t)
	helm := tool(t, "helm")
	ctx := context.Background()
	env := []string{"KUBECONFIG=" + c.Kubeconfig}
	// CRDs that kubectl applied earlier (another test package, a run against a used cluster) are
	// adopted: Helm's ownership labels and annotations, the README's step for a cluster moving
	// from kustomize to Helm; and the conversion webhook pointed at the Service (as hack/deploy.sh
	// does): operators outside the cluster registered a URL, which the chart's Service may not join.
	// On a fresh cluster (make test) Helm creates them.
	for _, crd := range []string{"managedcaches.cache.example.com", "managedcachebackups.cache.example.com"} {
		if _, err := c.Kubectl(ctx, "get", "crd", crd); err != nil {
			t.Logf("CRD %s not installed yet: helm install creates it", crd)
			continue
		}
		if crd == "managedcaches.cache.example.com" {
			if out, err := c.Kubectl(ctx, "patch", "crd", crd, "--type=merge", "-p",
				`{"spec":{"conversion":{"webhook":{"clientConfig":{"url":null,"service":{"namespace":"`+opNS+`","name":"cache-operator-webhook","path":"/convert","port":443}}}}}}`); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
		}
		if out, err := c.Kubectl(ctx, "label", "--overwrite", "crd", crd, "app.kubernetes.io/managed-by=Helm"); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if out, err := c.Kubectl(ctx, "annotate", "--overwrite", "crd", crd, "meta.helm.sh/release-name=cache-operator", "meta.helm.sh/release-namespace="+opNS); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	flags := `--set-json=flags=["--workers=4","--kube-api-qps=200","--kube-api-burst=400","--member-networks=198.18.0.0/15"]`
	t.Cleanup(func() {
		// Whatever happened, no operator of this test is left to the next ones, and the CRD's
		// conversion webhook points at the address their operators serve.
		_, _ = run(t, env, helm, "uninstall", "cache-operator", "--namespace", opNS, "--ignore-not-found", "--wait", "--timeout=2m")
		if out, err := c.Kubectl(ctx, "patch", "crd", "managedcaches.cache.example.com", "--type=merge", "-p",
			`{"spec":{"conversion":{"webhook":{"clientConfig":{"service":null,"url":"https://127.0.0.1:9443/convert"}}}}}`); err != nil {
			t.Logf("cleanup: %v\n%s", err, out)
		}
	})
	start := time.Now()
	out, err := run(t, env, helm, "install", "cache-operator", chartDir(), "--namespace", opNS, "--create-namespace", flags, "--wait", "--timeout=3m")
	if err != nil {
		t.Fatal(err)
	}
	waitDeployment(t, c, 2, time.Minute)
	t.Logf("helm install: 2 replicas Ready %.1f s after it began", time.Since(start).Seconds())
	if !strings.Contains(out, "STATUS: deployed") {
		t.Errorf("helm install said:\n%s", out)
	}

	ns := c.RealNamespace(t, "chart")
	doc := fmt.Sprintf("apiVersion: cache.example.com/v2\nkind: ManagedCache\nmetadata: {name: sessions, namespace: %s}\n"+
		"spec: {replicas: 3, engine: {name: redis, version: \"7.2\"}, storage: {size: 1Gi}}\n", ns)
	start = time.Now()
	if err := c.ApplyServerSide(ctx, doc); err != nil {
		t.Fatal(err)
	}
	c.WaitCacheReady(t, ns, "sessions", 3, 3*time.Minute)
	t.Logf("a cache of 3 on the real nodes Ready %.1f s after it was created", time.Since(start).Seconds())
	for _, o := range installed() {
		if _, err := c.Dynamic.Resource(o.gvr).Namespace(o.namespace).Get(ctx, o.name, metav1.GetOptions{}); err != nil {
			t.Errorf("after install: %s %s/%s: %v", o.gvr.Resource, o.namespace, o.name, err)
		}
	}

	// An upgrade with changed values: one replica, two workers.
	upgraded := `--set-json=flags=["--workers=2","--kube-api-qps=200","--kube-api-burst=400","--member-networks=198.18.0.0/15"]`
	start = time.Now()
	if out, err := run(t, env, helm, "upgrade", "cache-operator", chartDir(), "--namespace", opNS, "--set", "replicas=1", upgraded, "--wait", "--timeout=3m"); err != nil {
		t.Fatal(err)
	} else if !strings.Contains(out, "REVISION: 2") {
		t.Errorf("helm upgrade said:\n%s", out)
	}
	waitDeployment(t, c, 1, 2*time.Minute)
	args, err := c.Kubectl(ctx, "get", "deployment", "cache-operator", "-n", opNS, "-o", "jsonpath={.spec.template.spec.containers[0].args}")
	if err != nil || !strings.Contains(args, "--workers=2") || strings.Contains(args, "--workers=4") {
		t.Errorf("args after the upgrade: %s (%v); want --workers=2", args, err)
	}
	t.Logf("helm upgrade to 1 replica and --workers=2: rolled out in %.1f s", time.Since(start).Seconds())
	// The upgraded operator works: a second cache becomes Ready.
	if err := c.ApplyServerSide(ctx, strings.ReplaceAll(strings.ReplaceAll(doc, "sessions", "after-upgrade"), "replicas: 3", "replicas: 1")); err != nil {
		t.Fatal(err)
	}
	c.WaitCacheReady(t, ns, "after-upgrade", 1, 3*time.Minute)

	out, err = run(t, env, helm, "uninstall", "cache-operator", "--namespace", opNS, "--wait", "--timeout=2m")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("helm uninstall said: %s", strings.TrimSpace(out))
	if !strings.Contains(out, "kept due to the resource policy") || !strings.Contains(out, "managedcaches.cache.example.com") {
		t.Errorf("helm uninstall did not say it keeps the CRDs:\n%s", out)
	}
	framework.Eventually(t, time.Minute, "every object of the chart and of the operator gone (the garbage collector follows the ClusterRole)", func() (bool, string, error) {
		var left []string
		for _, o := range installed() {
			_, err := c.Dynamic.Resource(o.gvr).Namespace(o.namespace).Get(ctx, o.name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				return false, "", err
			default:
				left = append(left, o.gvr.Resource+" "+o.name)
			}
		}
		pods, err := c.Kube.CoreV1().Pods(opNS).List(ctx, metav1.ListOptions{LabelSelector: "control-plane=controller-manager"})
		if err != nil {
			return false, "", err
		}
		if n := len(pods.Items); n > 0 {
			left = append(left, fmt.Sprintf("%d operator pods", n))
		}
		return len(left) == 0, "left: " + strings.Join(left, ", "), nil
	})
	for _, crd := range []string{"managedcaches.cache.example.com", "managedcachebackups.cache.example.com"} {
		if _, err := c.Kubectl(ctx, "get", "crd", crd); err != nil {
			t.Errorf("CRD %s gone after uninstall: %v", crd, err)
		}
	}
	if _, err := c.Dynamic.Resource(mcV2).Namespace(ns).Get(ctx, "sessions", metav1.GetOptions{}); err != nil {
		t.Errorf("the cache is gone after uninstall: %v", err)
	}
}

func waitDeployment(t *testing.T, c *framework.Cluster, replicas int32, timeout time.Duration) {
	t.Helper()
	framework.Eventually(t, timeout, fmt.Sprintf("the operator Deployment to have %d ready, updated replicas", replicas), func() (bool, string, error) {
		d, err := c.Kube.AppsV1().Deployments(opNS).Get(context.Background(), "cache-operator", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		s := d.Status
		return s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == replicas && s.ReadyReplicas == replicas && s.Replicas == replicas,
			fmt.Sprintf("replicas %d, updated %d, ready %d", s.Replicas, s.UpdatedReplicas, s.ReadyReplicas), nil
	})
}
