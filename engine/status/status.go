// Package status computes a ManagedCache's status from what a reconcile saw: the ready count and
// endpoints from the StatefulSet, primary and members from the member pass's view, and every
// condition, each decided in one place (Ready, Degraded, ConfigApplied, PasswordApplied,
// Hibernated; StorageResizing comes from package storage, BackupsReady from package backups).
// It also says what differs between two statuses and whether the difference is progress only.
// It reads and returns values; writing the status is the controller's.
package status

import (
	"fmt"
	"net"
	"reflect"
	"strconv"
	"time"

	"example.com/cache-operator/engine/cachetls"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"example.com/cache-operator/engine/api"
)

// TLSOf is status.tls of a cache from the reconcile's certificate decision (nil without TLS).
func TLSOf(mc *unstructured.Unstructured, spec api.Spec, d cachetls.Decision) *api.TLSStatus {
	if !spec.TLS || d.Serial == "" {
		return nil
	}
	return &api.TLSStatus{CAConfigMap: api.CAConfigMapName(mc.GetName()), NotAfter: d.NotAfter.UTC().Format(time.RFC3339), Serial: d.Serial}
}

// Observed is what a reconcile saw of a cache besides the cache itself.
type Observed struct {
	// StatefulSets are the members' StatefulSets as the informer holds them: the cache's one, or
	// a sharded cache's one per shard (those not made yet are absent).
	StatefulSets []*unstructured.Unstructured
	// Resizing is the StorageResizing condition; nil removes it.
	Resizing *metav1.Condition
	// View is what the last member pass found; ViewOK says there was one.
	View   api.MembersView
	ViewOK bool
	// FailReason and FailMessage, when set, are the reason and message of the first child that
	// could not be applied.
	FailReason, FailMessage string
}

// New computes the status of mc from what the reconcile saw.
func New(mc *unstructured.Unstructured, spec api.Spec, clusterDomain string, o Observed) api.Status {
	failReason, failMessage := o.FailReason, o.FailMessage
	s := api.StatusOf(mc)
	lastPrimary := s.Primary
	gen := mc.GetGeneration()
	s.ObservedGeneration = gen
	port := strconv.Itoa(api.Port)
	s.Endpoint = net.JoinHostPort(api.ServiceHost(api.ReadWriteService(mc.GetName()), mc.GetNamespace(), clusterDomain), port)
	s.ReadEndpoint = net.JoinHostPort(api.ServiceHost(api.ReadOnlyService(mc.GetName()), mc.GetNamespace(), clusterDomain), port)
	applyMemberView(&s, o.View, o.ViewOK, gen)
	s.Selector = labels.SelectorFromSet(api.SelectorLabels(mc.GetName())).String()
	var ready, running int64
	var upToDate bool
	s.ReadyReplicas, running, upToDate = memberCounts(mc.GetName(), spec, o.StatefulSets)
	if o.Resizing != nil {
		meta.SetStatusCondition(&s.Conditions, *o.Resizing)
	} else {
		meta.RemoveStatusCondition(&s.Conditions, api.ConditionStorageResizing)
	}
	ready = s.ReadyReplicas
	msg := fmt.Sprintf("%d/%d replicas ready", ready, spec.Replicas)
	if spec.Sharded() {
		msg = fmt.Sprintf("%d/%d replicas ready in every shard", ready, spec.Replicas)
	}
	switch {
	case failReason != "":
		s.SetReady(gen, false, failReason, failMessage)
	case running > spec.Replicas:
		s.SetReady(gen, false, api.ReasonWaitingForReplicas,
			fmt.Sprintf("%s; %d members running, waiting for the surplus to stop", msg, running))
	case spec.Sharded() && upToDate && ready >= spec.Replicas && !(o.ViewOK && o.View.ClusterWhole):
		why := "waiting for the member pass"
		if o.ViewOK && o.View.DegradedMessage != "" {
			why = o.View.DegradedMessage
		}
		s.SetReady(gen, false, api.ReasonWaitingForReplicas, msg+"; the cluster: "+why)
	case spec.Sharded() && upToDate && ready >= spec.Replicas:
		s.SetReady(gen, true, api.ReasonAllReplicasReady, msg+"; the cluster is ok")
	case o.ViewOK && s.Primary == "" && upToDate && s.ReadyReplicas >= spec.Replicas:
		s.SetReady(gen, false, api.ReasonNoPrimary, msg+"; no primary yet")
	case s.Primary == "" && upToDate && s.ReadyReplicas >= spec.Replicas:
		// The member pass that names the primary has not run yet (it follows the same pod
		// events): Ready waits for it, so that it is written once, with the primary.
		s.SetReady(gen, false, api.ReasonWaitingForReplicas, msg+"; waiting for the member pass")
	case upToDate && s.ReadyReplicas >= spec.Replicas:
		s.SetReady(gen, true, api.ReasonAllReplicasReady, msg)
	default:
		s.SetReady(gen, false, api.ReasonWaitingForReplicas, msg)
	}
	if failReason == "" {
		applyHibernation(&s, spec, lastPrimary, gen, running, time.Now())
	}
	applyReshard(&s, mc.GetName(), spec, o, gen, time.Now())
	return s
}

// Invalid is the status of a cache whose spec or templates cannot be rendered (or whose restore
// source is not there yet): Ready False with reason and message, the rest as mc has it.
func Invalid(mc *unstructured.Unstructured, reason, message string) api.Status {
	s := api.StatusOf(mc)
	s.ObservedGeneration = mc.GetGeneration()
	s.SetReady(mc.GetGeneration(), false, reason, message)
	return s
}

// With returns a copy of mc carrying s, or nil when s is what mc already has.
func With(mc *unstructured.Unstructured, s api.Status) (*unstructured.Unstructured, error) {
	if reflect.DeepEqual(api.StatusOf(mc), s) {
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

// Condition returns the condition of type t in mc's status, or nil.
func Condition(mc *unstructured.Unstructured, t string) *metav1.Condition {
	return meta.FindStatusCondition(api.StatusOf(mc).Conditions, t)
}

// IsReady reports whether a status says Ready.
func IsReady(s api.Status) bool {
	return meta.IsStatusConditionTrue(s.Conditions, api.ConditionReady)
}

// memberCounts reads the members' StatefulSets: how many members are ready (at most
// spec.replicas: members beyond the wanted count are on their way out, and readyReplicas, the
// scale subresource's status, never exceeds spec.replicas), how many run, and whether every set
// has rolled out its current revision to spec.replicas members. A sharded cache counts per shard:
// its ready count is its least ready shard's, a shard without its StatefulSet yet counts none.
func memberCounts(name string, spec api.Spec, sets []*unstructured.Unstructured) (ready, running int64, upToDate bool) {
	byName := map[string]*unstructured.Unstructured{}
	for _, s := range sets {
		if s != nil {
			byName[s.GetName()] = s
		}
	}
	names := []string{name}
	if spec.Sharded() {
		names = names[:0]
		for i := 0; i < int(spec.Shards); i++ {
			names = append(names, api.ShardSetName(name, i))
		}
	}
	ready, upToDate = spec.Replicas, true
	for _, n := range names {
		sts := byName[n]
		if sts == nil {
			return 0, running, false
		}
		r, _, _ := unstructured.NestedInt64(sts.Object, "status", "readyReplicas")
		run, _, _ := unstructured.NestedInt64(sts.Object, "status", "replicas")
		observed, _, _ := unstructured.NestedInt64(sts.Object, "status", "observedGeneration")
		updated, _, _ := unstructured.NestedInt64(sts.Object, "status", "updatedReplicas")
		ready, running = min(ready, r), max(running, run)
		upToDate = upToDate && observed >= sts.GetGeneration() && updated >= spec.Replicas
	}
	return ready, running, upToDate
}
