// Package cachetls is a TLS cache's certificates: what its Secret <name>-tls holds (a CA of the
// cache's own and the members' certificate, engine/pki), when they are renewed (a third of their
// lifetime left, new names, or the rotate-certificates annotation), and how the operator verifies
// a member it dials (the chain to the cache's CA bundle; members are dialled by pod IP).
//
// A CA per cache, not per namespace: a client that trusts one cache's CA trusts no other cache's
// members, a cache's CA rotates alone, and it goes with the cache (owner reference).
//
// It is not for writing the Secret (the reconcile renders it from templates/tls.yaml) nor for
// giving members their files (the kubelet updates the mounted Secret; package dataplane makes the
// server load them).
package cachetls

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/pki"
	"example.com/cache-operator/engine/render"
)

// DefaultLifetime is the members' certificates' lifetime when no flag says otherwise; the CA's is
// ten times as long.
const DefaultLifetime = 90 * 24 * time.Hour

// Keys are the keys of the TLS Secret. ca.crt is the bundle (the current CA and, during a CA
// rotation, the previous one): what members and clients trust.
var Keys = pki.Keys{CACert: "ca-current.crt", CAKey: "ca.key", CABundle: api.CAKey, Cert: "tls.crt", Key: "tls.key"}

// Decision is what a reconcile makes of a TLS cache's Secret.
type Decision struct {
	// Data is what the Secret is to hold, RotatedFor included.
	Data render.TLSData
	// Renewed: this reconcile issued a new certificate (or CA).
	Renewed bool
	// NotAfter and Serial are the members' certificate's; RenewAt is when it is next due.
	NotAfter, RenewAt time.Time
	Serial            string
	// SecretVersion is the resourceVersion of the Secret decided from ("": none yet); the write
	// carries it.
	SecretVersion string
}

// Names are the DNS names a cache's certificate covers: its Services (-rw, -ro, headless) in
// every short form, every member's pod name and its headless name, and localhost for the probes.
func Names(name, ns, domain string) []string {
	var out []string
	for _, svc := range []string{api.ReadWriteService(name), api.ReadOnlyService(name), name} {
		out = append(out, svc, svc+"."+ns, svc+"."+ns+".svc", svc+"."+ns+".svc."+domain)
	}
	for i := 0; i < 9; i++ {
		out = append(out, fmt.Sprintf("%s-%d", name, i))
	}
	return append(out, "*."+name+"."+ns+".svc", "*."+name+"."+ns+".svc."+domain, "localhost")
}

// Decide works out a TLS cache's Secret from the live one (nil: none yet): what is due is issued
// anew, the rest kept as it is, so a Secret that is right gives back exactly what it holds.
func Decide(secret *unstructured.Unstructured, name, ns, domain, rotateToken string, lifetime time.Duration, now time.Time) (Decision, error) {
	data := map[string][]byte{}
	var d Decision
	if secret != nil {
		raw, _, _ := unstructured.NestedStringMap(secret.Object, "data")
		for k, v := range raw {
			if b, err := base64.StdEncoding.DecodeString(v); err == nil {
				data[k] = b
			}
		}
		d.Data.RotatedFor = secret.GetAnnotations()[api.CertificatesRotatedForAnnotation]
		d.SecretVersion = secret.GetResourceVersion()
	}
	spec := pki.Spec{CAName: name + "." + ns + " cache CA", Name: name + "." + ns, DNSNames: Names(name, ns, domain),
		IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Lifetime: lifetime, CALifetime: 10 * lifetime, Client: true}
	if rotateToken != "" && rotateToken != d.Data.RotatedFor {
		spec.RenewCert, d.Data.RotatedFor = true, rotateToken
	}
	renewed, err := pki.Renew(data, Keys, spec, now)
	if err != nil {
		return Decision{}, err
	}
	d.Renewed = renewed
	d.Data.CACurrent, d.Data.CAKey, d.Data.Bundle = string(data[Keys.CACert]), string(data[Keys.CAKey]), string(data[Keys.CABundle])
	d.Data.Cert, d.Data.Key = string(data[Keys.Cert]), string(data[Keys.Key])
	leaf := pki.Leaf(data[Keys.Cert])
	if leaf == nil {
		return Decision{}, errors.New("the issued certificate does not parse")
	}
	d.NotAfter, d.Serial = leaf.NotAfter, leaf.SerialNumber.Text(16)
	d.RenewAt = leaf.NotAfter.Add(-lifetime / 3)
	return d, nil
}

// Material is what the operator needs to dial a TLS cache's members: its CA bundle and the serial
// of the certificate the members are to serve.
type Material struct {
	Pool   *x509.CertPool
	Serial string
	// Key digests them, so that a pooled client is replaced when they change.
	Key string
	// Client is ClientConfig(nil), made once.
	Client *tls.Config
}

// MaterialOf reads a cache's TLS Secret (false: none, or no CA in it).
func MaterialOf(secret *unstructured.Unstructured) (Material, bool) {
	if secret == nil {
		return Material{}, false
	}
	value := func(k string) []byte {
		s, _, _ := unstructured.NestedString(secret.Object, "data", k)
		b, _ := base64.StdEncoding.DecodeString(s)
		return b
	}
	bundle := value(Keys.CABundle)
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle) {
		return Material{}, false
	}
	m := Material{Pool: pool}
	if leaf := pki.Leaf(value(Keys.Cert)); leaf != nil {
		m.Serial = leaf.SerialNumber.Text(16)
	}
	h := fnv.New64a()
	_, _ = h.Write(bundle)
	m.Key = strconv.FormatUint(h.Sum64(), 16)
	m.Client = m.ClientConfig(nil)
	return m, true
}

// ClientConfig is the TLS configuration of a connection to a member: the member's certificate must
// chain to the cache's CA bundle (members are dialled by pod IP, which no certificate names, so the
// chain is what is checked). seen, when not nil, is given the serial the member served.
func (m Material) ClientConfig(seen func(serial string)) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: true, // replaced by VerifyConnection: the chain, not the name
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the member sent no certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			if _, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: m.Pool, Intermediates: inter}); err != nil {
				return fmt.Errorf("the member's certificate is not the cache's: %w", err)
			}
			if seen != nil {
				seen(cs.PeerCertificates[0].SerialNumber.Text(16))
			}
			return nil
		},
	}
}
