package operator

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"testing"
	"time"

	"example.com/cache-operator/e2e/framework"
	"example.com/cache-operator/engine/api"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// applyYAML runs kubectl apply -f - with doc.
func applyYAML(ctx context.Context, c *framework.Cluster, doc string) (string, error) {
	cmd := c.KubectlCmd(ctx, "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(doc)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl apply: %w: %s", err, out)
	}
	return string(out), nil
}

func v1Doc(ns, name string, size int, version string) string {
	return fmt.Sprintf("apiVersion: cache.example.com/v1\nkind: ManagedCache\nmetadata: {name: %s, namespace: %s}\nspec: {size: %d, version: %q, storageGi: 1}\n", name, ns, size, version)
}

func wantRejected(t *testing.T, what string, err error, want string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("%s: got %v; want it rejected with %q", what, err, want)
	}
}

// TestAdmissionRulesThroughTheAPIServer: the quorum guard and the downgrade rule as a user meets
// them with kubectl, in both API versions and on the scale subresource.
func TestAdmissionRulesThroughTheAPIServer(t *testing.T) {
	c := framework.Setup(t)
	ctx := context.Background()
	ns := c.Namespace(t, "admission")
	startOperator(t, c)
	deleteCachesOnCleanup(t, c, ns)
	if _, err := applyYAML(ctx, c, v1Doc(ns, "guarded", 5, "8.0")); err != nil {
		t.Fatal(err)
	}
	waitReady(t, c, ns, "guarded", 5, 2*time.Minute)
	denied := `admission webhook "validate.managedcaches.cache.example.com" denied the request: `

	_, err := c.Kubectl(ctx, "scale", "managedcache/guarded", "-n", ns, "--replicas=2")
	wantRejected(t, "kubectl scale 5 -> 2", err, denied+"spec.replicas (scale): scaling from 5 to 2 members leaves fewer than a majority (3)")
	_, err = applyYAML(ctx, c, v1Doc(ns, "guarded", 1, "8.0"))
	wantRejected(t, "kubectl apply v1 size 5 -> 1", err, denied+"spec.size: scaling from 5 to 1 members")
	_, err = c.Kubectl(ctx, "patch", "managedcaches.v2.cache.example.com", "guarded", "-n", ns, "--type=merge", "-p", `{"spec":{"replicas":2}}`)
	wantRejected(t, "v2 patch replicas 5 -> 2", err, denied+"spec.replicas: scaling from 5 to 2")
	_, err = applyYAML(ctx, c, v1Doc(ns, "guarded", 5, "7.2"))
	wantRejected(t, "kubectl apply v1 version 8.0 -> 7.2", err, denied+"spec.version: changing from redis 8.0 to redis 7.2 would lose the data: "+
		"redis 7.2 reads snapshot formats up to 11 and the data is in format 12")
	_, err = c.Kubectl(ctx, "patch", "managedcaches.v2.cache.example.com", "guarded", "-n", ns, "--type=merge", "-p", `{"spec":{"engine":{"name":"valkey","version":"8.1"}}}`)
	wantRejected(t, "v2 patch redis 8.0 -> valkey 8.1", err, denied+"spec.engine: changing from redis 8.0 to valkey 8.1 would lose the data: "+
		"valkey reads redis data up to redis 7.2's snapshot format (11) and the data is in format 12")
	// Versions the operator cannot run: refused by the CRD's rule, without the webhook.
	_, err = c.Kubectl(ctx, "patch", "managedcaches.v2.cache.example.com", "guarded", "-n", ns, "--type=merge", "-p", `{"spec":{"engine":{"version":"6.2"}}}`)
	wantRejected(t, "v2 patch version 8.0 -> 6.2", err, "unsupported engine and version; supported: redis 7.0, 7.2, 8.0; valkey 8.0, 8.1")
	_, err = c.Kubectl(ctx, "patch", "managedcaches.v2.cache.example.com", "guarded", "-n", ns, "--type=merge", "-p", `{"spec":{"engine":{"name":"valkey"}}}`)
	wantRejected(t, "v2 patch redis 8.0 -> valkey 8.0 (the engine alone)", err, denied+"spec.engine: changing from redis 8.0 to valkey 8.0 would lose the data")
	_, err = applyYAML(ctx, c, v1Doc(ns, "redis81", 1, "8.1"))
	wantRejected(t, "kubectl apply v1 (redis) version 8.1", err, denied+"spec.version: redis 8.1 is not supported; supported: redis 7.0, 7.2, 8.0; valkey 8.0, 8.1")
	_, err = applyYAML(ctx, c, v1Doc(ns, "other", 1, "6.2"))
	wantRejected(t, "kubectl apply v1 version 6.2", err, `spec.version: Unsupported value: "6.2": supported values: "7.0", "7.2", "8.0", "8.1"`)

	// Sharded caches: the range, the mode change and what is not served for them yet, by the
	// schema in v2 and by the webhook in v1 (whose spec.shards is in the v2-spec annotation). What
	// passes is applied with --dry-run=server: its namespace has no real nodes.
	shardedWith := func(name string, shards int, more string) string {
		return fmt.Sprintf("apiVersion: cache.example.com/v2\nkind: ManagedCache\nmetadata: {name: %s, namespace: %s}\nspec: {shards: %d, replicas: 2, engine: {version: \"8.0\"}%s}\n", name, ns, shards, more)
	}
	sharded := func(name string, shards int) string { return shardedWith(name, shards, "") }
	dryRun := func(doc string) error {
		cmd := c.KubectlCmd(ctx, "apply", "--dry-run=server", "-f", "-")
		cmd.Stdin = strings.NewReader(doc)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("kubectl apply --dry-run=server: %w: %s", err, out)
		}
		return nil
	}
	v1Sharded := func(name string, size, shards int) string {
		return fmt.Sprintf("apiVersion: cache.example.com/v1\nkind: ManagedCache\nmetadata: {name: %s, namespace: %s, annotations: {cache.example.com/v2-spec: '{\"shards\":%d}'}}\nspec: {size: %d, version: \"8.0\", storageGi: 1}\n", name, ns, shards, size)
	}
	_, err = applyYAML(ctx, c, sharded("two-shards", 2))
	wantRejected(t, "v2 create of 2 shards", err, "spec.shards: Invalid value: 2: spec.shards in body should be greater than or equal to 3")
	if err := dryRun(sharded("three-shards", 3)); err != nil {
		t.Errorf("v2 create of 3 shards: %v", err)
	}
	if err := dryRun(shardedWith("backed-up", 3, ", backup: {store: {secretName: s3}}")); err != nil {
		t.Errorf("v2 create of 3 shards with a backup: %v", err)
	}
	if err := dryRun(shardedWith("restored", 3, ", restore: {backup: b1}")); err != nil {
		t.Errorf("v2 create of 3 shards restoring a backup: %v", err)
	}
	_, err = applyYAML(ctx, c, shardedWith("restored-path", 3, ", restore: {path: ns/c/b1.rdb, store: {secretName: s3}}"))
	wantRejected(t, "v2 create of 3 shards restoring a path", err, api.ShardedRestorePathNotServed)
	if err := dryRun(shardedWith("hidden", 3, ", hibernate: true")); err != nil {
		t.Errorf("v2 create of 3 shards hibernating: %v", err)
	}
	if err := dryRun(shardedWith("secret", 3, ", tls: {enabled: true}")); err != nil {
		t.Errorf("v2 create of 3 shards with TLS: %v", err)
	}
	_, err = c.Kubectl(ctx, "patch", "managedcaches.v2.cache.example.com", "guarded", "-n", ns, "--type=merge", "-p", `{"spec":{"shards":3}}`)
	wantRejected(t, "v2 patch adding shards", err, "spec.shards is set when the cache is created, never added or removed afterwards")
	if err := dryRun(v1Sharded("v1-shards", 2, 3)); err != nil {
		t.Errorf("v1 create of 3 shards: %v", err)
	}
	_, err = applyYAML(ctx, c, v1Sharded("v1-two-shards", 2, 2))
	wantRejected(t, "v1 create of 2 shards", err, denied+"metadata.annotations[cache.example.com/v2-spec].shards: must be between 3 and 32")
	_, err = applyYAML(ctx, c, v1Sharded("guarded", 5, 3))
	wantRejected(t, "v1 apply adding shards", err, denied+"metadata.annotations[cache.example.com/v2-spec].shards: cannot turn a primary/replica cache into a sharded cache of 3 shards")
	// spec.restore, which the CRD keeps from being added in v2, cannot be added through v1's
	// annotation either (it was: the v1 schema cannot see it).
	_, err = c.Kubectl(ctx, "patch", "managedcaches.v2.cache.example.com", "guarded", "-n", ns, "--type=merge", "-p", `{"spec":{"restore":{"backup":"nope"}}}`)
	wantRejected(t, "v2 patch adding spec.restore", err, "spec.restore is set when the cache is created, never added, changed or removed afterwards")
	_, err = c.Kubectl(ctx, "patch", "managedcaches.v1.cache.example.com", "guarded", "-n", ns, "--type=merge", "-p",
		`{"metadata":{"annotations":{"cache.example.com/v2-spec":"{\"restore\":{\"backup\":\"nope\"}}"}}}`)
	wantRejected(t, "v1 patch adding spec.restore", err, denied+"metadata.annotations[cache.example.com/v2-spec].restore: spec.restore is set when the cache is created")
	// A v1 change of the engine (in the annotation) reaches the webhook's rules too.
	_, err = c.Kubectl(ctx, "patch", "managedcaches.v1.cache.example.com", "guarded", "-n", ns, "--type=merge", "-p",
		`{"metadata":{"annotations":{"cache.example.com/v2-spec":"{\"engine\":{\"name\":\"valkey\"}}"}}}`)
	wantRejected(t, "v1 patch changing the engine", err, denied+"spec.version: changing from redis 8.0 to valkey 8.0 would lose the data")

	// What keeps a majority passes.
	if _, err := c.Kubectl(ctx, "scale", "managedcache/guarded", "-n", ns, "--replicas=3"); err != nil {
		t.Errorf("kubectl scale 5 -> 3: %v", err)
	}
	// The override, read on /scale from the operator's informer cache.
	if _, err := c.Kubectl(ctx, "annotate", "managedcache", "guarded", "-n", ns, "cache.example.com/allow-quorum-loss=true"); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 30*time.Second, "kubectl scale 3 -> 1 to pass with the override", func() (bool, string, error) {
		_, err := c.Kubectl(ctx, "scale", "managedcache/guarded", "-n", ns, "--replicas=1")
		return err == nil, fmt.Sprint(err), nil // the informer cache may be a moment behind
	})
	waitReady(t, c, ns, "guarded", 1, time.Minute)
}

// TestConversionThroughTheAPIServer: a v2 cache with fields v1 cannot express is readable and
// writable as v1 without losing them, and runs as v2 says.
func TestConversionThroughTheAPIServer(t *testing.T) {
	c := framework.Setup(t)
	ctx := context.Background()
	ns := c.Namespace(t, "convert")
	startOperator(t, c)
	deleteCachesOnCleanup(t, c, ns)
	doc := fmt.Sprintf(`apiVersion: cache.example.com/v2
kind: ManagedCache
metadata: {name: feed, namespace: %s}
spec:
  replicas: 3
  engine: {name: valkey, version: "8.0"}
  storage: {size: 1536Mi, storageClassName: standard}
  eviction: {policy: allkeys-lru, maxMemory: 768Mi}
  resources: {limits: {memory: 1Gi}}
`, ns)
	if _, err := applyYAML(ctx, c, doc); err != nil {
		t.Fatal(err)
	}
	waitReady(t, c, ns, "feed", 3, 2*time.Minute)
	sts, err := getChild(c, "StatefulSet", ns, "feed")
	if err != nil {
		t.Fatal(err)
	}
	containers, _, _ := unstructured.NestedSlice(sts.Object, "spec", "template", "spec", "containers")
	if img := containers[0].(map[string]interface{})["image"]; img != "valkey/valkey:8.0" {
		t.Errorf("image %v, want valkey/valkey:8.0", img)
	}
	vct, _, _ := unstructured.NestedSlice(sts.Object, "spec", "volumeClaimTemplates")
	if size, _, _ := unstructured.NestedString(vct[0].(map[string]interface{}), "spec", "resources", "requests", "storage"); size != "1536Mi" {
		t.Errorf("volume size %q, want 1536Mi", size)
	}

	v1, err := c.Dynamic.Resource(mcGVR).Namespace(ns).Get(ctx, "feed", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spec := v1.Object["spec"].(map[string]interface{})
	if spec["size"] != int64(3) || spec["storageGi"] != int64(2) || spec["version"] != "8.0" || spec["evictionPolicy"] != "allkeys-lru" {
		t.Errorf("as v1: spec %v", spec)
	}
	if a := v1.GetAnnotations()["cache.example.com/v2-spec"]; !strings.Contains(a, `"name":"valkey"`) || !strings.Contains(a, `"maxMemory":"768Mi"`) {
		t.Errorf("as v1: v2-only fields annotation %q", a)
	}
	// A v1 write (scale to 5 through v1) keeps the v2-only fields.
	if _, err := c.Dynamic.Resource(mcGVR).Namespace(ns).Patch(ctx, "feed", types.MergePatchType, []byte(`{"spec":{"size":5}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	v2, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Get(ctx, "feed", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, _, _ := unstructured.NestedMap(v2.Object, "spec")
	want := map[string]interface{}{
		"replicas": int64(5), "engine": map[string]interface{}{"name": "valkey", "version": "8.0"},
		"storage":   map[string]interface{}{"size": "1536Mi", "storageClassName": "standard"},
		"eviction":  map[string]interface{}{"policy": "allkeys-lru", "maxMemory": "768Mi"},
		"resources": map[string]interface{}{"limits": map[string]interface{}{"memory": "1Gi"}},
		"failover":  map[string]interface{}{"delaySeconds": int64(3), "maxLagSeconds": int64(5)}, // the CRD's defaults
		"tls":       map[string]interface{}{"enabled": false},                                    // likewise
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("after a v1 write, v2 spec is\n%v\nwant\n%v", got, want)
	}
	if _, ok := v2.GetAnnotations()["cache.example.com/v2-spec"]; ok {
		t.Error("v2 shows the conversion annotation")
	}
	waitReady(t, c, ns, "feed", 5, 2*time.Minute)
}

// servedSerial returns the serial number of the certificate the webhook server presents.
func servedSerial(addr string) (string, error) {
	conn, err := tls.DialWithDialer(&netDialer, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // reading the certificate only
	if err != nil {
		return "", err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

// TestWebhookCertificateRotation: with a 30s lifetime the serving certificate is renewed within
// it, the server presents the new one, and the API server keeps trusting it.
func TestWebhookCertificateRotation(t *testing.T) {
	c := framework.Setup(t)
	ctx := context.Background()
	ns := c.Namespace(t, "rotate")
	op := startOperator(t, c, "--webhook-cert-lifetime=30s")
	deleteCachesOnCleanup(t, c, ns)
	if _, err := applyYAML(ctx, c, v1Doc(ns, "r", 3, "7.2")); err != nil {
		t.Fatal(err)
	}
	waitReady(t, c, ns, "r", 3, 2*time.Minute)
	addr := op.webhookAddr
	var first string
	framework.Eventually(t, 30*time.Second, "a certificate issued for 30s", func() (bool, string, error) {
		s, err := c.Kube.CoreV1().Secrets("cache-operator-system").Get(ctx, "cache-operator-webhook-tls", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		cert, _, ok := parseLeaf(s.Data["tls.crt"])
		if !ok {
			return false, "unparsable", nil
		}
		first, err = servedSerial(addr)
		life := cert.NotAfter.Sub(cert.NotBefore) - time.Minute
		return err == nil && life < time.Minute && first == cert.SerialNumber.String(), fmt.Sprintf("lifetime %s, served %s", life, first), err
	})
	framework.Eventually(t, time.Minute, "the server to present a renewed certificate", func() (bool, string, error) {
		s, err := servedSerial(addr)
		return err == nil && s != first, "serving " + s, err
	})
	// The API server trusts the renewed certificate: conversion (a v2 read) and admission work.
	if _, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Get(ctx, "r", metav1.GetOptions{}); err != nil {
		t.Errorf("v2 read after rotation: %v", err)
	}
	_, err := c.Kubectl(ctx, "scale", "managedcache/r", "-n", ns, "--replicas=1")
	wantRejected(t, "kubectl scale 3 -> 1 after rotation", err, "leaves fewer than a majority")
}

// v2Doc is a v2 ManagedCache as YAML.
func v2Doc(ns, name string, replicas int, version string) string {
	return fmt.Sprintf("apiVersion: cache.example.com/v2\nkind: ManagedCache\nmetadata: {name: %s, namespace: %s}\nspec: {replicas: %d, engine: {version: %q}, storage: {size: 1Gi}}\n", name, ns, replicas, version)
}

// TestWhileTheOperatorIsDown measures what works with the operator stopped (the README's table):
// everything through v2, the stored version (reads, creates, server-side applies of a cache the
// operator has written, scale-ups, deletes, garbage collection, namespace deletion), while
// scale-downs and version changes fail closed and v1 requests fail (nothing converts). Once it is
// back, everything converges.
func TestWhileTheOperatorIsDown(t *testing.T) {
	c := framework.Setup(t)
	ctx := context.Background()
	ns := c.Namespace(t, "down")
	doomedNS := c.Namespace(t, "down-ns")
	op := startOperator(t, c)
	for _, doc := range []string{v2Doc(ns, "before", 3, "7.2"), v2Doc(ns, "doomed", 1, "7.2"), v2Doc(doomedNS, "inside", 1, "7.2")} {
		if err := c.ApplyServerSide(ctx, doc); err != nil {
			t.Fatal(err)
		}
	}
	waitReady(t, c, ns, "before", 3, 2*time.Minute)
	waitReady(t, c, ns, "doomed", 1, 2*time.Minute)
	waitReady(t, c, doomedNS, "inside", 1, 2*time.Minute)
	op.stop(sigterm)

	works := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s while the operator is down: %v", what, err)
		}
	}
	works("creating a v2 cache", c.ApplyServerSide(ctx, v2Doc(ns, "during", 3, "7.2")))
	// The operator has written this cache (status), so its managedFields hold the operator's entries.
	works("scaling up through a v2 server-side apply", c.ApplyServerSide(ctx, v2Doc(ns, "before", 5, "7.2")))
	_, err := c.Kubectl(ctx, "get", "mc", "-n", ns)
	works("kubectl get mc", err)
	_, err = c.Kubectl(ctx, "annotate", "mc", "before", "-n", ns, "note=down")
	works("annotating", err)
	err = c.ApplyServerSide(ctx, v2Doc(ns, "before", 1, "7.2"))
	wantRejected(t, "scaling down while the operator is down", err, `failed calling webhook "validate.managedcaches.cache.example.com"`)
	_, err = applyYAML(ctx, c, v1Doc(ns, "v1-during", 1, "7.2"))
	// Refused by the validating webhook (v1 creates are judged) or by the conversion webhook.
	wantRejected(t, "creating through v1 while the operator is down", err, "webhook")
	// Deleting a cache: its children are collected, with nothing to convert.
	works("deleting a cache", c.Dynamic.Resource(mcV2GVR).Namespace(ns).Delete(ctx, "doomed", metav1.DeleteOptions{}))
	framework.Eventually(t, time.Minute, "the deleted cache and its StatefulSet to be gone", func() (bool, string, error) {
		mcGone, err := isGone(c, mcV2GVR, ns, "doomed")
		if err != nil {
			return false, "", err
		}
		_, err = c.Kube.AppsV1().StatefulSets(ns).Get(ctx, "doomed", metav1.GetOptions{})
		return mcGone && apierrors.IsNotFound(err), fmt.Sprintf("cache gone %v, StatefulSet: %v", mcGone, err), nil
	})
	// Deleting a namespace that holds a cache: everything goes but the cache's password Secret,
	// which its finalizer keeps until the operator releases it (the namespace waits, and says why).
	works("deleting a namespace", c.Kube.CoreV1().Namespaces().Delete(ctx, doomedNS, metav1.DeleteOptions{}))
	framework.Eventually(t, 2*time.Minute, "the namespace to wait for the password Secret's finalizer alone", func() (bool, string, error) {
		n, err := c.Kube.CoreV1().Namespaces().Get(ctx, doomedNS, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == "NamespaceFinalizersRemaining" && cond.Status == "True" && strings.Contains(cond.Message, api.SecretFinalizer) {
				return true, cond.Message, nil
			}
		}
		return false, fmt.Sprintf("phase %s, conditions %+v", n.Status.Phase, n.Status.Conditions), nil
	})

	startOperator(t, c)
	framework.Eventually(t, 2*time.Minute, "the namespace gone once the operator is back", func() (bool, string, error) {
		n, err := c.Kube.CoreV1().Namespaces().Get(ctx, doomedNS, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		if err != nil {
			return false, "", err
		}
		return false, fmt.Sprintf("phase %s, conditions %+v", n.Status.Phase, n.Status.Conditions), nil
	})
	deleteCachesOnCleanup(t, c, ns)
	waitReady(t, c, ns, "before", 5, 2*time.Minute)
	waitReady(t, c, ns, "during", 3, 2*time.Minute)
}
