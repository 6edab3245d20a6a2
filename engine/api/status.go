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
	raw, ok, _ := unstructured.NestedMap(mc.Object, "status", "lastFailover")
	if !ok {
		return nil
	}
	var f FailoverStatus
	if runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &f) != nil || f.To == "" {
		return nil
	}
	return &f
}
