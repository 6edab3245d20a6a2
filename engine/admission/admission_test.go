package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestValidateTable(t *testing.T) {
	allow := map[string]string{AllowQuorumLossAnnotation: "true"}
	for _, tc := range []struct {
		name     string
		old, new int64
		oldV     string
		newV     string
		ann      map[string]string
		want     string // "" allowed; else a substring of the error
	}{
		{"3 to 1 loses the majority", 3, 1, "7.4", "7.4", nil, "scaling from 3 to 1 members leaves fewer than a majority (2) of the current members, which loses the cache's quorum and may lose data; scale down in steps that keep a majority (to 2 first); to accept the loss, annotate the ManagedCache with cache.example.com/allow-quorum-loss=\"true\""},
		{"3 to 2 keeps it", 3, 2, "7.4", "7.4", nil, ""},
		{"5 to 2 loses it", 5, 2, "7.4", "7.4", nil, "majority (3)"},
		{"5 to 3 keeps it", 5, 3, "7.4", "7.4", nil, ""},
		{"2 to 1 loses it", 2, 1, "7.4", "7.4", nil, "a cache of 2 members cannot lose one and keep a majority"},
		{"9 to 4 loses it", 9, 4, "7.4", "7.4", nil, "majority (5)"},
		{"9 to 5 keeps it", 9, 5, "7.4", "7.4", nil, ""},
		{"scaling up", 1, 9, "7.4", "7.4", nil, ""},
		{"override", 3, 1, "7.4", "7.4", allow, ""},
		{"override must say true", 3, 1, "7.4", "7.4", map[string]string{AllowQuorumLossAnnotation: "yes"}, "allow-quorum-loss"},
		{"major downgrade", 3, 3, "7.4", "6.2", nil, "downgrading from 7.4 to 6.2 crosses a major version"},
		{"major downgrade with a two-digit major", 3, 3, "10.0", "9.9", nil, "crosses a major version"},
		{"minor downgrade", 3, 3, "7.4", "7.2", nil, ""},
		{"upgrade", 3, 3, "6.2", "7.4", nil, ""},
		{"the override does not cover downgrades", 3, 3, "7.4", "6.2", allow, "crosses a major version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(Change{ReplicasField: "spec.size", VersionField: "spec.version", OldReplicas: tc.old, NewReplicas: tc.new,
				OldVersion: tc.oldV, NewVersion: tc.newV, Annotations: tc.ann})
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("rejected: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}

func review(t *testing.T, h http.Handler, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	t.Helper()
	b, _ := json.Marshal(admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Request: req})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/validate", bytes.NewReader(b)))
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
		t.Fatalf("response %s: %v", rec.Body.String(), err)
	}
	if out.Response.UID != req.UID {
		t.Fatalf("uid %q, want %q", out.Response.UID, req.UID)
	}
	return out.Response
}

func TestHandlerObjectsAndScale(t *testing.T) {
	annotations := map[string]map[string]string{"shop/allowed": {AllowQuorumLossAnnotation: "true"}}
	h := Handler(func(_ context.Context, ns, name string) (map[string]string, error) {
		return annotations[ns+"/"+name], nil
	})
	v1 := func(size int, version string, ann string) runtime.RawExtension {
		return runtime.RawExtension{Raw: []byte(`{"apiVersion":"cache.example.com/v1","kind":"ManagedCache","metadata":{"name":"s","annotations":{` + ann +
			`}},"spec":{"size":` + itoa(size) + `,"version":"` + version + `"}}`)}
	}
	v2 := func(replicas int, version string) runtime.RawExtension {
		return runtime.RawExtension{Raw: []byte(`{"apiVersion":"cache.example.com/v2","kind":"ManagedCache","metadata":{"name":"s"},"spec":{"replicas":` +
			itoa(replicas) + `,"engine":{"version":"` + version + `"}}}`)}
	}
	scale := func(n int) runtime.RawExtension {
		return runtime.RawExtension{Raw: []byte(`{"apiVersion":"autoscaling/v1","kind":"Scale","metadata":{"name":"s"},"spec":{"replicas":` + itoa(n) + `}}`)}
	}
	for _, tc := range []struct {
		name string
		req  admissionv1.AdmissionRequest
		want string
	}{
		{"v1 quorum", admissionv1.AdmissionRequest{Kind: metav1.GroupVersionKind{Version: "v1"}, Operation: admissionv1.Update, OldObject: v1(3, "7.4", ""), Object: v1(1, "7.4", "")}, "spec.size: scaling from 3 to 1"},
		{"v1 override", admissionv1.AdmissionRequest{Kind: metav1.GroupVersionKind{Version: "v1"}, Operation: admissionv1.Update, OldObject: v1(3, "7.4", ""), Object: v1(1, "7.4", `"cache.example.com/allow-quorum-loss":"true"`)}, ""},
		{"v1 downgrade", admissionv1.AdmissionRequest{Kind: metav1.GroupVersionKind{Version: "v1"}, Operation: admissionv1.Update, OldObject: v1(3, "7.4", ""), Object: v1(3, "6.2", "")}, "spec.version: downgrading"},
		{"v2 quorum", admissionv1.AdmissionRequest{Kind: metav1.GroupVersionKind{Version: "v2"}, Operation: admissionv1.Update, OldObject: v2(5, "7.4"), Object: v2(2, "7.4")}, "spec.replicas: scaling from 5 to 2"},
		{"v2 downgrade", admissionv1.AdmissionRequest{Kind: metav1.GroupVersionKind{Version: "v2"}, Operation: admissionv1.Update, OldObject: v2(3, "8.0"), Object: v2(3, "7.4")}, "spec.engine.version: downgrading from 8.0 to 7.4"},
		{"scale quorum", admissionv1.AdmissionRequest{Namespace: "shop", Name: "s", SubResource: "scale", Operation: admissionv1.Update, OldObject: scale(3), Object: scale(1)}, "scaling from 3 to 1"},
		{"scale override from the cache", admissionv1.AdmissionRequest{Namespace: "shop", Name: "allowed", SubResource: "scale", Operation: admissionv1.Update, OldObject: scale(3), Object: scale(1)}, ""},
		{"scale 3 to 2", admissionv1.AdmissionRequest{Namespace: "shop", Name: "s", SubResource: "scale", Operation: admissionv1.Update, OldObject: scale(3), Object: scale(2)}, ""},
		{"garbage", admissionv1.AdmissionRequest{Kind: metav1.GroupVersionKind{Version: "v1"}, Operation: admissionv1.Update, OldObject: runtime.RawExtension{Raw: []byte(`{}`)}, Object: runtime.RawExtension{Raw: []byte(`[]`)}}, "decoding"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.UID = "uid-1"
			resp := review(t, h, &tc.req)
			if tc.want == "" {
				if !resp.Allowed {
					t.Errorf("denied: %v", resp.Result)
				}
				return
			}
			if resp.Allowed || resp.Result == nil || !strings.Contains(resp.Result.Message, tc.want) {
				t.Errorf("response %+v, want denied with %q", resp, tc.want)
			}
		})
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }
