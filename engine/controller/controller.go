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
	"net"
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
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"example.com/cache-operator/engine/informers"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/metrics"
	"example.com/cache-operator/engine/render"
	"example.com/cache-operator/engine/ssa"
)

// Options tune the controller.
type Options struct {
	// Render is what rendering takes from flags: image repositories, the cluster domain.
	Render render.Config
	// Workers is the number of caches reconciled at once.
	Workers int
	// Resync is how often every cache is re-checked even without events (0: never).
	Resync time.Duration
	// ShutdownGrace is how long reconciles in flight may run on after shutdown starts before
	// they are cancelled (default 10s): well inside the pod's termination grace period, so that
	// the lease is released before the kubelet kills the process.
	ShutdownGrace time.Duration
	// MemberNetworks are the networks the operator may dial members in (none: any). A cache with
	// a member elsewhere is not observed: its member 0 is labelled primary and it never
	// fails over (used for simulated nodes, whose pod addresses lead nowhere).
	MemberNetworks []*net.IPNet
	// MemberWorkers is the number of member passes run at once (they wait on the network).
	MemberWorkers int
	// MemberPoll is how often each observed cache's members are read (default 1s).
	MemberPoll time.Duration
	// ServiceSettle is how long a planned handover waits after the last change to its members'
	// Service endpoints (dataplane.Options.ServiceSettle).
	ServiceSettle time.Duration
	// MayWrite, when set, is asked before every Redis command that changes a member (the lease
	// fence of the API writes, package app).
	MayWrite func() error
	// Identity names this process on the members' connections (CLIENT SETNAME cache-operator/<identity>).
	Identity string
	// Kube, if set, serves the informers of built-in kinds (children and pods) as typed objects,
	// which a client configured for protobuf decodes at a fraction of the CPU of JSON into
	// unstructured maps. Other kinds, and every kind when Kube is nil, use dynamic informers.
	Kube kubernetes.Interface
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
	// backups, when set, are the cache's backups (SetBackups).
	backups Backups

	queue     workqueue.TypedRateLimitingInterface[string]
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

// New builds a controller: informers for ManagedCaches, for every kind the templates render and
// for the members' pods (only the objects that carry the operator's managed-by label), and the
// member passes.
func New(client dynamic.Interface, mapper meta.RESTMapper, renderer *render.Renderer, recorder record.EventRecorder, opts Options, cleanups ...CleanupFunc) (*Controller, error) {
	if opts.Workers < 1 {
		opts.Workers = 1
	}
	if opts.ShutdownGrace <= 0 {
		opts.ShutdownGrace = 10 * time.Second
	}
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
		opts:     opts,
		client:   client,
		renderer: renderer,
		differ:   ssa.NewDiffer(),
		applier:  ssa.NewApplier(client, mapper, api.FieldManager),
		recorder: recorder,
		cleanups: cleanups,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "managedcache"}),
	}
	// (A child without the managed-by label is found by its create, see createChild.)
	var err error
	if c.informers, err = informers.New(client, mapper, renderer, informers.Options{Resync: opts.Resync, Kube: opts.Kube}); err != nil {
		return nil, err
	}
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
	// A member pass whose view changed has the cache's status rewritten.
	c.members, err = dataplane.New(client, c.informers, recorder,
		dataplane.Options{MemberNetworks: opts.MemberNetworks, Workers: opts.MemberWorkers, Poll: opts.MemberPoll, ServiceSettle: opts.ServiceSettle, MayWrite: opts.MayWrite,
			ClientName: strings.ReplaceAll(api.FieldManager+"/"+opts.Identity, " ", "_")}, c.queue.Add)
	if err != nil {
		return nil, err
	}
	metrics.RegisterFleet(c.informers.CountByReady)
	return c, nil
}

// Reconciles returns how many reconciles have finished (for tests and metrics).
func (c *Controller) Reconciles() int64 { return c.reconciles.Load() }

// Run starts the informers, waits for their caches, and reconciles until ctx ends (Start, then
// RunWorkers).
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

// RunWorkers reconciles until ctx ends. Then it takes no more work (what is queued is left: the
// next leader lists everything anew) and gives the reconciles in flight up to
// Options.ShutdownGrace to finish; after that their context is cancelled, so that every request
// they make returns at once. It returns when no reconcile runs any more.
func (c *Controller) RunWorkers(ctx context.Context) {
	defer utilruntime.HandleCrash()
	if err := c.MigrateStorage(ctx); err != nil {
		klog.ErrorS(err, "Storage migration failed; the next leader retries it")
	}
	c.learnServerDefaults(ctx)
	klog.InfoS("Starting workers", "count", c.opts.Workers)
	// Reconciles run on a context that outlives ctx by the grace, so that one in flight can
	// finish its writes instead of leaving a half-applied cache.
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	var workers sync.WaitGroup
	for i := 0; i < c.opts.Workers; i++ {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for c.processNextWorkItem(ctx, work) {
			}
		}()
	}
	// Member passes too: a switchover in flight when SIGTERM comes finishes (or is undone)
	// within the grace, instead of being cut off after the old primary lost its label.
	c.members.Start(work)
	<-ctx.Done()
	c.queue.ShutDown()
	c.members.ShutDown()
	stopped := make(chan struct{})
	go func() { workers.Wait(); c.members.Wait(); close(stopped) }()
	klog.InfoS("Shutting down: finishing reconciles and member passes in flight", "grace", c.opts.ShutdownGrace, "queued", c.queue.Len())
	select {
	case <-stopped:
	case <-time.After(c.opts.ShutdownGrace):
		klog.InfoS("Reconciles in flight did not finish in time; cancelling them", "grace", c.opts.ShutdownGrace)
		cancelWork()
		<-stopped
	}
}

// processNextWorkItem reconciles one key on the context work. It returns false once ctx has ended
// (shutdown) or the queue is shut down.
func (c *Controller) processNextWorkItem(ctx, work context.Context) bool {
	key, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(key)
	if ctx.Err() != nil {
		return false // shutting down: the backlog is left to the next leader
	}
	start := time.Now()
	err := c.reconcile(work, key)
	metrics.ObserveReconcile(start, err)
	c.reconciles.Add(1)
	if err == nil {
		c.queue.Forget(key)
		return true
	}
	klog.ErrorS(err, "Reconcile failed; retrying with backoff", "managedcache", key, "retries", c.queue.NumRequeues(key))
	c.queue.AddRateLimited(key)
	return true
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
