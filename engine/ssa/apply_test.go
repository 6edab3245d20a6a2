package ssa

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
)

// The first apply of a child made by a plain create moves the operator's Update entry to its
// Apply entry. From a current copy (an informer's) that costs one patch and no read, and every
// other manager's entry survives; a copy that is behind gets a conflict, and the patch is computed
// again from a fresh read.
func TestApplyUpgradesManagedFieldsFromTheGivenCopy(t *testing.T) {
	stsGVR := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}
	live := mustDecode(t, desiredSTS)
	live.SetResourceVersion("7")
	live.SetManagedFields([]metav1.ManagedFieldsEntry{
		{Manager: "cache-operator", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "apps/v1", FieldsType: "FieldsV1",
			FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:replicas":{}}}`)}},
		{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "apps/v1", FieldsType: "FieldsV1",
			Subresource: "status", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:replicas":{}}}`)}},
	})

	for _, tc := range []struct {
		name        string
		cachedRV    string // the resourceVersion of the copy given to Apply
		wantVerbs   string
		wantPatches int // JSON patches of managedFields
	}{
		{"current copy", "7", "patch(json) patch(apply)", 1},
		{"copy behind", "6", "patch(json) get patch(json) patch(apply)", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
				map[schema.GroupVersionResource]string{stsGVR: "StatefulSetList"}, live.DeepCopy())
			var patched []metav1.ManagedFieldsEntry
			client.PrependReactor("patch", "statefulsets", func(a clienttesting.Action) (bool, runtime.Object, error) {
				p := a.(clienttesting.PatchAction)
				if p.GetPatchType() == types.ApplyPatchType {
					return true, live.DeepCopy(), nil
				}
				// The API server's resourceVersion guard: the patch replaces resourceVersion with
				// the copy's, and a copy that is behind conflicts.
				var ops []struct {
					Op    string          `json:"op"`
					Path  string          `json:"path"`
					Value json.RawMessage `json:"value"`
				}
				if err := json.Unmarshal(p.GetPatch(), &ops); err != nil {
					return true, nil, err
				}
				for _, op := range ops {
					switch op.Path {
					case "/metadata/resourceVersion":
						var rv string
						_ = json.Unmarshal(op.Value, &rv)
						if rv != live.GetResourceVersion() {
							return true, nil, apierrors.NewConflict(stsGVR.GroupResource(), live.GetName(), nil)
						}
					case "/metadata/managedFields":
						patched = nil
						if err := json.Unmarshal(op.Value, &patched); err != nil {
							return true, nil, err
						}
					}
				}
				return true, live.DeepCopy(), nil
			})
			mapper := meta.NewDefaultRESTMapper(nil)
			mapper.Add(stsGVR.GroupVersion().WithKind("StatefulSet"), meta.RESTScopeNamespace)
			a := NewApplier(client, mapper, "cache-operator")

			cached := live.DeepCopy()
			cached.SetResourceVersion(tc.cachedRV)
			want := mustDecode(t, desiredSTS)
			if _, err := a.Apply(context.Background(), want, cached); err != nil {
				t.Fatal(err)
			}
			var verbs []string
			jsonPatches := 0
			for _, act := range client.Actions() {
				v := act.GetVerb()
				if p, ok := act.(clienttesting.PatchAction); ok {
					if p.GetPatchType() == types.ApplyPatchType {
						v += "(apply)"
					} else {
						v += "(json)"
						jsonPatches++
					}
				}
				verbs = append(verbs, v)
			}
			if got := strings.Join(verbs, " "); got != tc.wantVerbs {
				t.Errorf("requests %q, want %q", got, tc.wantVerbs)
			}
			if jsonPatches != tc.wantPatches {
				t.Errorf("%d managedFields patches, want %d", jsonPatches, tc.wantPatches)
			}
			var managers []string
			for _, e := range patched {
				managers = append(managers, e.Manager+"/"+string(e.Operation)+"/"+e.Subresource)
			}
			if got := strings.Join(managers, " "); got != "cache-operator/Apply/ kube-controller-manager/Update/status" {
				t.Errorf("managedFields after the upgrade: %s; want the operator's Apply entry and the other manager's kept", got)
			}
		})
	}
}
