// Package controller is the ManagedCache controller: it renders each cache's children (package
// render), compares each with the live object from an informer cache and applies only what
// drifted (package ssa), keeps the password Secret, and writes the cache's status conditions.
// Child events are routed to the cache that controls them; one rate-limited queue holds cache keys.
//
// It works on unstructured.Unstructured objects through the dynamic client and dynamic
// informers, with no generated types, and deliberately without controller-runtime: the operator
// needs one workqueue of ManagedCache keys, a handful of informers and an apply loop, all of which
// client-go provides directly, and owning them keeps every API request visible (a reconcile of a
// cache that is already right makes none).
//
// What the informers hold and how is package informers; the member passes, which read the members'
// servers and move the roles, are package dataplane, whose views the status reads.
//
// It is not for wiring a process (package app), rendering, diffing, the members' servers, or the
// password's rules (package credentials).
package controller

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"example.com/cache-operator/engine/cachetls"
	"example.com/cache-operator/engine/credentials"
	"example.com/cache-operator/engine/dataplane"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"example.com/cache-operator/engine/informers"
	"example.com/cache-operator/engine/internal/workloop"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/metrics"
	"example.com/cache-operator/engine/render"
	"example.com/cache-operator/engine/ssa"
)

// Options tune the controller.
type Options struct {
	// Render is what rendering takes from flags: image repositories, the cluster domain.
	Render render.Config
	// Namespace is where the dry-run creates that learn the API server's defaults go (the
	// operator's own; default "default").
	Namespace string
	// PasswordOverlap is how long the previous clients' password is still accepted after a
	// rotation (default credentials.DefaultPasswordOverlap).
	PasswordOverlap time.Duration
	// CertificateLifetime is a TLS cache's members' certificates' lifetime (the CA's is ten times
	// as long); renewed with a third left (default cachetls.DefaultLifetime).
	CertificateLifetime time.Duration
}

// Deps are what the controller is built on; package app builds them, each once, and hands them
// over here: nothing is wired after construction.
type Deps struct {
	Client   dynamic.Interface
	Mapper   meta.RESTMapper
	Renderer *render.Renderer
	Recorder record.EventRecorder
	// Informers hold the caches, their children and the members' pods.
	Informers *informers.Set
	// Queue is the reconciles' work loop (its workers, grace and retries). The member passes
	// and the backups add a cache to it when what they found changed; a deleted cache is
	// forgotten by one call to its Forget, which every package that keeps per-cache state hooks.
	Queue *workloop.Loop
	// Members are the member passes, whose views the status reads.
	Members *dataplane.Controller
	// Backups are the caches' backups (nil: none, in tests).
	Backups Backups
}

// CleanupFunc releases what a cache holds outside the cluster when it is deleted. The finalizer
// is removed only after every CleanupFunc succeeded; an error is retried with backoff.
type CleanupFunc func(ctx context.Context, mc *unstructured.Unstructured) error

// Controller reconciles ManagedCaches: one rate-limited queue of namespace/name keys, fed by the
// ManagedCache informer and by the child informers (through the child's controller reference).
type Controller struct {
	opts     Options
	client   dynamic.Interface
	renderer *render.Renderer
	differ   *ssa.Differ
	applier  *ssa.Applier
	recorder record.EventRecorder
	cleanups []CleanupFunc
	// backups are the caches' backups (nil: none).
	backups Backups

	queue     *workloop.Loop
	informers *informers.Set
	// members runs the member passes, whose views the status reads.
	members *dataplane.Controller

	reconciles atomic.Int64
	// statusWrites paces status writes that only report progress.
	statusWrites statusWrites
	// verified remembers each cache's last reconcile that found every child as wanted;
	// verifiedReconciles counts the reconciles that went by it.
	verified           verifiedPasses
	verifiedReconciles atomic.Int64
	// rejectedPasswords holds, per cache, the hash of the Secret password last refused, so
	// that each refused value gets one Event.
	rejectedPasswords sync.Map
	// restoreOutcomes holds, per cache key, the restore outcome last reported (with the cache's
	// UID), so that a pass that recomputes it from a stale copy (a status write not yet in the
	// informer, or one that conflicted) reports it once: one Event and one count in
	// cache_operator_restores_total.
	restoreOutcomes sync.Map
	// keptSecrets holds, per cache key, the UID of the password Secret last reported as deleted
	// and kept; lastSecrets the last copy of a cache's password Secret that left the informer
	// (protection.go).
	keptSecrets, lastSecrets sync.Map
}

// New builds a controller on d: it routes the events of the caches, their children and their
// claims to d.Queue.
func New(d Deps, opts Options, cleanups ...CleanupFunc) (*Controller, error) {
	if opts.CertificateLifetime <= 0 {
		opts.CertificateLifetime = cachetls.DefaultLifetime
	}
	if opts.PasswordOverlap <= 0 {
		opts.PasswordOverlap = credentials.DefaultPasswordOverlap
	}
	if opts.Render.ClusterDomain == "" {
		opts.Render.ClusterDomain = api.DefaultClusterDomain
	}
	c := &Controller{
		opts:      opts,
		client:    d.Client,
		renderer:  d.Renderer,
		differ:    ssa.NewDiffer(),
		applier:   ssa.NewApplier(d.Client, d.Mapper, api.FieldManager),
		recorder:  d.Recorder,
		cleanups:  cleanups,
		backups:   d.Backups,
		queue:     d.Queue,
		informers: d.Informers,
		members:   d.Members,
	}
	// (A child without the managed-by label is found by its create, see createChild.)
	if _, err := c.informers.Caches.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: c.cacheUpdated,
		DeleteFunc: c.enqueue,
	}); err != nil {
		return nil, err
	}
	for _, k := range c.informers.Children {
		readsStatus := k.GVK == informers.StatefulSet // status is computed from the StatefulSet's
		deleted := c.enqueueOwner
		if k.GVK == informers.Secret {
			deleted = func(obj interface{}) { c.secretDeleted(obj); c.enqueueOwner(obj) }
		}
		if _, err := k.Informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: c.enqueueOwner,
			UpdateFunc: func(old, cur interface{}) {
				if o, n := old.(metav1.Object), cur.(metav1.Object); o.GetResourceVersion() != n.GetResourceVersion() &&
					(readsStatus || !informers.StatusOnlyChildUpdate(old, cur)) {
					c.enqueueOwner(cur)
				}
			},
			DeleteFunc: deleted,
		}); err != nil {
			return nil, err
		}
	}
	// A claim made (or changed) is given the cache's owner reference.
	if _, err := c.informers.Claims.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.claimChanged,
		UpdateFunc: func(old, cur interface{}) {
			if old.(metav1.Object).GetResourceVersion() != cur.(metav1.Object).GetResourceVersion() {
				c.claimChanged(cur)
			}
		},
	}); err != nil {
		return nil, err
	}
	c.queue.OnForget(c.forget)
	metrics.RegisterFleet(c.informers.CountByReady)
	return c, nil
}

// forget drops what the controller remembers of a deleted cache, and its metrics.
func (c *Controller) forget(key string) {
	ns, name, _ := strings.Cut(key, "/")
	c.forgetProtections(key)
	c.statusWrites.forget(key)
	c.verified.forget(key)
	c.forgetRestoreOutcomes(ns, name)
	c.rejectedPasswords.Delete(key)
	metrics.ForgetCache(ns, name)
}

// Reconciles returns how many reconciles have finished (for tests and metrics).
func (c *Controller) Reconciles() int64 { return c.reconciles.Load() }

// Run starts the informers, waits for their caches, and reconciles until ctx ends (Start, then
// RunWorkers); it does not run the member passes or the backups (package app runs them).
func (c *Controller) Run(ctx context.Context) error {
	if err := c.Start(ctx); err != nil {
		return err
	}
	c.RunWorkers(ctx)
	return nil
}

// Start starts the informers and waits until their caches have synced. Every replica does this
// (the webhooks read the cache); only the leader runs workers.
func (c *Controller) Start(ctx context.Context) error {
	return c.informers.Start(ctx)
}

// RunWorkers reconciles until ctx ends. Then the work loop takes no more keys (what is queued is
// left: the next leader lists everything anew) and gives the reconciles in flight their grace to
// finish, so that one in flight finishes its writes instead of leaving a half-applied cache;
// after that their context is cancelled. It returns when no reconcile runs any more.
func (c *Controller) RunWorkers(ctx context.Context) {
	defer utilruntime.HandleCrash()
	if err := c.MigrateStorage(ctx); err != nil {
		klog.ErrorS(err, "Storage migration failed; the next leader retries it")
	}
	c.learnServerDefaults(ctx)
	klog.InfoS("Starting the reconciles")
	c.queue.Run(ctx, func(ctx context.Context, key string) (time.Duration, error) {
		start := time.Now()
		err := c.reconcile(ctx, key)
		metrics.ObserveReconcile(start, err)
		c.reconciles.Add(1)
		return 0, err
	})
}

func (c *Controller) enqueue(obj interface{}) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.queue.Add(key)
}

// cacheUpdated enqueues a ManagedCache unless only its status changed (the operator's own status
// write must not cause a second pass). A resync (same resourceVersion) is enqueued: it is the
// periodic full check.
func (c *Controller) cacheUpdated(old, cur interface{}) {
	o, n := old.(metav1.Object), cur.(metav1.Object)
	c.statusWrites.seen(n.GetNamespace()+"/"+n.GetName(), n.GetResourceVersion())
	if o.GetResourceVersion() != n.GetResourceVersion() && statusOnlyUpdate(o, n) {
		return
	}
	c.enqueue(cur)
}

// statusOnlyUpdate reports whether an update changed only what no reconcile reads: a cache's
// status (the operator's own write), a child's status (a PodDisruptionBudget's counts move with
// every member's readiness), or managedFields. A change of spec moves the generation; one of
// metadata shows in the fields compared. A kind without a generation (Secret, Service) never
// counts as status-only.
func statusOnlyUpdate(old, cur metav1.Object) bool {
	return cur.GetGeneration() != 0 && old.GetGeneration() == cur.GetGeneration() &&
		reflect.DeepEqual(old.GetLabels(), cur.GetLabels()) &&
		reflect.DeepEqual(old.GetAnnotations(), cur.GetAnnotations()) &&
		reflect.DeepEqual(old.GetOwnerReferences(), cur.GetOwnerReferences()) &&
		reflect.DeepEqual(old.GetFinalizers(), cur.GetFinalizers()) &&
		old.GetDeletionTimestamp().Equal(cur.GetDeletionTimestamp())
}

// enqueueOwner enqueues the ManagedCache that controls a child; an orphan carrying a cache's
// labels enqueues that cache (which will adopt it). Other objects are ignored.
func (c *Controller) enqueueOwner(obj interface{}) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	o, ok := obj.(metav1.Object)
	if !ok {
		utilruntime.HandleError(fmt.Errorf("unexpected object in child informer: %T", obj))
		return
	}
	if ref := metav1.GetControllerOfNoCopy(o); ref != nil {
		if api.IsManagedCacheRef(ref) {
			c.queue.Add(o.GetNamespace() + "/" + ref.Name)
		}
		return
	}
	if l := o.GetLabels(); l[api.LabelManagedBy] == api.ManagedByValue && l[api.LabelInstance] != "" {
		c.queue.Add(o.GetNamespace() + "/" + l[api.LabelInstance])
	}
}

// child returns the live child of kind gvk named namespace/name from the informer cache: a copy
// of its own (nil if there is none).
func (c *Controller) child(gvk schema.GroupVersionKind, namespace, name string) (*unstructured.Unstructured, error) {
	return c.informers.Child(gvk, namespace, name)
}

// learnServerDefaults dry-run creates sample children, so that the drift check knows which fields
// the API server fills in on create (a plain create records them as the operator's): without it,
// every child created by an earlier process would look drifted and be applied once more. Each
// create also teaches it (createChild). A failure costs only those applies, so it is logged.
func (c *Controller) learnServerDefaults(ctx context.Context) {
	ns := c.opts.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	samples, err := c.renderer.Samples(ns, "cache-operator-defaults")
	if err != nil {
		klog.ErrorS(err, "Rendering samples to learn the API server's defaults")
		return
	}
	gvrs := map[schema.GroupVersionKind]schema.GroupVersionResource{}
	for _, k := range c.informers.Children {
		gvrs[k.GVK] = k.GVR
	}
	learned := 0
	for _, want := range samples {
		probe := want.DeepCopy()
		probe.SetName("")
		probe.SetGenerateName("cache-operator-defaults-")
		out, err := c.client.Resource(gvrs[want.GroupVersionKind()]).Namespace(ns).Create(ctx, probe,
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldManager: api.FieldManager})
		if err == nil {
			err = c.differ.LearnDefaults(probe, out, api.FieldManager)
		}
		if err != nil {
			klog.ErrorS(err, "Learning the API server's defaults by a dry-run create; children created by an earlier process may be applied once more", "kind", want.GetKind())
			continue
		}
		learned++
	}
	klog.V(2).InfoS("Learned the API server's defaults", "samples", learned)
}
