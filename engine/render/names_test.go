package render

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"

	"example.com/cache-operator/engine/api"
)

// Every name and label the children of every golden input carry is one the API server accepts,
// with what its controllers add: a StatefulSet's pods carry <set>-<ordinal> and its revisions
// <set>-<hash of up to 10 characters> in labels, a Job's pods its name. With it, the scheduled
// backup of each input's cache (<cache>-<date>-<time>: 68 characters for a 52-character cache,
// over a label's 63, so that such a cache's scheduled backups never ran). The inputs include the
// longest names admission accepts (52 characters, 48 for a sharded cache) and names YAML reads as
// a boolean or a number (true, on, 123: their render failed, a PodDisruptionBudget "without a
// name", before the templates quoted every name).
func TestRenderedNamesAndLabelsAreValid(t *testing.T) {
	r := mustRenderer(t)
	inputs, _ := filepath.Glob("testdata/*.input.yaml")
	// And, not golden (64 children), the longest name a sharded cache may have (48 characters)
	// with the most shards (32): its last StatefulSet is <name>-s31.
	sharded := filepath.Join(t.TempDir(), "sharded-long-name.input.yaml")
	if err := os.WriteFile(sharded, []byte("apiVersion: cache.example.com/v2\nkind: ManagedCache\n"+
		"metadata: {name: "+strings.Repeat("s", 48)+", namespace: dev, uid: 00000000-0000-0000-0000-000000000348}\n"+
		"spec: {engine: {name: redis, version: \"7.2\"}, shards: 32, replicas: 2}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, in := range append(inputs, sharded) {
		t.Run(strings.TrimSuffix(filepath.Base(in), ".input.yaml"), func(t *testing.T) {
			mc := readCache(t, in)
			spec, err := api.ParseSpec(mc)
			if err != nil {
				t.Fatal(err)
			}
			objs, err := r.Children(mc, spec, testConfig, SimpleAuth(goldenPassword))
			if err != nil {
				t.Fatal(err)
			}
			backup := &unstructured.Unstructured{}
			backup.SetName(mc.GetName() + "-20261207-060000")
			job, err := r.BackupJobFor(mc, backup, spec, testConfig, BackupJob{Name: backup.GetName(), JobName: api.BackupJobName(backup.GetName()),
				StoreSecret: "cache-backups", Parts: []BackupPart{{Container: "backup", Member: mc.GetName() + "-1", ObjectKey: "k"}}})
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range append(objs, job) {
				for _, p := range invalidNames(o) {
					t.Errorf("%s %s: %s", o.GetKind(), o.GetName(), p)
				}
			}
		})
	}
}

// invalidNames lists what the API server or a controller would refuse in o's names and labels.
func invalidNames(o *unstructured.Unstructured) []string {
	var out []string
	check := func(what string, errs []string) {
		for _, e := range errs {
			out = append(out, what+": "+e)
		}
	}
	name := o.GetName()
	switch o.GetKind() {
	case "Service":
		// A DNS-1123 label since Kubernetes 1.34's relaxed Service names (on by default in the
		// 1.37 API server the local cluster runs: a Service named 123 is accepted).
		check("name "+name, validation.IsDNS1123Label(name))
	case "StatefulSet":
		check("name "+name, validation.IsDNS1123Subdomain(name))
		replicas, _, _ := unstructured.NestedInt64(o.Object, "spec", "replicas")
		check("its last pod's name", validation.IsDNS1123Label(fmt.Sprintf("%s-%d", name, max(replicas-1, 0))))
		check("its revisions' label", validation.IsValidLabelValue(name+"-7c9f8d6b5d"))
	case "Job":
		check("name "+name, validation.IsDNS1123Subdomain(name))
		check("its pods' job-name label", validation.IsValidLabelValue(name))
	default:
		check("name "+name, validation.IsDNS1123Subdomain(name))
	}
	labels := func(where string, fields ...string) {
		m, _, _ := unstructured.NestedStringMap(o.Object, fields...)
		for k, v := range m {
			check(where+" key "+k, validation.IsQualifiedName(k))
			check(where+" "+k+"="+v, validation.IsValidLabelValue(v))
		}
	}
	labels("label", "metadata", "labels")
	labels("selector", "spec", "selector")
	labels("selector", "spec", "selector", "matchLabels")
	labels("pod label", "spec", "template", "metadata", "labels")
	claims, _, _ := unstructured.NestedSlice(o.Object, "spec", "volumeClaimTemplates")
	for _, c := range claims {
		if m, ok := c.(map[string]interface{}); ok {
			if l, ok, _ := unstructured.NestedStringMap(m, "metadata", "labels"); ok {
				for k, v := range l {
					check("claim label "+k+"="+v, validation.IsValidLabelValue(v))
				}
			}
		}
	}
	return out
}
