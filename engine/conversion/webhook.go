package conversion

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// review is the part of an apiextensions.k8s.io/v1 ConversionReview the webhook reads and writes.
type review struct {
	metav1.TypeMeta `json:",inline"`
	Request         *struct {
		UID               types.UID              `json:"uid"`
		DesiredAPIVersion string                 `json:"desiredAPIVersion"`
		Objects           []runtime.RawExtension `json:"objects"`
	} `json:"request,omitempty"`
	Response *reviewResponse `json:"response,omitempty"`
}

type reviewResponse struct {
	UID              types.UID              `json:"uid"`
	ConvertedObjects []runtime.RawExtension `json:"convertedObjects"`
	Result           metav1.Status          `json:"result"`
}

// maxBody bounds a ConversionReview (the API server sends at most a list page of objects).
const maxBody = 32 << 20

// Handler serves the CRD conversion webhook.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var in review
		if err := json.Unmarshal(body, &in); err != nil || in.Request == nil {
			http.Error(w, fmt.Sprintf("not a ConversionReview: %v", err), http.StatusBadRequest)
			return
		}
		resp := &reviewResponse{UID: in.Request.UID, Result: metav1.Status{Status: metav1.StatusSuccess}}
		for i, raw := range in.Request.Objects {
			obj, err := decodeObject(raw.Raw)
			if err == nil {
				obj, err = Convert(obj, in.Request.DesiredAPIVersion)
			}
			var b []byte
			if err == nil {
				b, err = json.Marshal(obj)
			}
			if err != nil {
				klog.ErrorS(err, "Conversion failed", "object", i, "to", in.Request.DesiredAPIVersion)
				resp.ConvertedObjects = nil
				resp.Result = metav1.Status{Status: metav1.StatusFailure, Message: fmt.Sprintf("object %d: %v", i, err)}
				break
			}
			resp.ConvertedObjects = append(resp.ConvertedObjects, runtime.RawExtension{Raw: b})
		}
		out := review{TypeMeta: in.TypeMeta, Response: resp}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
}
