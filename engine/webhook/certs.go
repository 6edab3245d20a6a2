package webhook

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"example.com/cache-operator/engine/api"
)

// Keys of the webhook TLS Secret.
const (
	keyCACert   = "ca.crt"        // the current CA
	keyCAKey    = "ca.key"        // its key
	keyCABundle = "ca-bundle.crt" // the current CA and, during a CA rotation, the previous one
	keyCert     = "tls.crt"
	keyKey      = "tls.key"
)

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
// is within a third of its lifetime of expiry, and loads them. It reports whether the serving
// certificate it now serves is new.
func (c *certs) ensure(ctx context.Context, now time.Time) (bool, error) {
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
		if c.renew(updated, now) {
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

// renew updates data in place where something is missing, unparsable, for other names, or
// within a third of its lifetime of expiry. It reports whether it changed anything.
func (c *certs) renew(secret *corev1.Secret, now time.Time) bool {
	d := secret.Data
	caCert, caKey, caOK := parsePair(d[keyCACert], d[keyCAKey])
	changedCA := false
	if !caOK || dueForRenewal(caCert, 10*c.lifetime, now) {
		newCA, newKey, err := newCertificate(nil, nil, "cache-operator-webhook-ca", nil, nil, 10*c.lifetime, now)
		if err != nil {
			klog.ErrorS(err, "Generating the webhook CA")
			return false
		}
		bundle := pemCert(newCA)
		if caOK && now.Before(caCert.NotAfter) {
			bundle = append(bundle, pemCert(caCert)...) // the old CA still verifies certificates it signed
		}
		d[keyCACert], d[keyCAKey], d[keyCABundle] = pemCert(newCA), pemKey(newKey), bundle
		caCert, caKey, changedCA = newCA, newKey, true
	}
	leaf, _, leafOK := parsePair(d[keyCert], d[keyKey])
	if changedCA || !leafOK || dueForRenewal(leaf, c.lifetime, now) || !covers(leaf, c.dnsNames, c.ips) ||
		leaf.CheckSignatureFrom(caCert) != nil {
		cert, key, err := newCertificate(caCert, caKey, "cache-operator-webhook", c.dnsNames, c.ips, c.lifetime, now)
		if err != nil {
			klog.ErrorS(err, "Generating the webhook serving certificate")
			return false
		}
		d[keyCert], d[keyKey] = pemCert(cert), pemKey(key)
		return true
	}
	return changedCA
}

// dueForRenewal: less than a third of the lifetime left, or issued for another lifetime (the
// flag changed).
func dueForRenewal(cert *x509.Certificate, lifetime time.Duration, now time.Time) bool {
	issuedFor := cert.NotAfter.Sub(cert.NotBefore) - time.Minute // NotBefore is backdated a minute
	return cert.NotAfter.Sub(now) < lifetime/3 || issuedFor > lifetime+time.Second || issuedFor < lifetime-time.Second
}

func covers(cert *x509.Certificate, dnsNames []string, ips []net.IP) bool {
	for _, n := range dnsNames {
		if cert.VerifyHostname(n) != nil {
			return false
		}
	}
	for _, ip := range ips {
		if cert.VerifyHostname(ip.String()) != nil {
			return false
		}
	}
	return true
}

// newCertificate makes a CA (parent nil) or a serving certificate signed by parent.
func newCertificate(parent *x509.Certificate, parentKey *ecdsa.PrivateKey, cn string, dnsNames []string, ips []net.IP,
	lifetime time.Duration, now time.Time) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(lifetime),
		DNSNames:     dnsNames,
		IPAddresses:  ips,
	}
	signer, signerKey := tmpl, key
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	} else {
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		signer, signerKey = parent, parentKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

func pemCert(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

func pemKey(k *ecdsa.PrivateKey) []byte {
	der, _ := x509.MarshalECPrivateKey(k)
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}

// parsePair parses a PEM certificate and its EC key.
func parsePair(certPEM, keyPEM []byte) (*x509.Certificate, *ecdsa.PrivateKey, bool) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, false
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, false
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil || !key.PublicKey.Equal(cert.PublicKey) {
		return nil, nil, false
	}
	return cert, key, true
}
