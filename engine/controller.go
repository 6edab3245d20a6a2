package engine

import (
	"context"
	"fmt"
	"reflect"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// Options tune the controller.
type Options struct {
	// Images maps each engine (redis, valkey) to its image repository; the tag is the version.
	Images ImageRepositories
	// Workers is the number of caches reconciled at once.
	Workers int
	// Resync is how often every cache is re-checked even without events (0: never).
	Resync time.Duration
	// FieldManager is the server-side apply field manager, and the user agent's stem.
	FieldManager string
}

// CleanupFunc releases what a cache holds outside the cluster when it is deleted. The finalizer
// is removed only after every CleanupFunc succeeded; an error is retried with backoff.
type CleanupFunc func(ctx context.Context, mc *unstructured.Unstructured) error

// childKind is one kind the templates produce, with its informer.
type childKind struct {
	gvk      schema.GroupVersionKind
	gvr      schema.GroupVersionResource
	informer cache.SharedIndexInformer
}

// Controller reconciles ManagedCaches: one rate-limited queue of namespace/name keys, fed by the
// ManagedCache informer and by the child informers (through the child's controller reference).
type Controller struct {
	opts     Options
	client   dynamic.Interface
	renderer *Renderer
	differ   *Differ
	applier  *Applier
	recorder record.EventRecorder
	cleanups []CleanupFunc

	queue     workqueue.TypedRateLimitingInterface[string]
	caches    cache.SharedIndexInformer
	children  []childKind
	factories []dynamicinformer.DynamicSharedInformerFactory

	reconciles atomic.Int64
}

// New builds a controller: informers for ManagedCaches and for every kind the templates render.
// Secrets are watched only when they carry the operator's managed-by label.
func New(client dynamic.Interface, mapper meta.RESTMapper, renderer *Renderer, recorder record.EventRecorder, opts Options, cleanups ...CleanupFunc) (*Controller, error) {
	if opts.Workers < 1 {
		opts.Workers = 1
	}
	c := &Controller{
		opts:     opts,
		client:   client,
		renderer: renderer,
		differ:   NewDiffer(),
		applier:  NewApplier(client, mapper, opts.FieldManager),
		recorder: recorder,
		cleanups: cleanups,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "managedcache"}),
	}
	all := dynamicinformer.NewDynamicSharedInformerFactory(client, opts.Resync)
	labelled := dynamicinformer.NewFilteredDynamicSharedInformerFactory(client, 0, metav1.NamespaceAll, func(o *metav1.ListOptions) {
		o.LabelSelector = labels.SelectorFromSet(labels.Set{LabelManagedBy: ManagedByValue}).String()
	})
	c.factories = []dynamicinformer.DynamicSharedInformerFactory{all, labelled}

	c.caches = all.ForResource(Resource).Informer()
	if _, err := c.caches.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: c.cacheUpdated,
		DeleteFunc: c.enqueue,
	}); err != nil {
		return nil, err
	}

	kinds, err := renderer.Kinds()
	if err != nil {
		return nil, fmt.Errorf("rendering a sample cache to find the child kinds: %w", err)
	}
	for _, gvk := range kinds {
		gvr, err := gvrFor(mapper, gvk)
		if err != nil {
			return nil, fmt.Errorf("child kind %s: %w", gvk, err)
		}
		factory := all
		if gvk.Group == "" && gvk.Kind == "Secret" {
			factory = labelled
		}
		inf := factory.ForResource(gvr).Informer()
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: c.enqueueOwner,
			UpdateFunc: func(old, cur interface{}) {
				if old.(metav1.Object).GetResourceVersion() != cur.(metav1.Object).GetResourceVersion() {
					c.enqueueOwner(cur)
				}
			},
			DeleteFunc: c.enqueueOwner,
		}); err != nil {
			return nil, err
		}
		c.children = append(c.children, childKind{gvk: gvk, gvr: gvr, informer: inf})
	}
	registerFleet(c)
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
	for _, f := range c.factories {
		f.Start(ctx.Done())
	}
	synced := []cache.InformerSynced{c.caches.HasSynced}
	for _, k := range c.children {
		synced = append(synced, k.informer.HasSynced)
	}
	klog.InfoS("Waiting for informer caches to sync", "kinds", len(synced))
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("informer caches did not sync")
	}
	return nil
}

// RunWorkers reconciles until ctx ends; then it stops taking work and waits up to drain for the
// reconciles in flight.
func (c *Controller) RunWorkers(ctx context.Context) {
	defer utilruntime.HandleCrash()
	klog.InfoS("Starting workers", "count", c.opts.Workers)
	done := make(chan struct{})
	for i := 0; i < c.opts.Workers; i++ {
		go func() {
			wait.UntilWithContext(ctx, c.worker, time.Second)
			done <- struct{}{}
		}()
	}
	<-ctx.Done()
	klog.InfoS("Shutting down: finishing reconciles in flight")
	drained := make(chan struct{})
	go func() { c.queue.ShutDownWithDrain(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(drainTimeout):
		klog.InfoS("Reconciles in flight did not finish in time; stopping anyway", "timeout", drainTimeout)
		c.queue.ShutDown()
	}
	for i := 0; i < c.opts.Workers; i++ {
		<-done
	}
}

// drainTimeout bounds how long a shutdown waits for reconciles in flight.
const drainTimeout = 20 * time.Second

// HasSynced reports whether every informer cache has synced.
func (c *Controller) HasSynced() bool {
	if !c.caches.HasSynced() {
		return false
	}
	for _, k := range c.children {
		if !k.informer.HasSynced() {
			return false
		}
	}
	return true
}

func (c *Controller) worker(ctx context.Context) {
	for c.processNextWorkItem(ctx) {
	}
}

func (c *Controller) processNextWorkItem(ctx context.Context) bool {
	key, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(key)
	start := time.Now()
	err := c.reconcile(context.WithoutCancel(ctx), key) // an in-flight reconcile finishes on shutdown
	observeReconcile(start, err)
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
	o, n := old.(*unstructured.Unstructured), cur.(*unstructured.Unstructured)
	if o.GetResourceVersion() != n.GetResourceVersion() &&
		o.GetGeneration() == n.GetGeneration() &&
		reflect.DeepEqual(o.GetLabels(), n.GetLabels()) &&
		reflect.DeepEqual(o.GetAnnotations(), n.GetAnnotations()) &&
		reflect.DeepEqual(o.GetFinalizers(), n.GetFinalizers()) &&
		reflect.DeepEqual(o.GetOwnerReferences(), n.GetOwnerReferences()) &&
		o.GetDeletionTimestamp().Equal(n.GetDeletionTimestamp()) {
		return
	}
	c.enqueue(cur)
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
		if isManagedCacheRef(ref) {
			c.queue.Add(o.GetNamespace() + "/" + ref.Name)
		}
		return
	}
	if l := o.GetLabels(); l[LabelManagedBy] == ManagedByValue && l[LabelInstance] != "" {
		c.queue.Add(o.GetNamespace() + "/" + l[LabelInstance])
	}
}

// child returns the live child of kind gvk named namespace/name from the informer cache.
func (c *Controller) child(gvk schema.GroupVersionKind, namespace, name string) (*unstructured.Unstructured, error) {
	for _, k := range c.children {
		if k.gvk != gvk {
			continue
		}
		obj, exists, err := k.informer.GetIndexer().GetByKey(namespace + "/" + name)
		if err != nil || !exists {
			return nil, err
		}
		return obj.(*unstructured.Unstructured), nil
	}
	return nil, fmt.Errorf("%s is not a watched child kind", gvk)
}

// Annotations returns the annotations of the ManagedCache namespace/name from the informer cache
// (for the validating webhook's scale rule).
func (c *Controller) Annotations(namespace, name string) (map[string]string, bool) {
	obj, exists, err := c.caches.GetIndexer().GetByKey(namespace + "/" + name)
	if err != nil || !exists {
		return nil, false
	}
	return obj.(*unstructured.Unstructured).GetAnnotations(), true
}
