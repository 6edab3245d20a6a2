package operator

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"example.com/cache-operator/e2e/framework"
	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/conversion"
	"example.com/cache-operator/engine/render"
	"example.com/cache-operator/engine/ssa"
	"example.com/cache-operator/templates"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"
)

// TestRenderedChildrenDoNotDriftFromTheAPIServersCopy applies the children of every golden case
// with server-side apply, reads them back from the API server (defaulted, with managedFields),
// and checks that the drift check finds nothing, then that it finds a change another manager
// made. Comparing a rendered object with a copy of itself could not fail; this compares it with
// what the API server stores.
func TestRenderedChildrenDoNotDriftFromTheAPIServersCopy(t *testing.T) {
	c := framework.Setup(t)
	ctx := context.Background()
	ns := c.Namespace(t, "drift")
	deleteCachesOnCleanup(t, c, ns)
	renderer, err := render.NewRenderer(templates.FS)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(c.Kube.Discovery()))
	applier := ssa.NewApplier(c.Dynamic, mapper, api.FieldManager)
	differ := ssa.NewDiffer()
	inputs, _ := filepath.Glob(filepath.Join(c.Root, "engine", "render", "testdata", "*.input.yaml"))
	if len(inputs) < 5 {
		t.Fatalf("found %d golden inputs", len(inputs))
	}
	var sts *unstructured.Unstructured
	for _, in := range inputs {
		b, err := os.ReadFile(in)
		if err != nil {
			t.Fatal(err)
		}
		obj := map[string]interface{}{}
		if err := yaml.Unmarshal(b, &obj); err != nil {
			t.Fatal(err)
		}
		v2, err := conversion.Convert(obj, conversion.V2)
		if err != nil {
			t.Fatal(err)
		}
		mc := &unstructured.Unstructured{Object: v2}
		mc.SetNamespace(ns)
		mc.SetUID("")
		// A real owner, so that the garbage collector leaves the children alone.
		created, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Create(ctx, mc, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s: %v", filepath.Base(in), err)
		}
		spec, err := api.SpecFrom(created)
		if err != nil {
			t.Fatal(err)
		}
		children, err := renderer.Children(created, spec, render.DefaultConfig(), render.SimpleAuth("golden-password-not-a-secret"))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range children {
			if _, err := applier.Apply(ctx, want, nil); err != nil {
				t.Fatalf("%s: %v", filepath.Base(in), err)
			}
			live, err := applier.Get(ctx, want)
			if err != nil {
				t.Fatal(err)
			}
			if drift, err := differ.Drift(want, live, api.FieldManager); err != nil || len(drift) > 0 {
				t.Errorf("%s: %s as the API server stores it drifts from the rendered object: %q %v", filepath.Base(in), ssa.ObjectID(want), drift, err)
			}
			if want.GetKind() == "StatefulSet" {
				sts = want
			}
		}
	}
	// Another manager changes a field we set: that is drift, named by its path.
	if _, err := c.Dynamic.Resource(children["StatefulSet"].gvr).Namespace(ns).Patch(ctx, sts.GetName(), types.JSONPatchType,
		[]byte(`[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"redis:7.20"}]`), metav1.PatchOptions{FieldManager: "someone"}); err != nil {
		t.Fatal(err)
	}
	live, err := applier.Get(ctx, sts)
	if err != nil {
		t.Fatal(err)
	}
	drift, err := differ.Drift(sts, live, api.FieldManager)
	if err != nil || len(drift) != 1 || !strings.Contains(drift[0], ".spec.template.spec.containers[name=redis].image: differs") {
		t.Errorf("after another manager changed the image: drift %q, %v; want the image", drift, err)
	}
}
