// Package app wires the operator's parts into one process: clients, the controller, the webhook
// server, the metrics and health endpoints, and leader election. main.go only parses flags into
// a Config and calls Run.
//
// Every replica runs the informers, the webhooks and the endpoints; only the leader reconciles.
// A replica that loses the lease exits at once, so there is never a second writer. On SIGTERM the
// leader stops taking work, finishes the reconciles in flight (bounded), then releases the lease
// so another replica takes over without waiting for it to expire.
package app

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/pprof"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/backups"
	"example.com/cache-operator/engine/controller"
	"example.com/cache-operator/engine/dataplane"
	"example.com/cache-operator/engine/informers"
	"example.com/cache-operator/engine/internal/workloop"
	"example.com/cache-operator/engine/metrics"
	"example.com/cache-operator/engine/render"
	"example.com/cache-operator/engine/webhook"
)

// LeaseName is the coordination.k8s.io Lease the replicas elect a leader with.
const LeaseName = "cache-operator"

// Config is everything the process needs; main.go fills it from flags.
type Config struct {
	// Kubeconfig is the kubeconfig path ("": in-cluster configuration).
	Kubeconfig string
	// RESTConfig, when set, is used instead of Kubeconfig (tests wrap its transport).
	RESTConfig *rest.Config
	// OnStarted, when set, is called with the controller once its caches have synced.
	OnStarted func(*controller.Controller)
	// Templates are the children's templates.
	Templates fs.FS
	// Controller tunes the reconciles; Members the member passes (package app sets their lease
	// fence, connection name and grace).
	Controller controller.Options
	Members    dataplane.Options
	// Workers is the number of caches reconciled at once (default 1).
	Workers int
	// ShutdownGrace is how long the reconciles, member passes and backups in flight may run on
	// after shutdown starts before they are cancelled (default 10s): well inside the pod's
	// termination grace period, so that the lease is released before the kubelet kills the
	// process.
	ShutdownGrace time.Duration
	// Resync is how often every cache is re-checked even without events (0: never).
	Resync time.Duration
	// QPS and Burst are the client-side rate limit.
	QPS   float32
	Burst int
	// Namespace is the operator's namespace (Lease, webhook Secret); Identity names this replica.
	Namespace, Identity string
	// WatchNamespace, when set, is the one namespace whose caches and backups this process
	// reconciles ("": every namespace).
	WatchNamespace string
	// Webhook configures the webhook server; a Port of 0 serves and registers no webhooks (another
	// operator of the cluster does).
	Webhook webhook.Options
	// MetricsAddr and HealthAddr are the listen addresses of /metrics and of the probes ("": off).
	MetricsAddr, HealthAddr string
	// Profiling serves Go's profiles (/debug/pprof/) beside /metrics.
	Profiling bool
	// LeaderElect turns on leader election with these timings.
	LeaderElect                               bool
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// Run runs the operator until ctx ends (SIGTERM) or it loses the lease. A server that fails
// (webhooks, metrics, probes) stops the operator, and Run returns that server's error, so the
// process exits non-zero.
func Run(ctx context.Context, cfg Config) (err error) {
	rc := cfg.RESTConfig
	if rc == nil {
		var err error
		if rc, err = clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig); err != nil {
			return fmt.Errorf("loading client configuration: %w", err)
		}
	}
	rc = rest.CopyConfig(rc)
	rc.QPS, rc.Burst = cfg.QPS, cfg.Burst
	rc.UserAgent = api.FieldManager + "/" + cfg.Identity
	renderer, err := render.NewRenderer(cfg.Templates)
	if err != nil {
		return fmt.Errorf("templates: %w", err)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(kube.Discovery()))
	// The controller writes (children, status, Events) through clients fenced by the lease; the
	// webhooks and the election itself use the plain ones.
	fenced := &fence{leaseDuration: cfg.LeaseDuration, renewDeadline: cfg.RenewDeadline}
	ctrlDyn, ctrlKube := dyn, kube
	if cfg.LeaderElect {
		// The same fence guards the Redis commands that change members (package member).
		cfg.Members.MayWrite = fenced.mayWrite
		fc := rest.CopyConfig(rc)
		fc.Wrap(fenced.wrap)
		if ctrlDyn, err = dynamic.NewForConfig(fc); err != nil {
			return err
		}
		if ctrlKube, err = kubernetes.NewForConfig(fc); err != nil {
			return err
		}
	}
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: ctrlKube.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: api.FieldManager})

	// The informers of built-in kinds read protobuf, which decodes at a fraction of the CPU of
	// JSON; they only list and watch, so they need no fence.
	pc := rest.CopyConfig(rc)
	pc.ContentType = runtime.ContentTypeProtobuf
	pc.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	protoKube, err := kubernetes.NewForConfig(pc)
	if err != nil {
		return err
	}
	if cfg.Controller.Namespace == "" {
		cfg.Controller.Namespace = cfg.Namespace
	}
	if cfg.ShutdownGrace <= 0 {
		cfg.ShutdownGrace = 10 * time.Second
	}
	// The three work loops and what they share are built here, each once, in the order of their
	// dependencies: the informers, the reconciles' loop (which the member passes and the backups
	// add caches to), the member passes, the backups, then the controller that reads them.
	set, err := informers.New(ctrlDyn, mapper, renderer, informers.Options{Resync: cfg.Resync, Kube: protoKube, Namespace: cfg.WatchNamespace})
	if err != nil {
		return fmt.Errorf("informers: %w", err)
	}
	reconciles := workloop.New(workloop.Options{Name: "managedcache", Workers: cfg.Workers, Grace: cfg.ShutdownGrace})
	cfg.Members.ClientName = strings.ReplaceAll(api.FieldManager+"/"+cfg.Identity, " ", "_")
	cfg.Members.ShutdownGrace = cfg.ShutdownGrace
	members, err := dataplane.New(ctrlDyn, set, recorder, reconciles, cfg.Members)
	if err != nil {
		return fmt.Errorf("building the member passes: %w", err)
	}
	bk, err := backups.New(backups.Deps{Client: ctrlDyn, Kube: ctrlKube, Renderer: renderer, Recorder: recorder, Caches: set, Reconciles: reconciles},
		backups.Options{Render: cfg.Controller.Render, ShutdownGrace: cfg.ShutdownGrace, Namespace: cfg.WatchNamespace})
	if err != nil {
		return fmt.Errorf("building the backups controller: %w", err)
	}
	ctrl, err := controller.New(controller.Deps{Client: ctrlDyn, Mapper: mapper, Renderer: renderer, Recorder: recorder,
		Informers: set, Queue: reconciles, Members: members, Backups: bk}, cfg.Controller)
	if err != nil {
		return fmt.Errorf("building controller: %w", err)
	}
	var hooks *webhook.Server
	if cfg.Webhook.Port != 0 {
		if hooks, err = webhook.New(kube, dyn, cfg.Webhook); err != nil {
			return fmt.Errorf("webhooks: %w", err)
		}
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The first server failure ends the run and is what Run returns.
	var failOnce sync.Once
	var failed error
	fail := func(err error) {
		failOnce.Do(func() {
			failed = err
			cancel()
		})
	}
	defer func() {
		cancel()
		wg.Wait()
		if failed != nil {
			err = failed
		}
	}()
	serve(ctx, &wg, fail, "metrics", cfg.MetricsAddr, metricsMux(cfg.Profiling))
	// Ready means the webhooks serve: that is what the Service in front of them needs, and all it
	// needs. It must not wait for the informers: while caches are still stored in an older
	// version, listing them needs the conversion webhook, which the API server reaches through
	// that Service, so a readiness that waited for the lists would never come.
	// Without webhooks of its own (--webhook-port=0) the process is ready at once.
	serve(ctx, &wg, fail, "health", cfg.HealthAddr, healthMux(func() error {
		if hooks != nil && !hooks.IsReady() {
			return errors.New("webhooks not serving yet")
		}
		return nil
	}))
	if hooks != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := hooks.Run(ctx); err != nil && ctx.Err() == nil {
				klog.ErrorS(err, "Webhook server stopped; shutting down")
				fail(fmt.Errorf("webhook server: %w", err))
			}
		}()
		// The informers read v2. Caches still stored as v1 (before the storage migration) need
		// the conversion webhook to be listed: start them once it serves.
		select {
		case <-hooks.Ready():
		case <-ctx.Done():
			return nil
		}
	}
	if err := ctrl.Start(ctx); err != nil {
		return err
	}
	if err := bk.Start(ctx); err != nil {
		return err
	}
	klog.InfoS("Informer caches synced", "identity", cfg.Identity)
	if cfg.OnStarted != nil {
		cfg.OnStarted(ctrl)
	}

	// The three loops run side by side and stop together; each gives its work in flight the
	// shutdown grace.
	work := func(ctx context.Context) {
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); bk.RunWorkers(ctx) }()
		go func() { defer wg.Done(); members.Run(ctx) }()
		ctrl.RunWorkers(ctx)
		wg.Wait()
	}
	if !cfg.LeaderElect {
		work(ctx)
		return nil
	}
	if err := ownLease(ctx, kube, cfg.Namespace, cfg.Webhook.Endpoint.OwnerClusterRole); err != nil {
		klog.ErrorS(err, "Could not make the operator's ClusterRole the leader Lease's owner; uninstalling the operator will leave the Lease")
	}
	// The elector has a client of its own, whose transport tells the fence when each renewal
	// that succeeded was sent.
	ec := rest.CopyConfig(rc)
	ec.Wrap(fenced.leaseTransport)
	electKube, err := kubernetes.NewForConfig(ec)
	if err != nil {
		return err
	}
	return runElected(ctx, cfg, electKube, work, hooks, fenced)
}

// ownLease makes the ClusterRole named owner ("": none) the owner of the leader Lease, creating
// the Lease (empty) when it does not exist yet, so that uninstalling the operator deletes it.
func ownLease(ctx context.Context, kube kubernetes.Interface, ns, owner string) error {
	ref, err := webhook.OwnerReference(ctx, kube, owner)
	if err != nil || ref == nil {
		return err
	}
	leases := kube.CoordinationV1().Leases(ns)
	lease, err := leases.Get(ctx, LeaseName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: LeaseName, Namespace: ns, OwnerReferences: []metav1.OwnerReference{*ref}}}
		if _, err := leases.Create(ctx, lease, metav1.CreateOptions{FieldManager: api.FieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		return nil
	}
	if err != nil {
		return err
	}
	for _, r := range lease.OwnerReferences {
		if r.UID == ref.UID {
			return nil
		}
	}
	lease.OwnerReferences = append(lease.OwnerReferences, *ref)
	_, err = leases.Update(ctx, lease, metav1.UpdateOptions{FieldManager: api.FieldManager})
	return err
}

// runElected reconciles while this replica holds the lease.
func runElected(ctx context.Context, cfg Config, kube kubernetes.Interface, work func(context.Context), hooks *webhook.Server, fenced *fence) error {
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: cfg.Namespace, Name: LeaseName},
		Client:     kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: cfg.Identity},
	}
	// The elector's context ends only after the workers have drained, so the lease is released
	// (ReleaseOnCancel) once nothing of ours writes any more.
	electCtx, stopElecting := context.WithCancel(context.Background())
	defer stopElecting()
	var leading atomic.Bool
	workersDone := make(chan struct{})
	go func() {
		<-ctx.Done()
		if leading.Load() {
			<-workersDone
		}
		stopElecting()
	}()
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, Name: LeaseName, ReleaseOnCancel: true,
		LeaseDuration: cfg.LeaseDuration, RenewDeadline: cfg.RenewDeadline, RetryPeriod: cfg.RetryPeriod,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leaderCtx context.Context) {
				leading.Store(true)
				klog.InfoS("Became the leader; reconciling", "identity", cfg.Identity, "lease", klog.KRef(cfg.Namespace, LeaseName))
				if hooks != nil {
					if err := hooks.Sync(leaderCtx); err != nil {
						klog.ErrorS(err, "Registering this replica's webhooks on taking the lead failed; the periodic check retries")
					}
				}
				workCtx, stop := context.WithCancel(ctx)
				defer stop()
				go func() {
					select {
					case <-leaderCtx.Done():
						stop()
					case <-workCtx.Done():
					}
				}()
				work(workCtx)
				close(workersDone)
			},
			OnStoppedLeading: func() {
				if ctx.Err() != nil {
					if leading.Load() {
						klog.InfoS("Released the lease", "identity", cfg.Identity)
					}
					return
				}
				if leading.Load() {
					// Lost the lease without being asked to stop: exit now, before another
					// replica's writes could meet ours.
					klog.ErrorS(nil, "Lost the lease; exiting", "identity", cfg.Identity)
					klog.Flush()
					os.Exit(1)
				}
			},
			OnNewLeader: func(identity string) {
				if identity != cfg.Identity {
					klog.InfoS("Following the leader", "leader", identity)
				}
			},
		},
	})
	if err != nil {
		return err
	}
	fenced.elector.Store(le)
	le.Run(electCtx)
	return nil
}

// serve runs an HTTP server on addr until ctx ends ("" or "0": disabled); a failure to serve is
// passed to fail.
func serve(ctx context.Context, wg *sync.WaitGroup, fail func(error), name, addr string, h http.Handler) {
	if addr == "" || addr == "0" {
		return
	}
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	wg.Add(2)
	go func() {
		defer wg.Done()
		klog.InfoS("Serving", "endpoint", name, "address", addr)
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.ErrorS(err, "Server failed; shutting down", "endpoint", name)
			fail(fmt.Errorf("%s server: %w", name, err))
		}
	}()
	go func() {
		defer wg.Done()
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
}

// metricsMux serves /metrics and, with profiling, Go's profiles under /debug/pprof/ (heap, CPU,
// goroutines: what `go tool pprof http://ADDR/debug/pprof/heap` reads).
func metricsMux(profiling bool) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(metrics.Registry, promhttp.HandlerOpts{}))
	if profiling {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// healthMux serves /healthz (the process answers) and /readyz (ready() returns nil).
func healthMux(ready func() error) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	return mux
}
