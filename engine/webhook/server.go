// Package webhook serves the operator's webhooks — the CRD conversion webhook and the validating
// webhook — over HTTPS in every replica, with a certificate it manages itself: a CA and a serving
// certificate kept in a Secret in the operator's namespace, renewed before expiry, and injected
// (as the CA bundle) into the CRD's conversion config and the ValidatingWebhookConfiguration.
//
// It is not for cert-manager setups: it always manages its own certificates.
package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"example.com/cache-operator/engine/admission"
	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/conversion"
)

// Options configure the webhook server.
type Options struct {
	// Port is the HTTPS port.
	Port int
	// Endpoint is how the API server reaches this server.
	Endpoint Endpoint
	// Namespace and SecretName locate the certificate Secret.
	Namespace, SecretName string
	// ClusterDomain is the cluster's DNS domain, for the certificate's Service names.
	ClusterDomain string
	// CertLifetime is the serving certificate's lifetime (the CA's is ten times longer). Both
	// are renewed when a third of their lifetime is left.
	CertLifetime time.Duration
}

// Server serves /convert and /validate.
type Server struct {
	opts  Options
	kube  kubernetes.Interface
	dyn   dynamic.Interface
	certs *certs
	mux   *http.ServeMux
	ready chan struct{}
}

// New returns a webhook server.
func New(kube kubernetes.Interface, dyn dynamic.Interface, opts Options) (*Server, error) {
	if opts.ClusterDomain == "" {
		opts.ClusterDomain = api.DefaultClusterDomain
	}
	c := &certs{client: kube, namespace: opts.Namespace, name: opts.SecretName, lifetime: opts.CertLifetime}
	if opts.Endpoint.URL != "" {
		u, err := url.Parse(opts.Endpoint.URL)
		if err != nil || u.Scheme != "https" || u.Hostname() == "" {
			return nil, fmt.Errorf("webhook URL %q: must be https://HOST[:PORT]", opts.Endpoint.URL)
		}
		if ip := net.ParseIP(u.Hostname()); ip != nil {
			c.ips = []net.IP{ip}
		} else {
			c.dnsNames = []string{u.Hostname()}
		}
	} else {
		n, ns := opts.Endpoint.ServiceName, opts.Endpoint.ServiceNamespace
		if n == "" || ns == "" {
			return nil, errors.New("webhook: either a URL or a Service namespace/name is needed")
		}
		c.dnsNames = []string{n, n + "." + ns, n + "." + ns + ".svc", api.ServiceHost(n, ns, opts.ClusterDomain)}
	}
	mux := http.NewServeMux()
	mux.Handle("POST "+ConvertPath, conversion.Handler())
	mux.Handle("POST "+ValidatePath, admission.Handler(liveAnnotations(dyn)))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	return &Server{opts: opts, kube: kube, dyn: dyn, certs: c, mux: mux, ready: make(chan struct{})}, nil
}

// Ready is closed once the server has a certificate, is registered and listens.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// IsReady reports whether Ready is closed.
func (s *Server) IsReady() bool {
	select {
	case <-s.ready:
		return true
	default:
		return false
	}
}

// checkInterval is how often the certificates and registrations are re-checked.
func (s *Server) checkInterval() time.Duration {
	d := s.opts.CertLifetime / 10
	switch {
	case d < time.Second:
		return time.Second
	case d > 10*time.Minute:
		return 10 * time.Minute
	}
	return d
}

// sync ensures the certificates and the registrations once.
func (s *Server) sync(ctx context.Context) error {
	owner, err := OwnerReference(ctx, s.kube, s.opts.Endpoint.OwnerClusterRole)
	if err != nil {
		return err
	}
	renewed, err := s.certs.ensure(ctx, time.Now(), owner)
	if err != nil {
		return err
	}
	if renewed {
		klog.InfoS("Serving a new webhook certificate", "serial", s.certs.serial.Load().String(),
			"notAfter", s.certs.current.Load().Leaf.NotAfter)
	}
	return register(ctx, s.kube, s.dyn, s.opts.Endpoint, s.certs.caBundle())
}

// Sync ensures the certificates and registrations now. The leader calls it when it takes over:
// replicas that run outside the cluster register different addresses, and the conversion
// webhook must reach one that serves, so the leader's wins while it leads.
func (s *Server) Sync(ctx context.Context) error { return s.sync(ctx) }

// Run serves until ctx ends. It retries the first certificate and registration until they work.
func (s *Server) Run(ctx context.Context) error {
	for {
		err := s.sync(ctx)
		if err == nil {
			break
		}
		klog.ErrorS(err, "Webhook setup failed; retrying")
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
	host := ""
	if s.opts.Endpoint.URL != "" {
		u, _ := url.Parse(s.opts.Endpoint.URL)
		host = u.Hostname()
	}
	lc := net.ListenConfig{}
	ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort(host, fmt.Sprint(s.opts.Port)))
	if err != nil {
		return fmt.Errorf("webhook listener: %w", err)
	}
	srv := httpServer(s.mux, serverTimeouts)
	srv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: s.certs.getCertificate}
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(ln, "", "") }()
	klog.InfoS("Serving webhooks", "address", ln.Addr().String(), "endpoint", s.opts.Endpoint)
	close(s.ready)

	ticker := time.NewTicker(s.checkInterval())
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(shutdown)
			return nil
		case err := <-errc:
			return fmt.Errorf("webhook server: %w", err)
		case <-ticker.C:
			if err := s.sync(ctx); err != nil {
				klog.ErrorS(err, "Renewing webhook certificates or registrations failed; retrying at the next check")
			}
		}
	}
}

// serverTimeouts bound what one client can hold of the webhook server: a request is read within
// 10 s of its first byte (headers) and 30 s in all, its answer written within 30 s, and an idle
// connection kept 2 minutes. The API server calls with a timeout of at most 30 s, and a review
// is at most a few MiB: a client that trickles a request gets nothing but its own timeout.
var serverTimeouts = timeouts{header: 10 * time.Second, read: 30 * time.Second, write: 30 * time.Second, idle: 2 * time.Minute}

type timeouts struct{ header, read, write, idle time.Duration }

// httpServer is the webhook's HTTP server for h, bounded by t.
func httpServer(h http.Handler, t timeouts) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: t.header, ReadTimeout: t.read, WriteTimeout: t.write, IdleTimeout: t.idle,
		MaxHeaderBytes: 64 << 10}
}

// liveAnnotations reads a ManagedCache's annotations from the API server, in the storage version
// (no conversion, so no call back into this webhook).
func liveAnnotations(dyn dynamic.Interface) admission.AnnotationsLookup {
	return func(ctx context.Context, namespace, name string) (map[string]string, error) {
		mc, err := dyn.Resource(api.Resource).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return mc.GetAnnotations(), nil
	}
}
