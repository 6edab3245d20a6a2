package api

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// FailoverStatus is status.lastFailover: the last time the primary changed, as the operator did it.
type FailoverStatus struct {
	// Time is when the new primary took over (RFC 3339).
	Time string `json:"time"`
	// Kind is failover (the primary was gone) or switchover (handed over by a live primary).
	Kind string `json:"kind"`
	From string `json:"from,omitempty"`
	To   string `json:"to"`
}

// LastFailoverOf reads status.lastFailover of a cache (nil: none).
func LastFailoverOf(mc *unstructured.Unstructured) *FailoverStatus {
	if f := statusField[FailoverStatus](mc, "lastFailover"); f != nil && f.To != "" {
		return f
	}
	return nil
}

// PrimaryOf reads status.primary of a cache ("": none).
func PrimaryOf(mc *unstructured.Unstructured) string {
	p, _, _ := unstructured.NestedString(mc.Object, "status", "primary")
	return p
}

// HibernationStatus is status.hibernation: set while a cache hibernates or resumes.
type HibernationStatus struct {
	// Primary is the member that was primary when the members were stopped ("": none known).
	Primary string `json:"primary,omitempty"`
	// Since is when the operator began stopping the members (RFC 3339).
	Since string `json:"since,omitempty"`
}

// HibernationOf reads status.hibernation of a cache (nil: none).
func HibernationOf(mc *unstructured.Unstructured) *HibernationStatus {
	return statusField[HibernationStatus](mc, "hibernation")
}

// statusField reads status.<field> of a cache into a T (nil: absent, or not of that shape).
func statusField[T any](mc *unstructured.Unstructured, field string) *T {
	raw, ok, _ := unstructured.NestedMap(mc.Object, "status", field)
	if !ok {
		return nil
	}
	var v T
	if runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &v) != nil {
		return nil
	}
	return &v
}
