package controller

import (
	"fmt"
	"net"
	"reflect"
	"strconv"
	"time"

	"example.com/cache-operator/engine/cachetls"

	"example.com/cache-operator/engine/roles"

	"example.com/cache-operator/engine/dataplane"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/storage"
)

// cacheStatus is the status of a ManagedCache, as the CRD declares it.
type cacheStatus struct {
	Conditions         []metav1.Condition       `json:"conditions,omitempty"`
	ReadyReplicas      int64                    `json:"readyReplicas"`
	Endpoint           string                   `json:"endpoint,omitempty"`
	ReadEndpoint       string                   `json:"readEndpoint,omitempty"`
	Primary            string                   `json:"primary,omitempty"`
	Members            []dataplane.MemberStatus `json:"members,omitempty"`
	Selector           string                   `json:"selector,omitempty"`
	TLS                *tlsStatus               `json:"tls,omitempty"`
	Backup             *api.BackupStatus        `json:"backup,omitempty"`
	Restore            *api.RestoreStatus       `json:"restore,omitempty"`
	LastFailover       *api.FailoverStatus      `json:"lastFailover,omitempty"`
	Hibernation        *api.HibernationStatus   `json:"hibernation,omitempty"`
	ObservedGeneration int64                    `json:"observedGeneration,omitempty"`
}

// tlsStatus is status.tls: where clients find the CA, and the members' certificate.
type tlsStatus struct {
	CAConfigMap string `json:"caConfigMap,omitempty"`
	NotAfter    string `json:"notAfter,omitempty"`
	Serial      string `json:"serial,omitempty"`
}

// tlsStatusOf is status.tls of a cache from the reconcile's certificate decision (nil without TLS).
func tlsStatusOf(mc *unstructured.Unstructured, spec api.Spec, d cachetls.Decision) *tlsStatus {
	if !spec.TLS || d.Serial == "" {
		return nil
	}
	return &tlsStatus{CAConfigMap: api.CAConfigMapName(mc.GetName()), NotAfter: d.NotAfter.UTC().Format(time.RFC3339), Serial: d.Serial}
}

// statusOf reads the status of mc; a malformed status reads as empty (it is rewritten whole).
func statusOf(mc *unstructured.Unstructured) cacheStatus {
	var s cacheStatus
	if raw, ok := mc.Object["status"].(map[string]interface{}); ok {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &s); err != nil {
			return cacheStatus{}
		}
	}
	return s
}

// setReady sets the Ready condition; lastTransitionTime moves only when the status flips.
func (s *cacheStatus) setReady(generation int64, ready bool, reason, message string) {
	status := metav1.ConditionFalse
	if ready {
		status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&s.Conditions, metav1.Condition{
		Type: ConditionReady, Status: status, Reason: reason, Message: message, ObservedGeneration: generation,
	})
}

// newStatus computes the status of mc from what the reconcile saw. failure, when set, is the
// reason and message of the first child that could not be applied.
// resizing, when set, is the StorageResizing condition; nil removes it.
// view is what the last member pass found (ok: there was one).
func newStatus(mc *unstructured.Unstructured, spec api.Spec, clusterDomain string, sts *unstructured.Unstructured, resizing *metav1.Condition, view dataplane.View, viewOK bool, failReason, failMessage string) cacheStatus {
	s := statusOf(mc)
	lastPrimary := s.Primary
	gen := mc.GetGeneration()
	s.ObservedGeneration = gen
	port := strconv.Itoa(api.Port)
	s.Endpoint = net.JoinHostPort(api.ServiceHost(api.ReadWriteService(mc.GetName()), mc.GetNamespace(), clusterDomain), port)
	s.ReadEndpoint = net.JoinHostPort(api.ServiceHost(api.ReadOnlyService(mc.GetName()), mc.GetNamespace(), clusterDomain), port)
	applyMemberView(&s, view, viewOK, gen)
	s.Selector = labels.SelectorFromSet(api.SelectorLabels(mc.GetName())).String()
	s.ReadyReplicas = 0
	upToDate := false
	var running int64
	if sts != nil {
		ready, _, _ := unstructured.NestedInt64(sts.Object, "status", "readyReplicas")
		running, _, _ = unstructured.NestedInt64(sts.Object, "status", "replicas")
		observed, _, _ := unstructured.NestedInt64(sts.Object, "status", "observedGeneration")
		updated, _, _ := unstructured.NestedInt64(sts.Object, "status", "updatedReplicas")
		upToDate = observed >= sts.GetGeneration() && updated >= spec.Replicas
		// Members beyond the wanted count are on their way out: they are not counted, so
		// readyReplicas (the scale subresource's status) never exceeds spec.replicas.
		s.ReadyReplicas = min(ready, spec.Replicas)
	}
	if resizing != nil {
		meta.SetStatusCondition(&s.Conditions, *resizing)
	} else {
		meta.RemoveStatusCondition(&s.Conditions, storage.ConditionResizing)
	}
	msg := fmt.Sprintf("%d/%d replicas ready", s.ReadyReplicas, spec.Replicas)
	switch {
	case failReason != "":
		s.setReady(gen, false, failReason, failMessage)
	case running > spec.Replicas:
		s.setReady(gen, false, ReasonWaitingForReplicas,
			fmt.Sprintf("%s; %d members running, waiting for the surplus to stop", msg, running))
	case viewOK && s.Primary == "" && upToDate && s.ReadyReplicas >= spec.Replicas:
		s.setReady(gen, false, roles.ReasonNoPrimary, msg+"; no primary yet")
	case s.Primary == "" && upToDate && s.ReadyReplicas >= spec.Replicas:
		// The member pass that names the primary has not run yet (it follows the same pod
		// events): Ready waits for it, so that it is written once, with the primary.
		s.setReady(gen, false, ReasonWaitingForReplicas, msg+"; waiting for the member pass")
	case upToDate && s.ReadyReplicas >= spec.Replicas:
		s.setReady(gen, true, ReasonAllReplicasReady, msg)
	default:
		s.setReady(gen, false, ReasonWaitingForReplicas, msg)
	}
	if failReason == "" {
		applyHibernation(&s, spec, lastPrimary, gen, running, time.Now())
	}
	return s
}

// invalidStatus is the status of a cache whose spec or templates cannot be rendered.
func invalidStatus(mc *unstructured.Unstructured, reason, message string) cacheStatus {
	s := statusOf(mc)
	s.ObservedGeneration = mc.GetGeneration()
	s.setReady(mc.GetGeneration(), false, reason, message)
	return s
}

func toUnstructured(v interface{}) (map[string]interface{}, error) {
	return runtime.DefaultUnstructuredConverter.ToUnstructured(v)
}

// withStatus returns a copy of mc carrying s, or nil when s is what mc already has.
func withStatus(mc *unstructured.Unstructured, s cacheStatus) (*unstructured.Unstructured, error) {
	if reflect.DeepEqual(statusOf(mc), s) {
		return nil, nil
	}
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&s)
	if err != nil {
		return nil, err
	}
	out := mc.DeepCopy()
	out.Object["status"] = raw
	return out, nil
}

// statusCondition returns the condition of type t in mc's status, or nil.
func statusCondition(mc *unstructured.Unstructured, t string) *metav1.Condition {
	return meta.FindStatusCondition(statusOf(mc).Conditions, t)
}
