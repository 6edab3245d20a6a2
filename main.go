// Command cache-operator runs the ManagedCache operator (see package engine/app) against the
// cluster of --kubeconfig, or in-cluster configuration when that is empty.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"example.com/cache-operator/engine/cachetls"
	"example.com/cache-operator/engine/credentials"

	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/klog/v2"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/app"
	"example.com/cache-operator/engine/plugin"
	"example.com/cache-operator/engine/render"
	"example.com/cache-operator/engine/snapshot"
	"example.com/cache-operator/engine/webhook"
	"example.com/cache-operator/templates"
)

func main() {
	// Run as kubectl-managedcache or kubectl-mc (links to this binary): the kubectl plugin.
	plugin.ExitIfPlugin()
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "render":
			os.Exit(renderCommand(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
		case "backup": // a backup Job's container
			os.Exit(snapshot.BackupCommand(os.Stdout, os.Stderr))
		case "restore": // a restoring member's init container
			os.Exit(snapshot.RestoreCommand(os.Stdout, os.Stderr))
		}
	}
	var cfg app.Config
	hostname, _ := os.Hostname()
	flag.StringVar(&cfg.Kubeconfig, "kubeconfig", "", "path to a kubeconfig; empty: in-cluster configuration")
	templatesDir := flag.String("templates-dir", "", "render children from this folder instead of the embedded templates")
	redisRepo := flag.String("image-repository", "redis", "image repository of engine redis; the tag is the engine version")
	valkeyRepo := flag.String("valkey-image-repository", "valkey/valkey", "image repository of engine valkey")
	backupRateLimit := flag.Int("backup-rate-limit", render.DefaultBackupRateLimit, "the most MiB/s a backup Job reads from a member (0: no limit); the member's snapshot, the checksums and the upload follow its pace")
	operatorImage := flag.String("operator-image", envOr("OPERATOR_IMAGE", render.DefaultOperatorImage), "the operator's own image, which backup Jobs and restoring members run (cache-operator backup / restore)")
	clusterDomain := flag.String("cluster-domain", api.DefaultClusterDomain, "the cluster's DNS domain, in the names of Services and members")
	flag.IntVar(&cfg.Workers, "workers", 4, "caches reconciled in parallel")
	qps := flag.Float64("kube-api-qps", 200, "client-side limit of API requests per second")
	flag.IntVar(&cfg.Burst, "kube-api-burst", 400, "client-side burst of API requests")
	flag.DurationVar(&cfg.ShutdownGrace, "shutdown-grace", 10*time.Second, "on SIGTERM, how long reconciles in flight may finish before they are cancelled (keep it below the pod's termination grace period)")
	flag.DurationVar(&cfg.Resync, "resync", 10*time.Hour, "re-check every cache this often even without events (0: never)")
	flag.StringVar(&cfg.Namespace, "namespace", envOr("POD_NAMESPACE", "cache-operator-system"), "the operator's namespace (webhook certificate, lease)")
	flag.StringVar(&cfg.Identity, "identity", hostname+"_"+rand.String(6), "this replica's name in the lease and in its user agent")
	flag.IntVar(&cfg.Webhook.Port, "webhook-port", 9443, "HTTPS port of the conversion and validating webhooks (0: serve and register none; another operator of the cluster does)")
	flag.StringVar(&cfg.WatchNamespace, "watch-namespace", "", "reconcile only the caches and backups of this namespace (empty: every namespace)")
	hookURL := flag.String("webhook-url", "", "base URL the API server uses to reach the webhooks (default https://127.0.0.1:<webhook-port>); ignored with --webhook-service")
	hookService := flag.String("webhook-service", "", "NAMESPACE/NAME of the Service in front of the webhooks, when deployed in the cluster")
	hookOwner := flag.String("webhook-owner", "", "the operator's ClusterRole, which owns the ValidatingWebhookConfiguration it registers, so that uninstalling the operator removes it too (\"\": none)")
	flag.DurationVar(&cfg.Webhook.CertLifetime, "webhook-cert-lifetime", 365*24*time.Hour, "lifetime of the webhook serving certificate (the CA lives 10x longer); renewed with a third left")
	flag.StringVar(&cfg.MetricsAddr, "metrics-bind-address", ":8080", "address of /metrics (0: off)")
	flag.BoolVar(&cfg.Profiling, "profiling", false, "serve Go's profiles (/debug/pprof/) on the metrics address")
	flag.StringVar(&cfg.HealthAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz (0: off)")
	flag.BoolVar(&cfg.LeaderElect, "leader-elect", false, "elect a leader through a Lease; only the leader reconciles")
	flag.DurationVar(&cfg.LeaseDuration, "leader-elect-lease-duration", 15*time.Second, "how long a lease is valid without renewal")
	flag.DurationVar(&cfg.RenewDeadline, "leader-elect-renew-deadline", 10*time.Second, "how long the leader retries renewing before giving up")
	flag.DurationVar(&cfg.RetryPeriod, "leader-elect-retry-period", 2*time.Second, "how often candidates try to acquire or renew")
	memberNetworks := flag.String("member-networks", "", "comma-separated CIDRs the operator may dial members in; a cache with a member elsewhere is not observed: no roles read, no failover (empty: any)")
	flag.IntVar(&cfg.Members.Workers, "member-workers", 16, "member passes (reading servers, moving roles) run in parallel")
	flag.DurationVar(&cfg.Members.Poll, "member-poll", time.Second, "how often each cache's members are read (INFO replication and keyspace)")
	flag.DurationVar(&cfg.Members.ServiceSettle, "service-settle", 1500*time.Millisecond, "a planned handover waits until this long after the last change to its members' Service endpoints, so that kube-proxy (one sync per --iptables-min-sync-period, 1 s by default) applies the read-write Service's change at once; kube-proxy's period plus its sync time (0: no wait)")
	flag.DurationVar(&cfg.Controller.PasswordOverlap, "password-overlap", credentials.DefaultPasswordOverlap, "how long the previous clients' password is still accepted after a rotation")
	flag.DurationVar(&cfg.Controller.CertificateLifetime, "tls-certificate-lifetime", cachetls.DefaultLifetime, "lifetime of a TLS cache's members' certificates (renewed with a third left; the cache's CA lives ten times as long)")
	gcPercent := flag.Int("gc-percent", 25, "the Go garbage collector's target, as GOGC (which, set in the environment, replaces this default): lower trades CPU for memory")
	klog.InitFlags(nil)
	flag.Parse()
	gcSet := false
	flag.Visit(func(f *flag.Flag) { gcSet = gcSet || f.Name == "gc-percent" })
	if _, inEnv := os.LookupEnv("GOGC"); gcSet || !inEnv {
		debug.SetGCPercent(*gcPercent)
	}
	for _, cidr := range strings.Split(*memberNetworks, ",") {
		if cidr = strings.TrimSpace(cidr); cidr == "" {
			continue
		}
		_, n, err := net.ParseCIDR(cidr)
		if err != nil {
			fmt.Fprintf(os.Stderr, "--member-networks: %v\n", err)
			os.Exit(2)
		}
		cfg.Members.MemberNetworks = append(cfg.Members.MemberNetworks, n)
	}

	cfg.QPS = float32(*qps)
	cfg.Controller.Render.Images = render.ImageRepositories{"redis": *redisRepo, "valkey": *valkeyRepo}
	cfg.Controller.Render.ClusterDomain, cfg.Webhook.ClusterDomain = *clusterDomain, *clusterDomain
	cfg.Controller.Render.OperatorImage = *operatorImage
	if *backupRateLimit < 0 {
		fmt.Fprintf(os.Stderr, "--backup-rate-limit: %d MiB/s; want 0 (no limit) or more\n", *backupRateLimit)
		os.Exit(2)
	}
	cfg.Controller.Render.BackupRateLimit = *backupRateLimit
	cfg.Templates = fs.FS(templates.FS)
	if *templatesDir != "" {
		cfg.Templates = os.DirFS(*templatesDir)
	}
	cfg.Webhook.Namespace, cfg.Webhook.SecretName = cfg.Namespace, "cache-operator-webhook-tls"
	cfg.Webhook.Endpoint = webhook.Endpoint{URL: *hookURL}
	if *hookService != "" {
		cfg.Webhook.Endpoint = webhook.Endpoint{}
		cfg.Webhook.Endpoint.ServiceNamespace, cfg.Webhook.Endpoint.ServiceName, _ = strings.Cut(*hookService, "/")
	} else if *hookURL == "" {
		cfg.Webhook.Endpoint.URL = fmt.Sprintf("https://127.0.0.1:%d", cfg.Webhook.Port)
	}
	cfg.Webhook.Endpoint.OwnerClusterRole = *hookOwner

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	klog.InfoS("Starting cache-operator", "identity", cfg.Identity, "leaderElect", cfg.LeaderElect)
	if err := app.Run(ctx, cfg); err != nil {
		klog.ErrorS(err, "cache-operator failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.InfoS("Stopped")
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// renderCommand is `cache-operator render -f FILE [--templates-dir DIR]`: it prints the children
// the ManagedCaches in FILE ("-": standard input) would get, as `helm template` does, without a
// cluster. It returns the exit code.
func renderCommand(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	set := flag.NewFlagSet("render", flag.ContinueOnError)
	set.SetOutput(stderr)
	set.Usage = func() {
		fmt.Fprintln(stderr, "usage: cache-operator render -f FILE [flags]\n\nPrints the children the ManagedCaches in FILE (v1 or v2; - for standard input) would get.\n\nflags:")
		set.PrintDefaults()
	}
	file := set.String("f", "", "the ManagedCache(s), YAML (required; - reads standard input)")
	templatesDir := set.String("templates-dir", "", "render from this folder instead of the embedded templates")
	repos := render.DefaultImageRepositories()
	redisRepo := set.String("image-repository", repos["redis"], "image repository of engine redis; the tag is the engine version")
	valkeyRepo := set.String("valkey-image-repository", repos["valkey"], "image repository of engine valkey")
	clusterDomain := set.String("cluster-domain", api.DefaultClusterDomain, "the cluster's DNS domain")
	if err := set.Parse(args); err != nil {
		return 2
	}
	if *file == "" || set.NArg() > 0 {
		set.Usage()
		return 2
	}
	var tfs fs.FS = templates.FS
	if *templatesDir != "" {
		tfs = os.DirFS(*templatesDir)
	}
	renderer, err := render.NewRenderer(tfs)
	if err != nil {
		fmt.Fprintf(stderr, "render: templates: %v\n", err)
		return 1
	}
	in := stdin
	if *file != "-" {
		f, err := os.Open(*file)
		if err != nil {
			fmt.Fprintf(stderr, "render: %v\n", err)
			return 1
		}
		defer f.Close()
		in = f
	}
	cfg := render.Config{Images: render.ImageRepositories{"redis": *redisRepo, "valkey": *valkeyRepo}, ClusterDomain: *clusterDomain}
	if err := render.Preview(in, stdout, renderer, cfg, render.PreviewPassword); err != nil {
		fmt.Fprintf(stderr, "render: %v\n", err)
		return 1
	}
	return 0
}
