// Command cache-operator runs the ManagedCache controller (package engine) against the cluster of
// --kubeconfig, or in-cluster config when that is empty.
package main

import (
	"context"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"example.com/cache-operator/engine"
	"example.com/cache-operator/engine/webhook"
	"example.com/cache-operator/templates"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
)

const fieldManager = "cache-operator"

func main() {
	var (
		kubeconfig   = flag.String("kubeconfig", "", "path to a kubeconfig; empty: in-cluster configuration")
		templatesDir = flag.String("templates-dir", "", "render children from this folder instead of the embedded templates")
		imageRepo    = flag.String("image-repository", "redis", "image repository of engine redis; the tag is the engine version")
		valkeyRepo   = flag.String("valkey-image-repository", "valkey/valkey", "image repository of engine valkey")
		workers      = flag.Int("workers", 4, "caches reconciled in parallel")
		qps          = flag.Float64("kube-api-qps", 50, "client-side limit of API requests per second")
		burst        = flag.Int("kube-api-burst", 100, "client-side burst of API requests")
		resync       = flag.Duration("resync", 10*time.Hour, "re-check every cache this often even without events (0: never)")
		namespace    = flag.String("namespace", envOr("POD_NAMESPACE", "cache-operator-system"), "the operator's namespace (webhook certificate Secret)")
		hookPort     = flag.Int("webhook-port", 9443, "HTTPS port of the conversion and validating webhooks")
		hookURL      = flag.String("webhook-url", "", "base URL the API server uses to reach the webhooks (default https://127.0.0.1:<webhook-port>); ignored with --webhook-service")
		hookService  = flag.String("webhook-service", "", "NAMESPACE/NAME of the Service in front of the webhooks, when deployed in the cluster")
		certLifetime = flag.Duration("webhook-cert-lifetime", 365*24*time.Hour, "lifetime of the webhook serving certificate (the CA lives 10x longer); renewed with a third left")
	)
	klog.InitFlags(nil)
	flag.Parse()

	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		klog.Fatalf("loading client configuration: %v", err)
	}
	cfg.QPS, cfg.Burst = float32(*qps), *burst
	cfg.UserAgent = fieldManager
	var tfs fs.FS = templates.FS
	if *templatesDir != "" {
		tfs = os.DirFS(*templatesDir)
	}
	renderer, err := engine.NewRenderer(tfs)
	if err != nil {
		klog.Fatalf("templates: %v", err)
	}
	dyn := dynamic.NewForConfigOrDie(cfg)
	kube := kubernetes.NewForConfigOrDie(cfg)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(kube.Discovery()))

	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: fieldManager})

	ctrl, err := engine.New(dyn, mapper, renderer, recorder, engine.Options{
		Images:  engine.ImageRepositories{"redis": *imageRepo, "valkey": *valkeyRepo},
		Workers: *workers, Resync: *resync, FieldManager: fieldManager,
	})
	if err != nil {
		klog.Fatalf("building controller: %v", err)
	}
	endpoint := webhook.Endpoint{URL: *hookURL}
	if *hookService != "" {
		endpoint.URL = ""
		endpoint.ServiceNamespace, endpoint.ServiceName, _ = strings.Cut(*hookService, "/")
	} else if endpoint.URL == "" {
		endpoint.URL = fmt.Sprintf("https://127.0.0.1:%d", *hookPort)
	}
	hooks, err := webhook.New(kube, dyn, ctrl.Annotations, webhook.Options{
		Port: *hookPort, Endpoint: endpoint, Namespace: *namespace, SecretName: "cache-operator-webhook-tls", CertLifetime: *certLifetime,
	})
	if err != nil {
		klog.Fatalf("webhooks: %v", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	klog.InfoS("Starting cache-operator", "templates", renderer.TemplateNames(), "images", *imageRepo+","+*valkeyRepo)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := hooks.Run(ctx); err != nil {
			klog.ErrorS(err, "Webhook server stopped")
			stop()
		}
	}()
	// The controller reads v2, which the conversion webhook serves: start it once that is up.
	select {
	case <-hooks.Ready():
	case <-ctx.Done():
	}
	if err := ctrl.Run(ctx); err != nil {
		klog.Fatalf("controller: %v", err)
	}
	wg.Wait()
	klog.InfoS("Stopped")
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
