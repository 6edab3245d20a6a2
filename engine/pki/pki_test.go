package pki

import (
	"crypto/x509"
	"testing"
	"time"
)

var keys = Keys{CACert: "ca.crt", CAKey: "ca.key", CABundle: "bundle.crt", Cert: "tls.crt", Key: "tls.key"}

func leafOf(t *testing.T, d map[string][]byte) *x509.Certificate {
	t.Helper()
	c, _, ok := ParsePair(d[keys.Cert], d[keys.Key])
	if !ok {
		t.Fatal("no certificate")
	}
	return c
}

// Issued once; kept while more than a third is left; renewed with a third left, for new names, and
// when asked; a CA rotation keeps the old CA in the bundle until it expires, and the certificate
// it signed verifies against the bundle meanwhile.
func TestRenew(t *testing.T) {
	now := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	s := Spec{CAName: "ca", Name: "c", DNSNames: []string{"c-rw", "*.c.ns.svc"}, Lifetime: 90 * time.Hour, CALifetime: 900 * time.Hour, Client: true}
	d := map[string][]byte{}
	if changed, err := Renew(d, keys, s, now); err != nil || !changed {
		t.Fatalf("first: %v %v", changed, err)
	}
	first := leafOf(t, d)
	if first.VerifyHostname("c-0.c.ns.svc") != nil || len(first.ExtKeyUsage) != 2 {
		t.Fatalf("names %v, usages %v", first.DNSNames, first.ExtKeyUsage)
	}
	if changed, _ := Renew(d, keys, s, now.Add(59*time.Hour)); changed {
		t.Fatal("renewed with more than a third left")
	}
	if changed, _ := Renew(d, keys, s, now.Add(61*time.Hour)); !changed || leafOf(t, d).SerialNumber.Cmp(first.SerialNumber) == 0 {
		t.Fatal("not renewed with less than a third left")
	}
	s2 := s
	s2.DNSNames = append(s2.DNSNames, "c-ro")
	if changed, _ := Renew(d, keys, s2, now.Add(62*time.Hour)); !changed || leafOf(t, d).VerifyHostname("c-ro") != nil {
		t.Fatal("not renewed for a new name")
	}
	before := leafOf(t, d)
	s2.RenewCert = true
	if changed, _ := Renew(d, keys, s2, now.Add(62*time.Hour)); !changed || leafOf(t, d).SerialNumber.Cmp(before.SerialNumber) == 0 {
		t.Fatal("not renewed when asked")
	}
	oldCA := Leaf(d[keys.CACert])
	signedByOld := leafOf(t, d)
	s2.RenewCert, s2.RenewCA = false, true
	at := now.Add(63 * time.Hour)
	if changed, _ := Renew(d, keys, s2, at); !changed {
		t.Fatal("CA not renewed when asked")
	}
	bundle := Bundle(d[keys.CABundle])
	if len(bundle) != 2 || !bundle[1].Equal(oldCA) || Leaf(d[keys.CACert]).Equal(oldCA) {
		t.Fatalf("bundle after a CA rotation: %d certificates", len(bundle))
	}
	pool := x509.NewCertPool()
	for _, c := range bundle {
		pool.AddCert(c)
	}
	for _, c := range []*x509.Certificate{signedByOld, leafOf(t, d)} {
		if _, err := c.Verify(x509.VerifyOptions{Roots: pool, DNSName: "c-rw", CurrentTime: at}); err != nil {
			t.Errorf("certificate %s does not verify against the bundle: %v", c.SerialNumber, err)
		}
	}
	// Once the old CA has expired it leaves the bundle.
	s2.RenewCA = false
	later := oldCA.NotAfter.Add(time.Hour)
	if _, err := Renew(d, keys, s2, later); err != nil {
		t.Fatal(err)
	}
	for _, c := range Bundle(d[keys.CABundle]) {
		if c.Equal(oldCA) {
			t.Error("the expired CA is still in the bundle")
		}
	}
}
