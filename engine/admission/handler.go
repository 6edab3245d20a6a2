package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/conversion"
)

// AnnotationsLookup returns the annotations of the ManagedCache namespace/name as the API server
// has them now. A /scale request carries a Scale, not the cache, so its annotations (the quorum
// override) must be read; a cache is never stale here, or a freshly added override is refused.
type AnnotationsLookup func(ctx context.Context, namespace, name string) (map[string]string, error)

// Handler serves the validating webhook for managedcaches (v1 and v2) and managedcaches/scale.
func Handler(lookup AnnotationsLookup) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var review admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
			http.Error(w, fmt.Sprintf("not an AdmissionReview: %v", err), http.StatusBadRequest)
			return
		}
		resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		change, err := changeOf(r.Context(), review.Request, lookup)
		if err == nil {
			err = Validate(change)
			if err != nil {
				resp.Allowed = false
				resp.Result = &metav1.Status{Status: metav1.StatusFailure, Reason: metav1.StatusReasonForbidden, Code: http.StatusForbidden, Message: err.Error()}
			}
		} else {
			resp.Allowed = false
			resp.Result = &metav1.Status{Status: metav1.StatusFailure, Reason: metav1.StatusReasonBadRequest, Code: http.StatusBadRequest, Message: err.Error()}
		}
		klog.V(2).InfoS("Admission", "object", klog.KRef(review.Request.Namespace, review.Request.Name),
			"subresource", review.Request.SubResource, "allowed", resp.Allowed)
		review.Response = resp
		review.Request = nil
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(review)
	})
}

// changeOf reads the old and new member count and version of an update.
func changeOf(ctx context.Context, req *admissionv1.AdmissionRequest, lookup AnnotationsLookup) (Change, error) {
	if req.Operation == admissionv1.Create && req.SubResource == "" {
		// A create: only the engine and version pair is judged (the support matrix).
		newObj, err := asV2(req.Object.Raw)
		if err != nil {
			return Change{}, fmt.Errorf("decoding the object: %w", err)
		}
		c := Change{VersionField: "spec.engine", ShardsField: "spec.shards", Create: true}
		if req.Kind.Version == "v1" {
			c.VersionField, c.ShardsField = "spec.version", v1ShardsField
		}
		c.NewVersion, _, _ = unstructured.NestedString(newObj.Object, "spec", "engine", "version")
		c.NewEngine, _, _ = unstructured.NestedString(newObj.Object, "spec", "engine", "name")
		c.NewShards, c.NotServed = shards(newObj), notServed(newObj)
		return c, nil
	}
	if req.Operation != admissionv1.Update {
		return Change{}, nil // nothing to compare
	}
	if req.SubResource == "scale" {
		var oldScale, newScale autoscalingv1.Scale
		if err := json.Unmarshal(req.OldObject.Raw, &oldScale); err != nil {
			return Change{}, fmt.Errorf("decoding the old Scale: %w", err)
		}
		if err := json.Unmarshal(req.Object.Raw, &newScale); err != nil {
			return Change{}, fmt.Errorf("decoding the Scale: %w", err)
		}
		annotations, err := lookup(ctx, req.Namespace, req.Name)
		if err != nil {
			return Change{}, fmt.Errorf("reading the cache's annotations: %w", err)
		}
		return Change{
			ReplicasField: "spec.replicas (scale)", OldReplicas: int64(oldScale.Spec.Replicas),
			NewReplicas: int64(newScale.Spec.Replicas), Annotations: annotations,
		}, nil
	}
	oldObj, err := asV2(req.OldObject.Raw)
	if err != nil {
		return Change{}, fmt.Errorf("decoding the old object: %w", err)
	}
	newObj, err := asV2(req.Object.Raw)
	if err != nil {
		return Change{}, fmt.Errorf("decoding the object: %w", err)
	}
	c := Change{ReplicasField: "spec.replicas", VersionField: "spec.engine", ShardsField: "spec.shards", RestoreField: "spec.restore",
		Annotations: newObj.GetAnnotations()}
	if req.Kind.Version == "v1" {
		c.ReplicasField, c.VersionField, c.ShardsField, c.RestoreField = "spec.size", "spec.version", v1ShardsField, v1RestoreField
	}
	oldRestore, _, _ := unstructured.NestedFieldNoCopy(oldObj.Object, "spec", "restore")
	newRestore, _, _ := unstructured.NestedFieldNoCopy(newObj.Object, "spec", "restore")
	c.RestoreChanged = !equality.Semantic.DeepEqual(oldRestore, newRestore)
	c.OldShards, c.NewShards, c.NotServed = shards(oldObj), shards(newObj), notServed(newObj)
	if r := api.ReshardOf(oldObj); r != nil {
		c.Resharding = r
	}
	c.OldReplicas = replicas(oldObj)
	c.NewReplicas = replicas(newObj)
	c.OldVersion, _, _ = unstructured.NestedString(oldObj.Object, "spec", "engine", "version")
	c.NewVersion, _, _ = unstructured.NestedString(newObj.Object, "spec", "engine", "version")
	c.OldEngine, _, _ = unstructured.NestedString(oldObj.Object, "spec", "engine", "name")
	c.NewEngine, _, _ = unstructured.NestedString(newObj.Object, "spec", "engine", "name")
	return c, nil
}

func asV2(raw []byte) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(raw); err != nil {
		return nil, err
	}
	v2, err := conversion.Convert(u.Object, conversion.V2)
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: v2}, nil
}

// v1ShardsField and v1RestoreField are where a v1 object carries spec.shards and spec.restore.
const (
	v1ShardsField  = "metadata.annotations[" + conversion.SpecAnnotation + "].shards"
	v1RestoreField = "metadata.annotations[" + conversion.SpecAnnotation + "].restore"
)

// shards is spec.shards (0 when not set; -1 when it is not a whole number, which the range rule
// refuses).
func shards(u *unstructured.Unstructured) int64 {
	spec, _ := u.Object["spec"].(map[string]interface{})
	switch n := spec["shards"].(type) {
	case nil:
		return 0
	case int64:
		return n
	case float64:
		if n == float64(int64(n)) {
			return int64(n)
		}
	}
	return -1
}

// notServed is what of a sharded cache's spec this version does not serve yet ("" for a spec that
// does not parse: the rules that judge it say why).
func notServed(u *unstructured.Unstructured) string {
	spec, err := api.ParseSpec(u)
	if err != nil {
		return ""
	}
	return spec.ShardedNotServed()
}

// replicas is spec.replicas, or the CRD's default when it is not set.
func replicas(u *unstructured.Unstructured) int64 {
	if n, found, _ := unstructured.NestedInt64(u.Object, "spec", "replicas"); found {
		return n
	}
	n, _ := api.Default("replicas").(int64)
	return n
}
