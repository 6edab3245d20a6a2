package controller

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/credentials"
	"example.com/cache-operator/engine/informers"
	"example.com/cache-operator/engine/metrics"
	"example.com/cache-operator/engine/ssa"
	"example.com/cache-operator/engine/status"
	"example.com/cache-operator/engine/storage"
)

// errStaleCache means the informer cache is behind the API server; the key is retried.
var errStaleCache = errors.New("informer cache is behind the API server; retrying")

// reconcile brings the cache named key to its desired state from the current state alone: the
// ManagedCache and its children as the informer caches hold them. A cache that is already right
// costs no API request.
func (c *Controller) reconcile(ctx context.Context, key string) error {
	ns, name, err := splitKey(key)
	if err != nil {
		klog.ErrorS(err, "Dropping malformed key", "key", key)
		return nil
	}
	mc, exists, err := c.informers.Cache(key)
	if err != nil {
		return err
	}
	if !exists {
		if err := c.releaseSecret(ctx, ns, name, ""); err != nil {
			return err
		}
		// One call forgets the cache everywhere: here, in the member passes and in the backups.
		c.queue.Forget(key)
		klog.V(4).InfoS("ManagedCache is gone; its children are left to garbage collection", "managedcache", key)
		return nil
	}
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "managedcache", klog.KRef(ns, name))
	ctx = klog.NewContext(ctx, logger)
	mc = c.statusWrites.overlay(key, mc)

	if mc.GetDeletionTimestamp() != nil {
		if err := c.releaseSecret(ctx, ns, name, mc.GetUID()); err != nil {
			return err
		}
		return c.finalize(ctx, mc)
	}
	if mc, err = c.syncFinalizer(ctx, mc); err != nil {
		return err
	}

	spec, err := api.SpecFrom(mc)
	if err != nil {
		c.recorder.Eventf(mc, corev1.EventTypeWarning, api.ReasonInvalidSpec, "Invalid spec: %v", err)
		return c.writeStatus(ctx, mc, status.Invalid(mc, api.ReasonInvalidSpec, err.Error()))
	}

	var resolved bool
	if mc, resolved, err = c.resolveRestore(ctx, mc, spec); !resolved {
		return err
	}
	view, viewOK := c.members.View(key)
	// A restore's phase moves before the children are rendered: the ConfigMap says it completed
	// in the same pass as the status.
	mc = c.advanceRestore(mc, spec, view, viewOK)
	restorePhase := ""
	if rs := api.RestoreStatusOf(mc); rs != nil {
		restorePhase = rs.Phase
	}
	// The claims are the cache's before anything else: a StatefulSet deleted right after must not
	// take them (an informer lookup when they already are).
	claimsErr := c.ownClaims(ctx, mc)
	// A sharded cache keeps the shards a scale-in empties until they hold nothing, then removes them.
	renderSpec, shardSets := spec, 0
	if spec.Sharded() {
		shardSets = c.shardSets(mc, spec, view)
		renderSpec.Shards = int64(shardSets)
		claimsErr = errors.Join(claimsErr, c.removeDrainedShards(ctx, mc, shardSets))
	}
	inputs, epoch := cacheInputs(mc, view.Observed, view.Primary, restorePhase, shardSets), c.differ.DefaultsEpoch()
	if pass, ok := c.verified.get(key); ok && c.stillVerified(pass, inputs, epoch) {
		// Nothing the last verdict read has changed: every child is still as wanted.
		return errors.Join(claimsErr, c.statusOfVerified(ctx, mc, spec, pass, view, viewOK))
	}
	c.verified.forget(key)

	authd, err := c.auth(mc)
	if err != nil {
		return err
	}
	tlsd, err := c.certificates(mc, spec)
	if err != nil {
		return err
	}
	auth := authd.Auth
	auth.TLS = tlsd.Data
	desired, err := c.renderer.Children(mc, renderSpec, c.opts.Render, auth)
	if err != nil {
		c.recorder.Eventf(mc, corev1.EventTypeWarning, api.ReasonRenderFailed, "Rendering templates failed: %v", err)
		return c.writeStatus(ctx, mc, status.Invalid(mc, api.ReasonRenderFailed, err.Error()))
	}
	sortForApply(desired)
	for _, want := range desired {
		if want.GroupVersionKind() == informers.Secret {
			// The credentials and certificates were decided from these versions: a write made
			// from them must not overwrite a later edit (server-side apply checks the
			// resourceVersion it carries).
			switch {
			case want.GetName() == api.SecretName(mc.GetName()) && authd.SecretVersion != "":
				want.SetResourceVersion(authd.SecretVersion)
			case want.GetName() == api.TLSSecretName(mc.GetName()) && tlsd.SecretVersion != "":
				want.SetResourceVersion(tlsd.SecretVersion)
			}
		}
		if want.GroupVersionKind() == informers.StatefulSet && view.Observed && !spec.Hibernate {
			// Only an observed cache hands over; an unobserved one just scales.
			holdScaleDown(want, spec.Replicas, mc.GetName(), view.Primary)
		}
	}

	var failReason, failMessage string
	var retry error
	var sets []*unstructured.Unstructured
	var resize storage.Outcome
	var done changes
	for _, want := range desired {
		var prepErr error
		if want.GroupVersionKind() == informers.StatefulSet {
			if resize, prepErr = c.prepareStorage(ctx, mc, want); prepErr == nil && resize.Replaced {
				// Being replaced to grow its volumes: its pods run on, and status reads the old one.
				if old, _ := c.child(informers.StatefulSet, want.GetNamespace(), want.GetName()); old != nil {
					sets = append(sets, old)
				}
				continue
			}
			if prepErr == nil {
				prepErr = c.prepareUpdateStrategy(ctx, want)
			}
			if prepErr == nil {
				prepErr = c.createClaims(ctx, mc, want)
			}
		}
		live, outcome, err := c.syncUnlessFailed(ctx, mc, want, prepErr, &done)
		metrics.ChildCompared(want.GetKind(), string(outcome))
		if want.GroupVersionKind() == informers.StatefulSet && live != nil {
			sets = append(sets, live)
		}
		if err == nil {
			logger.V(2).Info("Child", "object", ssa.ObjectID(want), "outcome", outcome)
			continue
		}
		if apierrors.IsConflict(err) || errors.Is(err, errStaleCache) {
			// Someone wrote the child between our read and our write, or the informer has not yet
			// seen a child that exists (just created, by this process or a leader before it): the
			// next pass sees it. Neither is a failure to report.
			logger.V(2).Info("Child changed meanwhile; retrying", "object", ssa.ObjectID(want), "why", err.Error())
			retry = errors.Join(retry, err)
			continue
		}
		reason := api.FailedReason(want.GetKind())
		if failReason == "" {
			failReason, failMessage = reason, err.Error()
		}
		logger.Error(err, "Child failed", "object", ssa.ObjectID(want))
		c.recorder.Eventf(mc, corev1.EventTypeWarning, reason, "%v", err)
		if !ssa.IsPermanent(err) && !isNotOurs(err) {
			retry = errors.Join(retry, err)
		}
	}
	done.record(c.recorder, mc)
	if failReason == "" && retry == nil && len(done.created)+len(done.updated) == 0 && resize.Condition == nil &&
		!resize.Replaced && len(done.verified) == len(desired) && authd.OverlapEnds.IsZero() && authd.Rejected == "" {
		// (An overlap ends with time, not with a change the pass would see; a refused password
		// is reported by each pass until it is fixed.)
		pass := verifiedPass{inputs: inputs, epoch: epoch, children: done.verified, until: tlsd.RenewAt}
		for i, ch := range pass.children {
			if c.informers.Children[ch.kind].GVK == informers.StatefulSet {
				pass.sets = append(pass.sets, i)
			}
		}
		c.verified.set(key, pass)
	}
	c.members.Enqueue(key) // the member pass follows what this reconcile wrote
	st := status.New(mc, spec, c.opts.Render.ClusterDomain, status.Observed{StatefulSets: sets, Resizing: resize.Condition,
		View: view, ViewOK: viewOK, FailReason: failReason, FailMessage: failMessage})
	status.ApplyPassword(&st, view, viewOK, authd, mc.GetGeneration())
	st.TLS = status.TLSOf(mc, spec, tlsd)
	c.backupStatus(mc, spec, &st, view, viewOK)
	if err := c.writeStatus(ctx, mc, st); err != nil {
		return errors.Join(retry, err)
	}
	logger.V(3).Info("Reconciled", "failed", failReason)
	return errors.Join(retry, claimsErr)
}

// outcomeVerified is the children_total outcome of a child known to be as wanted from its
// version (no comparison made).
const outcomeVerified = "verified"

// statusOfVerified finishes a reconcile whose children are as its last verified pass found them:
// only the status is computed anew (from the StatefulSet's, which changes as pods come and go).
func (c *Controller) statusOfVerified(ctx context.Context, mc *unstructured.Unstructured, spec api.Spec, pass verifiedPass, view api.MembersView, viewOK bool) error {
	var sets []*unstructured.Unstructured
	for _, i := range pass.sets {
		ch := pass.children[i]
		obj, exists, err := c.informers.Children[ch.kind].Informer.GetIndexer().GetByKey(ch.key)
		if err != nil {
			return err
		}
		if exists {
			sts, err := c.informers.Packer.Unpack(obj)
			if err != nil {
				return err
			}
			sets = append(sets, sts)
		}
	}
	for _, ch := range pass.children {
		metrics.ChildCompared(c.informers.Children[ch.kind].GVK.Kind, outcomeVerified)
	}
	c.verifiedReconciles.Add(1)
	c.members.Enqueue(mc.GetNamespace() + "/" + mc.GetName())
	st := status.New(mc, spec, c.opts.Render.ClusterDomain, status.Observed{StatefulSets: sets, View: view, ViewOK: viewOK})
	status.ApplyPassword(&st, view, viewOK, credentials.Decision{}, mc.GetGeneration())
	if spec.TLS {
		st.TLS = api.StatusOf(mc).TLS // the certificates are as the verified pass decided them
	}
	c.backupStatus(mc, spec, &st, view, viewOK)
	if err := c.writeStatus(ctx, mc, st); err != nil {
		return err
	}
	klog.FromContext(ctx).V(3).Info("Reconciled; every child as verified before")
	return nil
}

// errNotOurs marks a child that exists but belongs to something else.
type errNotOurs struct{ msg string }

func (e errNotOurs) Error() string { return e.msg }

func isNotOurs(err error) bool {
	var n errNotOurs
	return errors.As(err, &n)
}

// syncUnlessFailed is sync, unless preparing want already failed with err.
func (c *Controller) syncUnlessFailed(ctx context.Context, mc, want *unstructured.Unstructured, err error, done *changes) (*unstructured.Unstructured, ssa.Outcome, error) {
	if err != nil {
		return nil, ssa.Failed, err
	}
	return c.sync(ctx, mc, want, done)
}

// sync makes one child match want and notes what it changed in done. It returns the child as it
// now is (the applied result, or the cached object when nothing changed).
func (c *Controller) sync(ctx context.Context, mc, want *unstructured.Unstructured, done *changes) (*unstructured.Unstructured, ssa.Outcome, error) {
	live, err := c.child(want.GroupVersionKind(), want.GetNamespace(), want.GetName())
	if err != nil {
		return nil, ssa.Failed, err
	}
	if live == nil {
		return c.createChild(ctx, mc, want, done)
	}
	switch own, why := ownershipOf(live, mc.GetName(), mc.GetUID()); own {
	case ownedByOther:
		return live, ssa.Failed, errNotOurs{why + "; not adopting it"}
	case orphanOfCache:
		out, err := c.applier.Apply(ctx, want, live)
		if err != nil {
			return live, ssa.Failed, err
		}
		done.updated = append(done.updated, childName(want)+" (adopted)")
		return out, ssa.Configured, nil
	}
	drift, err := c.differ.Drift(want, live, api.FieldManager)
	if err != nil {
		return live, ssa.Failed, err
	}
	if len(drift) == 0 {
		if kind := c.informers.KindIndex(want.GetKind(), want.GetAPIVersion()); kind >= 0 {
			done.verified = append(done.verified, childVersion{kind: kind, key: live.GetNamespace() + "/" + live.GetName(), version: informers.Version(live)})
		}
		return live, ssa.Unchanged, nil
	}
	out, err := c.applier.Apply(ctx, want, live)
	if err != nil {
		return live, ssa.Failed, err
	}
	done.updated = append(done.updated, childName(want)+" ("+summarize(drift)+")")
	return out, ssa.Configured, nil
}

// createChild creates a child the informer cache does not show, with a plain create that fails
// if the object exists. The informers see only objects with the operator's labels, so an object
// of that name may well exist: someone else's (never taken over: a server-side apply with force
// would), or ours with its labels removed (restored, keeping a Secret's password), or one the
// cache has not caught up with (retried). The create also writes the password exactly once.
func (c *Controller) createChild(ctx context.Context, mc, want *unstructured.Unstructured, done *changes) (*unstructured.Unstructured, ssa.Outcome, error) {
	out, err := c.applier.Create(ctx, want)
	if err == nil {
		done.created = append(done.created, childName(want))
		if err := c.differ.LearnDefaults(want, out, api.FieldManager); err != nil {
			klog.FromContext(ctx).Error(err, "Learning the API server's defaults from a create", "object", ssa.ObjectID(want))
		}
		return out, ssa.Created, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nil, ssa.Failed, err
	}
	live, getErr := c.applier.Get(ctx, want)
	if getErr != nil {
		return nil, ssa.Failed, errors.Join(err, getErr)
	}
	if own, why := ownershipOf(live, mc.GetName(), mc.GetUID()); own == ownedByOther {
		return nil, ssa.Failed, errNotOurs{why + "; not adopting it"}
	}
	if live.GetLabels()[api.LabelManagedBy] != api.ManagedByValue {
		// Ours, but someone removed the label the informers select on, so the cache will never
		// show it: restore it (a Secret keeps the password it holds).
		if want.GroupVersionKind() == informers.Secret {
			// The credentials rendered without the Secret in view were generated anew: keep
			// what the Secret holds instead (the next pass decides on it as usual).
			if err := credentials.Keep(want, live); err != nil {
				return nil, ssa.Failed, ssa.Errorf(want, "%w", err)
			}
		}
		out, err := c.applier.Apply(ctx, want, live)
		if err != nil {
			return nil, ssa.Failed, err
		}
		done.updated = append(done.updated, childName(want)+" (labels restored)")
		return out, ssa.Configured, nil
	}
	return nil, ssa.Failed, ssa.Errorf(want, "%w", errStaleCache)
}

// writeStatus writes s to the status subresource if it differs from what mc has. A change that
// only reports progress (the ready count, the members, a message) waits until
// statusProgressInterval has passed since it was first seen and since the cache's last status
// write, and is then written with whatever came meanwhile: a cache whose pods come up one by one
// gets one write for its Ready, not one per pod.
func (c *Controller) writeStatus(ctx context.Context, mc *unstructured.Unstructured, s api.Status) error {
	key := mc.GetNamespace() + "/" + mc.GetName()
	updated, err := status.With(mc, s)
	if err != nil || updated == nil {
		if err == nil {
			c.statusWrites.settled(key)
		}
		return err
	}
	old := api.StatusOf(mc)
	changed := status.Changes(old, s)
	if status.Progress(changed, status.IsReady(old) || status.IsReady(s)) {
		if wait := c.statusWrites.wait(key, time.Now()); wait > 0 {
			c.queue.AddAfter(key, wait)
			return nil
		}
	}
	out, err := c.client.Resource(api.Resource).Namespace(mc.GetNamespace()).UpdateStatus(ctx, updated, metav1.UpdateOptions{FieldManager: api.FieldManager})
	if err != nil {
		return fmt.Errorf("ManagedCache/%s/%s: writing status: %w", mc.GetNamespace(), mc.GetName(), err)
	}
	c.statusWrites.wrote(key, mc.GetResourceVersion(), out)
	status.HibernationEvents(c.recorder, mc, old, s)
	ready := "Unknown"
	for _, cond := range s.Conditions {
		if cond.Type == api.ConditionReady {
			ready = cond.Reason
		}
	}
	klog.FromContext(ctx).Info("Status updated", "ready", ready, "readyReplicas", s.ReadyReplicas, "changed", changed)
	return nil
}

// statusProgressInterval is how long progress alone waits to be written. Five seconds keep
// `kubectl get -w` current for a person and let a cache's progress and the Ready it leads to go
// into one write; in a fleet's roll each member's restart moves the ready count down and up again.
const statusProgressInterval = 5 * time.Second

// statusWrites remembers, per cache, since when progress waits to be written, and the last
// status this process wrote, until the informer cache shows it.
type statusWrites struct {
	mu      sync.Mutex
	pending map[string]time.Time // when unwritten progress was first seen
	last    map[string]writtenStatus
}

// writtenStatus is a status write: the resourceVersion the informer cache showed when it was
// made (over), the one it got, and the status written.
type writtenStatus struct {
	over, rv string
	status   map[string]interface{}
}

// overlay returns mc as this process last wrote it while the informer cache still shows the
// version that write replaced (its watch can lag, or break and list again, as when the API server
// restarts): the status and resourceVersion of the write over the cache's copy, whose spec and
// metadata the status write did not change. Otherwise mc. A reconcile that compared its status
// with the cache's older copy would find nothing to write, and leave our last write (a condition
// since cleared) standing until some other change.
func (w *statusWrites) overlay(key string, mc *unstructured.Unstructured) *unstructured.Unstructured {
	w.mu.Lock()
	defer w.mu.Unlock()
	last, ok := w.last[key]
	if !ok {
		return mc
	}
	if last.over != mc.GetResourceVersion() {
		delete(w.last, key) // the cache has caught up (or someone else wrote)
		return mc
	}
	out := mc.DeepCopy()
	out.Object["status"] = runtime.DeepCopyJSONValue(last.status)
	out.SetResourceVersion(last.rv)
	return out
}

// wait returns how long a progress write of key must wait (0: it may be written now): until
// statusProgressInterval has passed since the progress was first seen (never before the last
// write), so that what comes meanwhile (often the Ready it leads to) goes into the same write.
func (w *statusWrites) wait(key string, now time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pending == nil {
		w.pending = map[string]time.Time{}
	}
	first, ok := w.pending[key]
	if !ok {
		first = now
		w.pending[key] = now
	}
	return max(first.Add(statusProgressInterval).Sub(now), 0)
}

// settled records that key's status needs no write: no progress is pending.
func (w *statusWrites) settled(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.pending, key)
}

// wrote records a status write over resourceVersion from that got out. A write over our own
// last write keeps what the informer cache showed before both.
func (w *statusWrites) wrote(key, from string, out *unstructured.Unstructured) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.last == nil {
		w.last = map[string]writtenStatus{}
	}
	delete(w.pending, key)
	status, _ := out.Object["status"].(map[string]interface{})
	if from == "" || out.GetResourceVersion() == "" || status == nil {
		return
	}
	over := from
	if last, ok := w.last[key]; ok && last.rv == from {
		over = last.over
	}
	w.last[key] = writtenStatus{over: over, rv: out.GetResourceVersion(), status: status}
}

// seen drops key's last write once the informer cache shows it (resourceVersion rv): only a lag
// keeps a copy of a status.
func (w *statusWrites) seen(key, rv string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if last, ok := w.last[key]; ok && last.rv == rv {
		delete(w.last, key)
	}
}

// forget drops a deleted cache.
func (w *statusWrites) forget(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.pending, key)
	delete(w.last, key)
}

// sortForApply puts Secrets first (the StatefulSet's pods need them), keeping template order
// otherwise.
func sortForApply(objs []*unstructured.Unstructured) {
	sort.SliceStable(objs, func(i, j int) bool {
		return objs[i].GetKind() == "Secret" && objs[j].GetKind() != "Secret"
	})
}

// changes is what one reconcile wrote to a cache's children, reported as one Event: a cache of
// seven children gets one "Created" Event, not seven.
type changes struct {
	created, updated []string
	// verified are the children found as wanted, at the version compared.
	verified []childVersion
}

// maxEventMessage keeps an Event's message within what the API server accepts.
const maxEventMessage = 1000

// record emits the Event of a reconcile that changed something: Created (only creates), Updated
// (only updates) or Reconciled (both).
func (ch changes) record(recorder record.EventRecorder, mc *unstructured.Unstructured) {
	var reason, msg string
	switch {
	case len(ch.created) == 0 && len(ch.updated) == 0:
		return
	case len(ch.updated) == 0:
		reason, msg = api.EventCreated, "Created "+strings.Join(ch.created, ", ")
	case len(ch.created) == 0:
		reason, msg = api.EventUpdated, "Updated "+strings.Join(ch.updated, "; ")
	default:
		reason, msg = api.EventReconciled, "Created "+strings.Join(ch.created, ", ")+"; updated "+strings.Join(ch.updated, "; ")
	}
	if len(msg) > maxEventMessage {
		msg = msg[:maxEventMessage-3] + "..."
	}
	recorder.Event(mc, corev1.EventTypeNormal, reason, msg)
}

// childName is how an Event in the cache's namespace names a child: Kind/name.
func childName(obj *unstructured.Unstructured) string { return obj.GetKind() + "/" + obj.GetName() }

// summarize lists up to five drifted paths.
func summarize(drift []string) string {
	if len(drift) > 5 {
		return strings.Join(drift[:5], "; ") + fmt.Sprintf("; and %d more", len(drift)-5)
	}
	return strings.Join(drift, "; ")
}

func splitKey(key string) (string, string, error) {
	parts := strings.Split(key, "/")
	if len(parts) != 2 || parts[0] == "" || parts[1] == "" {
		return "", "", fmt.Errorf("key %q is not namespace/name", key)
	}
	return parts[0], parts[1], nil
}
