// Package backups runs a cache's backups: ManagedCacheBackup objects (created by a user, or by the
// cache's spec.backup.schedule) become Jobs that stream a member's snapshot to the store (package
// snapshot), and their status is filled from the manifest the Job wrote. It keeps spec.backup.keep
// completed backups, in the bucket and as objects, resolves a new cache's spec.restore, and deletes
// a cache's backups in the bucket before the cache goes when spec.backup.onDelete says Delete.
//
// It never handles the data itself, and it does not write a cache's status: the cache controller
// (package controller) asks it for the cache's backup status and condition (Hooks) and writes them
// with the rest. Its queue holds cache keys: a backup's or a Job's event enqueues its cache.
package backups

import (
	"context"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/informers"
	"example.com/cache-operator/engine/internal/workloop"
	"example.com/cache-operator/engine/objectstore"
	"example.com/cache-operator/engine/render"
)

// Deps are what the backups are built on (package app builds them).
type Deps struct {
	Client   dynamic.Interface
	Kube     kubernetes.Interface
	Renderer *render.Renderer
	Recorder record.EventRecorder
	// Caches are the caches' informers (package informers): the backups read the caches there.
	Caches *informers.Set
	// Reconciles is the cache controller's work loop: a cache whose backups changed is added to
	// it, so that its status (which reads Status) is written again. A cache it forgets is
	// forgotten here too.
	Reconciles *workloop.Loop
}

// Options tune the controller.
type Options struct {
	// Render is the templates' configuration (the operator's image, the cluster domain).
	Render render.Config
	// Workers reconcile caches' backups in parallel.
	Workers int
	// StoreCheck is how often a cache's store is checked when nothing else reads it.
	StoreCheck time.Duration
	// Now is the clock (tests).
	Now func() time.Time
	// ShutdownGrace is how long a cache's backups pass in flight may run on after shutdown
	// begins (default 10s).
	ShutdownGrace time.Duration
	// Namespace, when set, limits the backups and Jobs watched to that namespace ("": all).
	Namespace string
}

// Controller runs the backups.
type Controller struct {
	opts     Options
	client   dynamic.Interface
	kube     kubernetes.Interface
	renderer *render.Renderer
	recorder record.EventRecorder
	caches   *informers.Set
	// reconciles is the cache controller's work loop (Deps.Reconciles).
	reconciles *workloop.Loop

	factory     dynamicinformer.DynamicSharedInformerFactory
	jobsFactory dynamicinformer.DynamicSharedInformerFactory
	backups     cache.SharedIndexInformer
	jobs        cache.SharedIndexInformer
	queue       *workloop.Loop

	mu     sync.Mutex
	state  map[string]*cacheState
	stores map[string]objectstore.Store // by namespace/secret: the last read
}

// cacheState is what the controller remembers of a cache between passes.
type cacheState struct {
	// condition is the BackupsReady condition the cache's status shows.
	condition metav1.Condition
	checked   time.Time
	// next is when the schedule creates the next backup.
	next time.Time
	// held: this cache made its store's Secret wait for its deletion (StoreFinalizer).
	held bool
	// exported is the start of the last completed backup this process exported as metrics.
	exported time.Time
}

// byCache indexes backups and Jobs by namespace/<cache>.
const byCache = "cache"

// New builds the controller on the cache controller's informers.
func New(d Deps, opts Options) (*Controller, error) {
	if opts.Workers < 1 {
		opts.Workers = 2
	}
	if opts.StoreCheck <= 0 {
		opts.StoreCheck = 5 * time.Minute
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.ShutdownGrace <= 0 {
		opts.ShutdownGrace = 10 * time.Second
	}
	client := d.Client
	if opts.Render.ClusterDomain == "" {
		opts.Render.ClusterDomain = api.DefaultClusterDomain
	}
	c := &Controller{
		opts: opts, client: client, kube: d.Kube, renderer: d.Renderer, recorder: d.Recorder, caches: d.Caches, reconciles: d.Reconciles,
		queue: workloop.New(workloop.Options{Name: "managedcachebackup", Workers: opts.Workers, Grace: opts.ShutdownGrace}),
		state: map[string]*cacheState{}, stores: map[string]objectstore.Store{},
	}
	c.factory = dynamicinformer.NewFilteredDynamicSharedInformerFactory(client, 10*time.Hour, opts.Namespace, nil)
	c.backups = c.factory.ForResource(api.BackupResource).Informer()
	jobs := dynamicinformer.NewFilteredDynamicSharedInformerFactory(client, 10*time.Hour, opts.Namespace,
		func(o *metav1.ListOptions) { o.LabelSelector = api.LabelBackupCache })
	c.jobs = jobs.ForResource(api.JobResource).Informer()
	index := cache.Indexers{byCache: func(obj interface{}) ([]string, error) {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			if name := cacheOf(u); name != "" {
				return []string{u.GetNamespace() + "/" + name}, nil
			}
		}
		return nil, nil
	}}
	for _, inf := range []cache.SharedIndexInformer{c.backups, c.jobs} {
		if err := inf.AddIndexers(index); err != nil {
			return nil, err
		}
		// A backup's change also has its cache's status written again (status.backup reads
		// the backups from this informer, which holds the change by the time the handler runs).
		backups := inf == c.backups
		handle := func(obj interface{}) {
			if key, ok := cacheKeyOf(obj); ok {
				c.queue.Add(key)
				if backups {
					c.reconciles.Add(key)
				}
			}
		}
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    handle,
			UpdateFunc: func(_, cur interface{}) { handle(cur) },
			DeleteFunc: handle,
		}); err != nil {
			return nil, err
		}
	}
	if _, err := d.Caches.Caches.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueCache,
		UpdateFunc: func(_, cur interface{}) { c.enqueueCache(cur) },
		DeleteFunc: c.enqueueCache,
	}); err != nil {
		return nil, err
	}
	c.jobsFactory = jobs
	d.Reconciles.OnForget(c.forget)
	return c, nil
}

// cacheOf is the cache a backup (spec.cache) or a Job (its label) belongs to.
func cacheOf(u *unstructured.Unstructured) string {
	if name, _, _ := unstructured.NestedString(u.Object, "spec", "cache"); name != "" && u.GetKind() != "Job" {
		return name
	}
	return u.GetLabels()[api.LabelBackupCache]
}

// cacheKeyOf is namespace/<cache> of a backup, a Job, or the tombstone of either.
func cacheKeyOf(obj interface{}) (string, bool) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	if u, ok := obj.(*unstructured.Unstructured); ok {
		if name := cacheOf(u); name != "" {
			return u.GetNamespace() + "/" + name, true
		}
	}
	return "", false
}

func (c *Controller) enqueueCache(obj interface{}) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.queue.Add(key)
}

// Start starts the informers and waits for their caches.
func (c *Controller) Start(ctx context.Context) error {
	c.factory.Start(ctx.Done())
	c.jobsFactory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), c.backups.HasSynced, c.jobs.HasSynced) {
		return fmt.Errorf("backups: informer caches did not sync")
	}
	return nil
}

// RunWorkers reconciles until ctx ends; a pass in flight then gets Options.ShutdownGrace.
func (c *Controller) RunWorkers(ctx context.Context) {
	c.queue.Run(ctx, c.sync)
}

// backupsOf returns copies of the cache's backups, oldest first.
func (c *Controller) backupsOf(key string) []*unstructured.Unstructured {
	return sortedCopies(c.backups, key)
}

// job returns the Job namespace/name from the informer cache.
func (c *Controller) job(namespace, name string) *unstructured.Unstructured {
	obj, ok, err := c.jobs.GetIndexer().GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return nil
	}
	return obj.(*unstructured.Unstructured)
}

func (c *Controller) stateOf(key string) *cacheState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stateLocked(key)
}

// stateLocked is stateOf, with c.mu held.
func (c *Controller) stateLocked(key string) *cacheState {
	s := c.state[key]
	if s == nil {
		s = &cacheState{}
		c.state[key] = s
	}
	return s
}

// forget drops what the controller remembers of a deleted cache, and its backoff.
func (c *Controller) forget(key string) {
	c.mu.Lock()
	delete(c.state, key)
	c.mu.Unlock()
	c.queue.Forget(key)
}
