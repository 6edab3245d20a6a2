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

	"example.com/cache-operator/engine/api"
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
		oldE     string // the engines: redis when empty
		newE     string
	}{
		{"3 to 1 loses the majority", 3, 1, "7.2", "7.2", nil, "scaling from 3 to 1 members leaves fewer than a majority (2) of the current members, which loses the cache's quorum and may lose data; scale down in steps that keep a majority (to 2 first); to accept the loss, annotate the ManagedCache with cache.example.com/allow-quorum-loss=\"true\"", "", ""},
		{"3 to 2 keeps it", 3, 2, "7.2", "7.2", nil, "", "", ""},
		{"5 to 2 loses it", 5, 2, "7.2", "7.2", nil, "majority (3)", "", ""},
		{"5 to 3 keeps it", 5, 3, "7.2", "7.2", nil, "", "", ""},
		{"2 to 1 loses it", 2, 1, "7.2", "7.2", nil, "a cache of 2 members cannot lose one and keep a majority", "", ""},
		{"9 to 4 loses it", 9, 4, "7.2", "7.2", nil, "majority (5)", "", ""},
		{"9 to 5 keeps it", 9, 5, "7.2", "7.2", nil, "", "", ""},
		{"scaling up", 1, 9, "7.2", "7.2", nil, "", "", ""},
		{"override", 3, 1, "7.2", "7.2", allow, "", "", ""},
		{"override must say true", 3, 1, "7.2", "7.2", map[string]string{AllowQuorumLossAnnotation: "yes"}, "allow-quorum-loss", "", ""},
		{"major downgrade", 3, 3, "8.0", "7.2", nil, "spec.version: changing from redis 8.0 to redis 7.2 would lose the data: redis 7.2 reads snapshot formats up to 11 and the data is in format 12; keep redis 8.0", "", ""},
		{"minor downgrade across a format change", 3, 3, "7.2", "7.0", nil, "redis 7.0 reads snapshot formats up to 10 and the data is in format 11", "", ""},
		{"an unsupported version", 3, 3, "7.2", "6.2", nil, "spec.version: redis 6.2 is not supported; supported: redis 7.0, 7.2, 8.0; valkey 8.0, 8.1", "", ""},
		{"an unsupported version from a cache made before the matrix", 3, 3, "7.4", "7.4", nil, "", "", ""},
		{"from a version before the matrix, a major downgrade", 3, 3, "9.0", "8.0", nil, "cannot read the data files of the newer major version 9.0", "", ""},
		{"from a version before the matrix, up", 3, 3, "7.4", "8.0", nil, "", "", ""},
		{"upgrade", 3, 3, "7.0", "8.0", nil, "", "", ""},
		{"minor upgrade", 3, 3, "7.0", "7.2", nil, "", "", ""},
		{"the quorum override does not cover downgrades", 3, 3, "8.0", "7.0", allow, "would lose the data", "", ""},
		{"the data-loss override lets a downgrade through", 3, 3, "8.0", "7.0", map[string]string{"cache.example.com/allow-data-loss": "true"}, "", "", ""},
		{"the data-loss override must say true", 3, 3, "8.0", "7.0", map[string]string{"cache.example.com/allow-data-loss": "yes"}, `annotate the ManagedCache with cache.example.com/allow-data-loss="true" first`, "", ""},
		{"the data-loss override does not make a version supported", 3, 3, "8.0", "6.2", map[string]string{"cache.example.com/allow-data-loss": "true"}, "redis 6.2 is not supported", "", ""},
		{"redis 7.0 to valkey 8.1 migrates", 3, 3, "7.0", "8.1", nil, "", "redis", "valkey"},
		{"redis 7.2 to valkey 8.0 migrates", 3, 3, "7.2", "8.0", nil, "", "", "valkey"},
		{"redis 8.0 to valkey 8.1 cannot load", 3, 3, "8.0", "8.1", nil, "valkey reads redis data up to redis 7.2's snapshot format (11) and the data is in format 12", "redis", "valkey"},
		{"valkey to redis cannot load", 3, 3, "8.1", "8.0", nil, "redis cannot load data written by valkey", "valkey", "redis"},
		{"valkey 8.1 to 8.0 keeps the format", 3, 3, "8.1", "8.0", nil, "", "valkey", "valkey"},
		{"an engine change to a version it does not have", 3, 3, "7.2", "7.2", nil, "valkey 7.2 is not supported", "redis", "valkey"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(Change{ReplicasField: "spec.size", VersionField: "spec.version", OldReplicas: tc.old, NewReplicas: tc.new,
				OldVersion: tc.oldV, NewVersion: tc.newV, OldEngine: tc.oldE, NewEngine: tc.newE, Annotations: tc.ann})
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
		{"v1 quorum", admissionv1.AdmissionRequest{Kind: metav1.GroupVersionKind{Version: "v1"}, Operation: admissionv1.Update, OldObject: v1(3, "7.2", ""), Object: v1(1, "7.2", "")}, "spec.size: scaling from 3 to 1"},
		{"v1 override", admissionv1.AdmissionRequest{Kind: metav1.GroupVersionKind{Version: "v1"}, Operation: admissionv1.Update, OldObject: v1(3, "7.2", ""), Object: v1(1, "7.2", `"cache.example.com/allow-quorum-loss":"true"`)}, ""},
		{"v1 downgrade", admissionv1.AdmissionRequest{Kind: metav1.GroupVersionKind{Version: "v1"}, Operation: admissionv1.Update, OldObject: v1(3, "8.0", ""), Object: v1(3, "7.2", "")}, "spec.version: changing from redis 8.0 to redis 7.2 would lose the data"},
		{"v2 quorum", admissionv1.AdmissionRequest{Kind: metav1.GroupVersionKind{Version: "v2"}, Operation: admissionv1.Update, OldObject: v2(5, "7.2"), Object: v2(2, "7.2")}, "spec.replicas: scaling from 5 to 2"},
		{"v2 downgrade", admissionv1.AdmissionRequest{Kind: metav1.GroupVersionKind{Version: "v2"}, Operation: admissionv1.Update, OldObject: v2(3, "8.0"), Object: v2(3, "7.0")}, "spec.engine: changing from redis 8.0 to redis 7.0 would lose the data"},
		{"v2 hibernate stops every member, through the quorum guard", admissionv1.AdmissionRequest{Kind: metav1.GroupVersionKind{Version: "v2"}, Operation: admissionv1.Update, OldObject: v2(5, "7.2"),
			Object: runtime.RawExtension{Raw: []byte(`{"apiVersion":"cache.example.com/v2","kind":"ManagedCache","metadata":{"name":"s"},"spec":{"replicas":5,"hibernate":true,"engine":{"version":"7.2"}}}`)}}, ""},
		{"scale quorum", admissionv1.AdmissionRequest{Namespace: "shop", Name: "s", SubResource: "scale", Operation: admissionv1.Update, OldObject: scale(3), Object: scale(1)}, "scaling from 3 to 1"},
		{"scale override from the cache", admissionv1.AdmissionRequest{Namespace: "shop", Name: "allowed", SubResource: "scale", Operation: admissionv1.Update, OldObject: scale(3), Object: scale(1)}, ""},
		{"scale 3 to 2", admissionv1.AdmissionRequest{Namespace: "shop", Name: "s", SubResource: "scale", Operation: admissionv1.Update, OldObject: scale(3), Object: scale(2)}, ""},
		{"v1 create of an unsupported pair", admissionv1.AdmissionRequest{Kind: metav1.GroupVersionKind{Version: "v1"}, Operation: admissionv1.Create, Object: v1(3, "8.1", "")}, "spec.version: redis 8.1 is not supported; supported: redis 7.0, 7.2, 8.0; valkey 8.0, 8.1"},
		{"v1 create of a supported pair", admissionv1.AdmissionRequest{Kind: metav1.GroupVersionKind{Version: "v1"}, Operation: admissionv1.Create, Object: v1(3, "8.0", "")}, ""},
		{"v1 create of 2 shards", admissionv1.AdmissionRequest{Kind: metav1.GroupVersionKind{Version: "v1"}, Operation: admissionv1.Create, Object: v1(2, "8.0", shardsAnn(2))},
			"metadata.annotations[cache.example.com/v2-spec].shards: must be between 3 and 32 (a cluster needs a majority of its primaries to fail one over), got 2"},
		{"v1 create of 3 shards", admissionv1.AdmissionRequest{Kind: metav1.GroupVersionKind{Version: "v1"}, Operation: admissionv1.Create, Object: v1(2, "8.0", shardsAnn(3))}, ""},
		{"v1 create of 2.5 shards", admissionv1.AdmissionRequest{Kind: metav1.GroupVersionKind{Version: "v1"}, Operation: admissionv1.Create, Object: v1(2, "8.0", `"cache.example.com/v2-spec":"{\"shards\":2.5}"`)}, "shards: must be a whole number"},
		{"v1 update adding shards", admissionv1.AdmissionRequest{Kind: metav1.GroupVersionKind{Version: "v1"}, Operation: admissionv1.Update, OldObject: v1(3, "7.2", ""), Object: v1(3, "7.2", shardsAnn(3))},
			"metadata.annotations[cache.example.com/v2-spec].shards: cannot turn a primary/replica cache into a sharded cache of 3 shards: a cache is sharded or not for its whole life"},
		{"v1 update removing shards", admissionv1.AdmissionRequest{Kind: metav1.GroupVersionKind{Version: "v1"}, Operation: admissionv1.Update, OldObject: v1(2, "7.2", shardsAnn(4)), Object: v1(2, "7.2", "")},
			"cannot turn a sharded cache of 4 shards into a primary/replica cache"},
		{"v1 update of the shard count", admissionv1.AdmissionRequest{Kind: metav1.GroupVersionKind{Version: "v1"}, Operation: admissionv1.Update, OldObject: v1(2, "7.2", shardsAnn(3)), Object: v1(2, "7.2", shardsAnn(6))}, ""},
		{"v2 update of the shard count while a reshard runs", admissionv1.AdmissionRequest{Kind: metav1.GroupVersionKind{Version: "v2"}, Operation: admissionv1.Update,
			OldObject: runtime.RawExtension{Raw: []byte(`{"apiVersion":"cache.example.com/v2","kind":"ManagedCache","metadata":{"name":"s"},"spec":{"replicas":2,"shards":4,"engine":{"version":"7.2"}},` +
				`"status":{"reshard":{"shards":4,"slotsMoved":100,"slotsToMove":3996}}}`)},
			Object: runtime.RawExtension{Raw: []byte(`{"apiVersion":"cache.example.com/v2","kind":"ManagedCache","metadata":{"name":"s"},"spec":{"replicas":2,"shards":5,"engine":{"version":"7.2"}}}`)}},
			"spec.shards: a reshard to 4 shards is running (100 slots moved, 3996 to move): change the number of shards once it has finished"},
		{"v2 update of the replicas while a reshard runs", admissionv1.AdmissionRequest{Kind: metav1.GroupVersionKind{Version: "v2"}, Operation: admissionv1.Update,
			OldObject: runtime.RawExtension{Raw: []byte(`{"apiVersion":"cache.example.com/v2","kind":"ManagedCache","metadata":{"name":"s"},"spec":{"replicas":2,"shards":4,"engine":{"version":"7.2"}},` +
				`"status":{"reshard":{"shards":4,"slotsMoved":100,"slotsToMove":3996}}}`)},
			Object: runtime.RawExtension{Raw: []byte(`{"apiVersion":"cache.example.com/v2","kind":"ManagedCache","metadata":{"name":"s"},"spec":{"replicas":3,"shards":4,"engine":{"version":"7.2"}}}`)}}, ""},
		{"v1 create of 3 shards restoring a path", admissionv1.AdmissionRequest{Kind: metav1.GroupVersionKind{Version: "v1"}, Operation: admissionv1.Create,
			Object: v1(2, "8.0", `"cache.example.com/v2-spec":"{\"shards\":3,\"restore\":{\"path\":\"ns/c/b1.rdb\",\"store\":{\"secretName\":\"s3\"}},\"hibernate\":true}"`)},
			api.ShardedRestorePathNotServed},
		{"v2 update adding shards", admissionv1.AdmissionRequest{Kind: metav1.GroupVersionKind{Version: "v2"}, Operation: admissionv1.Update, OldObject: v2(3, "7.2"),
			Object: runtime.RawExtension{Raw: []byte(`{"apiVersion":"cache.example.com/v2","kind":"ManagedCache","metadata":{"name":"s"},"spec":{"replicas":3,"shards":3,"engine":{"version":"7.2"}}}`)}},
			"spec.shards: cannot turn a primary/replica cache into a sharded cache of 3 shards"},
		{"v1 update adding spec.restore through the annotation", admissionv1.AdmissionRequest{Kind: metav1.GroupVersionKind{Version: "v1"}, Operation: admissionv1.Update,
			OldObject: v1(3, "7.2", ""), Object: v1(3, "7.2", `"cache.example.com/v2-spec":"{\"restore\":{\"backup\":\"nope\"}}"`)},
			"metadata.annotations[cache.example.com/v2-spec].restore: spec.restore is set when the cache is created, never added, changed or removed afterwards"},
		{"v1 update changing spec.restore", admissionv1.AdmissionRequest{Kind: metav1.GroupVersionKind{Version: "v1"}, Operation: admissionv1.Update,
			OldObject: v1(3, "7.2", `"cache.example.com/v2-spec":"{\"restore\":{\"backup\":\"b1\"}}"`),
			Object:    v1(3, "7.2", `"cache.example.com/v2-spec":"{\"restore\":{\"backup\":\"b2\"}}"`)}, "spec.restore is set when the cache is created"},
		{"v1 update keeping spec.restore", admissionv1.AdmissionRequest{Kind: metav1.GroupVersionKind{Version: "v1"}, Operation: admissionv1.Update,
			OldObject: v1(3, "7.2", `"cache.example.com/v2-spec":"{\"restore\":{\"backup\":\"b1\"}}"`),
			Object:    v1(5, "7.2", `"cache.example.com/v2-spec":"{\"restore\":{\"backup\":\"b1\"}}"`)}, ""},
		{"v1 update naming an unsupported engine through the annotation", admissionv1.AdmissionRequest{Kind: metav1.GroupVersionKind{Version: "v1"}, Operation: admissionv1.Update,
			OldObject: v1(3, "7.2", ""), Object: v1(3, "7.2", `"cache.example.com/v2-spec":"{\"engine\":{\"name\":\"valkey\"}}"`)},
			"spec.version: valkey 7.2 is not supported"},
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

// shardsAnn is a v1 object's v2-spec annotation with spec.shards n.
func shardsAnn(n int) string {
	return `"cache.example.com/v2-spec":"{\"shards\":` + itoa(n) + `}"`
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }
