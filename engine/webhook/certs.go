package webhook

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/pki"
)

// Keys of the webhook TLS Secret.
const (
	keyCABundle = "ca-bundle.crt" // the current CA and, during a CA rotation, the previous one
	keyCert     = "tls.crt"
	keyKey      = "tls.key"
)

var webhookKeys = pki.Keys{CACert: "ca.crt", CAKey: "ca.key", CABundle: keyCABundle, Cert: keyCert, Key: keyKey}

// certs keeps the webhook's CA and serving certificate in a Secret shared by every replica, and
// renews them before they expire. Whoever writes the Secret first wins; the others read it
// (create fails with AlreadyExists, update with a conflict), so two replicas starting together
// end up serving the same certificate.
type certs struct {
	client          kubernetes.Interface
	namespace, name string
	dnsNames        []string
	ips             []net.IP
	lifetime        time.Duration // of the serving certificate; the CA lives ten times as long
	current         atomic.Pointer[tls.Certificate]
	bundle          atomic.Pointer[[]byte]
	serial          atomic.Pointer[big.Int]
}

// getCertificate is tls.Config.GetCertificate: the newest serving certificate.
func (c *certs) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if cert := c.current.Load(); cert != nil {
		return cert, nil
	}
	return nil, errors.New("no serving certificate yet")
}

// caBundle returns the PEM CA bundle the API server must trust.
func (c *certs) caBundle() []byte {
	if b := c.bundle.Load(); b != nil {
		return *b
	}
	return nil
}

// ensure makes the Secret hold a valid CA and serving certificate for our names, renewing what
// is within a third of its lifetime of expiry, and loads them; owner (nil: none) is set as the
// Secret's owner. It reports whether the serving certificate it now serves is new.
func (c *certs) ensure(ctx context.Context, now time.Time, owner *metav1.OwnerReference) (bool, error) {
	secrets := c.client.CoreV1().Secrets(c.namespace)
	for attempt := 0; attempt < 5; attempt++ {
		secret, err := secrets.Get(ctx, c.name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			secret = &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: c.name, Namespace: c.namespace,
					Labels: map[string]string{api.LabelName: api.FieldManager, "app.kubernetes.io/component": "webhook"}},
				Type: corev1.SecretTypeTLS,
				Data: map[string][]byte{},
			}
			if owner != nil {
				secret.OwnerReferences = []metav1.OwnerReference{*owner}
			}
			if !c.renew(secret, now) {
				return false, fmt.Errorf("generating webhook certificates failed")
			}
			created, err := secrets.Create(ctx, secret, metav1.CreateOptions{FieldManager: api.FieldManager})
			if apierrors.IsAlreadyExists(err) {
				continue // another replica was first: use its certificates
			}
			if err != nil {
				return false, fmt.Errorf("Secret/%s/%s: %w", c.namespace, c.name, err)
			}
			klog.InfoS("Created webhook certificates", "secret", klog.KObj(created))
			return c.load(created)
		}
		if err != nil {
			return false, fmt.Errorf("Secret/%s/%s: %w", c.namespace, c.name, err)
		}
		updated := secret.DeepCopy()
		if updated.Data == nil {
			updated.Data = map[string][]byte{}
		}
		owned := owner == nil || slices.ContainsFunc(updated.OwnerReferences, func(r metav1.OwnerReference) bool { return r.UID == owner.UID })
		if !owned {
			updated.OwnerReferences = append(updated.OwnerReferences, *owner)
		}
		if c.renew(updated, now) || !owned {
			secret, err = secrets.Update(ctx, updated, metav1.UpdateOptions{FieldManager: api.FieldManager})
			if apierrors.IsConflict(err) {
				continue // another replica renewed first: read what it wrote
			}
			if err != nil {
				return false, fmt.Errorf("Secret/%s/%s: %w", c.namespace, c.name, err)
			}
			klog.InfoS("Renewed webhook certificates", "secret", klog.KObj(secret))
		}
		return c.load(secret)
	}
	return false, fmt.Errorf("Secret/%s/%s: too many concurrent changes", c.namespace, c.name)
}

// load parses the Secret and serves its certificate.
func (c *certs) load(secret *corev1.Secret) (bool, error) {
	cert, err := tls.X509KeyPair(secret.Data[keyCert], secret.Data[keyKey])
	if err != nil {
		return false, fmt.Errorf("Secret/%s/%s: %w", c.namespace, c.name, err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return false, err
	}
	cert.Leaf = leaf
	bundle := append([]byte(nil), secret.Data[keyCABundle]...)
	c.bundle.Store(&bundle)
	old := c.serial.Swap(leaf.SerialNumber)
	c.current.Store(&cert)
	return old == nil || old.Cmp(leaf.SerialNumber) != 0, nil
}

// renew updates the Secret's data in place where something is missing, unparsable, for other
// names, or within a third of its lifetime of expiry (pki.Renew; the CA lives ten times as long).
// It reports whether it changed anything.
func (c *certs) renew(secret *corev1.Secret, now time.Time) bool {
	changed, err := pki.Renew(secret.Data, webhookKeys, pki.Spec{
		CAName: "cache-operator-webhook-ca", Name: "cache-operator-webhook", DNSNames: c.dnsNames, IPs: c.ips,
		Lifetime: c.lifetime, CALifetime: 10 * c.lifetime,
	}, now)
	if err != nil {
		klog.ErrorS(err, "Generating the webhook certificates")
		return false
	}
	return changed
}
