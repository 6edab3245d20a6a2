// Package pki issues and renews the operator's certificates: a CA and a certificate it signs,
// kept as PEM in a Secret's data (the webhook's, and each TLS cache's). The certificate is renewed
// when a third of its lifetime is left, when it no longer covers the names asked for, or when
// asked; the CA likewise, keeping the previous CA in the bundle until it expires, so that clients
// that trust the bundle keep verifying certificates the old CA signed.
//
// It is not for reading or writing Secrets: its callers do (package webhook for its own Secret,
// package controller for the caches'). It never logs a key.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"
)

// Keys are the data keys a Secret holds its certificates under.
type Keys struct {
	// CACert and CAKey: the current CA; CABundle: it and, during a CA rotation, the previous one.
	CACert, CAKey, CABundle string
	// Cert and Key: the certificate the CA signed.
	Cert, Key string
}

// Spec is what the certificates are to be.
type Spec struct {
	// CAName and Name are the common names of the CA and of the certificate.
	CAName, Name string
	// DNSNames and IPs are what the certificate must cover.
	DNSNames []string
	IPs      []net.IP
	// Lifetime is the certificate's; CALifetime the CA's.
	Lifetime, CALifetime time.Duration
	// Client: the certificate may also authenticate a client (a replica to its primary).
	Client bool
	// RenewCert and RenewCA ask for a new certificate (and a new CA) now, whatever is left.
	RenewCert, RenewCA bool
}

// Renew brings data (a Secret's, changed in place) to spec: whatever is missing, unparsable, for
// other names, within a third of its lifetime of expiry, issued for another lifetime, or asked to
// be renewed is made anew. It reports whether it changed anything.
func Renew(data map[string][]byte, k Keys, s Spec, now time.Time) (bool, error) {
	caCert, caKey, caOK := ParsePair(data[k.CACert], data[k.CAKey])
	changedCA := false
	if !caOK || s.RenewCA || DueForRenewal(caCert, s.CALifetime, now) {
		newCA, newKey, err := NewCertificate(nil, nil, s.CAName, nil, nil, s.CALifetime, false, now)
		if err != nil {
			return false, fmt.Errorf("generating the CA %s: %w", s.CAName, err)
		}
		bundle := PEMCert(newCA)
		if caOK && now.Before(caCert.NotAfter) {
			bundle = append(bundle, PEMCert(caCert)...) // the old CA still verifies what it signed
		}
		data[k.CACert], data[k.CAKey], data[k.CABundle] = PEMCert(newCA), PEMKey(newKey), bundle
		caCert, caKey, changedCA = newCA, newKey, true
	} else if old := Bundle(data[k.CABundle]); len(old) > 1 {
		// The previous CA leaves the bundle once it has expired (nothing it signed verifies).
		kept := PEMCert(caCert)
		for _, c := range old {
			if !c.Equal(caCert) && now.Before(c.NotAfter) {
				kept = append(kept, PEMCert(c)...)
			}
		}
		if string(kept) != string(data[k.CABundle]) {
			data[k.CABundle], changedCA = kept, true
		}
	} else if len(old) == 0 {
		data[k.CABundle], changedCA = PEMCert(caCert), true
	}
	leaf, _, leafOK := ParsePair(data[k.Cert], data[k.Key])
	if !leafOK || s.RenewCert || DueForRenewal(leaf, s.Lifetime, now) || !Covers(leaf, s.DNSNames, s.IPs) ||
		leaf.CheckSignatureFrom(caCert) != nil {
		cert, key, err := NewCertificate(caCert, caKey, s.Name, s.DNSNames, s.IPs, s.Lifetime, s.Client, now)
		if err != nil {
			return false, fmt.Errorf("generating the certificate %s: %w", s.Name, err)
		}
		data[k.Cert], data[k.Key] = PEMCert(cert), PEMKey(key)
		return true, nil
	}
	return changedCA, nil
}

// DueForRenewal: less than a third of the lifetime left, or issued for another lifetime (the
// setting changed).
func DueForRenewal(cert *x509.Certificate, lifetime time.Duration, now time.Time) bool {
	issuedFor := cert.NotAfter.Sub(cert.NotBefore) - time.Minute // NotBefore is backdated a minute
	return cert.NotAfter.Sub(now) < lifetime/3 || issuedFor > lifetime+time.Second || issuedFor < lifetime-time.Second
}

// Covers reports whether cert is valid for every name and address.
func Covers(cert *x509.Certificate, dnsNames []string, ips []net.IP) bool {
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

// NewCertificate makes a CA (parent nil) or a certificate signed by parent, for a server (and a
// client too when client is set), with a P-256 key and a random 127-bit serial.
func NewCertificate(parent *x509.Certificate, parentKey *ecdsa.PrivateKey, cn string, dnsNames []string, ips []net.IP,
	lifetime time.Duration, client bool, now time.Time) (*x509.Certificate, *ecdsa.PrivateKey, error) {
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
		if client {
			tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
		}
		signer, signerKey = parent, parentKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

// PEMCert encodes a certificate.
func PEMCert(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

// PEMKey encodes an EC key.
func PEMKey(k *ecdsa.PrivateKey) []byte {
	der, _ := x509.MarshalECPrivateKey(k)
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}

// ParsePair parses a PEM certificate and its EC key (false: missing, unparsable, or not a pair).
func ParsePair(certPEM, keyPEM []byte) (*x509.Certificate, *ecdsa.PrivateKey, bool) {
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

// Bundle parses every certificate of a PEM bundle, skipping what does not parse.
func Bundle(b []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			return out
		}
		if c, err := x509.ParseCertificate(block.Bytes); err == nil {
			out = append(out, c)
		}
	}
}

// Leaf parses a PEM certificate (nil: none, or unparsable).
func Leaf(certPEM []byte) *x509.Certificate {
	if c := Bundle(certPEM); len(c) > 0 {
		return c[0]
	}
	return nil
}
