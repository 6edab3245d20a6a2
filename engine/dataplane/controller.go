// Package dataplane runs the member passes: about once a second per cache, it reads every
// member's server (package member), decides the roles (package roles) and carries the decision
// out: role labels, promotions, failovers, switchovers and rolls one member at a time (a sharded
// cache's pass forms and mends its cluster with package shardpass instead). The same
// pass keeps the members' live settings (CONFIG SET) and credentials (ACL SETUSER, package
// credentials) current, without a restart. What a pass finds is kept as a View, which the
// reconcile (package controller) turns into the cache's status.
//
// It is not for the cache's children (package controller) nor for speaking the Redis protocol
// (package member).
package dataplane

import (
	"context"
	"net"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/informers"
	"example.com/cache-operator/engine/internal/workloop"
	"example.com/cache-operator/engine/member"
	"example.com/cache-operator/engine/metrics"
)

// Options tune the member passes.
type Options struct {
	// MemberNetworks are the networks the operator may dial members in (none: any). A cache with
	// a member elsewhere is not observed: its member 0 is labelled primary and it never
	// fails over (used for simulated nodes, whose pod addresses lead nowhere).
	MemberNetworks []*net.IPNet
	// Workers is the number of member passes run at once (they wait on the network).
	Workers int
	// Poll is how often each observed cache's members are read (default 1s).
	Poll time.Duration
	// ServiceSettle is how long a planned handover (a switchover) waits after the last change to
	// its members' Service endpoints: a pod's readiness, deletion, address or labels. kube-proxy
	// applies one change per minimum sync period (1 s by default, counted from the end of its
	// last sync; no bursts since Kubernetes 1.33). A handover right after such a change, as a
	// pod deletion makes, would hold every write until kube-proxy's next turn; while the handover
	// waits instead, writes go on. 0: no wait.
	ServiceSettle time.Duration
	// MayWrite, when set, is asked before every command that changes a member (the lease
	// fence: nil while this process leads with a fresh renewal).
	MayWrite func() error
	// ClientName names the connections to members (CLIENT LIST shows it): the operator and this
	// process's identity.
	ClientName string
	// ShutdownGrace is how long passes in flight may run on after shutdown begins (default 10s).
	ShutdownGrace time.Duration
}

// Controller runs member passes: a work loop of cache keys (namespace/name), fed by the members'
// pod events, by Enqueue and by the passes themselves (each schedules the next).
type Controller struct {
	opts      Options
	client    dynamic.Interface
	informers *informers.Set
	recorder  record.EventRecorder
	// reconciles is the cache controller's work loop: a cache whose View changed is added to it,
	// so that its status is written again.
	reconciles *workloop.Loop

	loop  *workloop.Loop
	pool  *member.Pool
	store memberStore
	// authFallback holds the addresses of members the current internal password was refused by,
	// and how they are reached instead (a fallback): with the previous internal password (an
	// internal rotation not yet given to the member), or as the clients' default user (a member
	// an older operator started), until applyAuth has given them the credentials.
	authFallback sync.Map
}

// New makes the member passes of the caches in set, and routes pod events to them. A cache whose
// pass found something new (its View changed) is added to reconciles, the cache controller's
// work loop; a cache that loop forgets is forgotten here too.
func New(client dynamic.Interface, set *informers.Set, recorder record.EventRecorder, reconciles *workloop.Loop, opts Options) (*Controller, error) {
	if opts.Workers < 1 {
		opts.Workers = 16
	}
	if opts.Poll <= 0 {
		opts.Poll = time.Second
	}
	if opts.ShutdownGrace <= 0 {
		opts.ShutdownGrace = 10 * time.Second
	}
	c := &Controller{
		opts: opts, client: client, informers: set, recorder: recorder, reconciles: reconciles,
		loop: workloop.New(workloop.Options{Name: "members", Workers: opts.Workers, Grace: opts.ShutdownGrace,
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 5*time.Second)}),
		pool: member.NewGuardedPool(opts.MayWrite, opts.ClientName),
		store: memberStore{views: map[string]api.MembersView{}, memory: map[string]*roleMemory{},
			labels: map[string]labelExpectation{}, deleted: map[string]types.UID{},
			endpoints: map[string]time.Time{}, samples: map[string]metrics.CacheSample{}},
	}
	metrics.RegisterMembers(c.store.eachSample)
	reconciles.OnForget(c.forget)
	if _, err := set.Pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) {
			c.endpointsChanged(obj)
			c.enqueuePod(obj)
		},
		UpdateFunc: func(old, cur interface{}) {
			if old.(metav1.Object).GetResourceVersion() != cur.(metav1.Object).GetResourceVersion() {
				if endpointsDiffer(old, cur) {
					c.endpointsChanged(cur)
				}
				c.enqueuePod(cur)
			}
		},
		DeleteFunc: func(obj interface{}) {
			c.endpointsChanged(obj)
			c.enqueuePod(obj)
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if p, ok := obj.(*informers.Pod); ok && p.IP != "" {
				c.pool.Forget(c.addr(p.IP))
			}
		},
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// Enqueue schedules a member pass of the cache key (namespace/name).
func (c *Controller) Enqueue(key string) { c.loop.Add(key) }

// forget drops what the passes keep of a deleted cache: its view, its memory of the roles, its
// metrics sample and its backoff.
func (c *Controller) forget(key string) {
	c.store.forget(key)
	c.loop.Forget(key)
}

// View returns what the last member pass of the cache key found (false: none has run since this
// process started).
func (c *Controller) View(key string) (api.MembersView, bool) { return c.store.view(key) }

// Run runs member passes until ctx ends; passes in flight then get Options.ShutdownGrace to
// finish their steps (a switchover in flight is finished or undone, not cut off after the old
// primary lost its label). It closes every connection to members before it returns.
func (c *Controller) Run(ctx context.Context) {
	c.loop.Run(ctx, c.syncMembers)
	c.pool.Close()
}

// endpointsDiffer reports whether a pod update changes what the EndpointSlice controller
// publishes for it: its readiness, deletion, address or the labels the Services select on.
func endpointsDiffer(old, cur interface{}) bool {
	o, ok1 := old.(*informers.Pod)
	n, ok2 := cur.(*informers.Pod)
	if !ok1 || !ok2 {
		return true
	}
	return o.Ready != n.Ready || (o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil) || o.IP != n.IP ||
		o.Labels[api.LabelRole] != n.Labels[api.LabelRole] || o.Labels[api.LabelReadWrite] != n.Labels[api.LabelReadWrite]
}

// endpointsChanged notes when the pod's cache's Service endpoints last changed.
func (c *Controller) endpointsChanged(obj interface{}) {
	if key, ok := informers.PodCache(obj); ok {
		c.store.endpointsChanged(key, time.Now())
	}
}

// enqueuePod schedules a member pass of the pod's cache.
func (c *Controller) enqueuePod(obj interface{}) {
	if key, ok := informers.PodCache(obj); ok {
		c.loop.Add(key)
	}
}
