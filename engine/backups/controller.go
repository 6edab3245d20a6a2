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
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/objectstore"
	"example.com/cache-operator/engine/render"
)

// Caches is what this controller reads of the cache controller: the caches' informer and a way
// to have a cache's status written again.
type Caches interface {
	// Cache returns the cache namespace/name from the informer cache.
	Cache(key string) (*unstructured.Unstructured, bool, error)
	// CacheInformer is the caches' informer.
	CacheInformer() cache.SharedIndexInformer
	// Enqueue has the cache controller reconcile the cache (its status reads Status).
	Enqueue(key string)
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
}

// Controller runs the backups.
type Controller struct {
	opts     Options
	client   dynamic.Interface
	kube     kubernetes.Interface
	renderer *render.Renderer
	recorder record.EventRecorder
	caches   Caches

	factory     dynamicinformer.DynamicSharedInformerFactory
	jobsFactory dynamicinformer.DynamicSharedInformerFactory
	backups     cache.SharedIndexInformer
	jobs        cache.SharedIndexInformer
	queue       workqueue.TypedRateLimitingInterface[string]

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
func New(client dynamic.Interface, kube kubernetes.Interface, renderer *render.Renderer, recorder record.EventRecorder, caches Caches, opts Options) (*Controller, error) {
	if opts.Workers < 1 {
		opts.Workers = 2
	}
	if opts.StoreCheck <= 0 {
		opts.StoreCheck = 5 * time.Minute
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Render.ClusterDomain == "" {
		opts.Render.ClusterDomain = api.DefaultClusterDomain
	}
	c := &Controller{
		opts: opts, client: client, kube: kube, renderer: renderer, recorder: recorder, caches: caches,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "managedcachebackup"}),
		state: map[string]*cacheState{}, stores: map[string]objectstore.Store{},
	}
	c.factory = dynamicinformer.NewFilteredDynamicSharedInformerFactory(client, 10*time.Hour, metav1.NamespaceAll,
		func(o *metav1.ListOptions) {})
	c.backups = c.factory.ForResource(api.BackupResource).Informer()
	jobs := dynamicinformer.NewFilteredDynamicSharedInformerFactory(client, 10*time.Hour, metav1.NamespaceAll,
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
					c.caches.Enqueue(key)
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
	if _, err := caches.CacheInformer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueCache,
		UpdateFunc: func(_, cur interface{}) { c.enqueueCache(cur) },
		DeleteFunc: c.enqueueCache,
	}); err != nil {
		return nil, err
	}
	c.jobsFactory = jobs
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

// RunWorkers reconciles until ctx ends.
func (c *Controller) RunWorkers(ctx context.Context) {
	defer utilruntime.HandleCrash()
	var wg sync.WaitGroup
	for i := 0; i < c.opts.Workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c.next(ctx) {
			}
		}()
	}
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
}

func (c *Controller) next(ctx context.Context) bool {
	key, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(key)
	if ctx.Err() != nil {
		return false
	}
	after, err := c.sync(ctx, key)
	if err != nil {
		klog.ErrorS(err, "Backups of a cache failed; retrying with backoff", "managedcache", key, "retries", c.queue.NumRequeues(key))
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	if after > 0 {
		c.queue.AddAfter(key, after)
	}
	return true
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

func (c *Controller) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.state, key)
}
