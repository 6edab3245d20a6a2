package cachetls

import (
	"encoding/base64"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/pki"
)

// secretOf is the Secret templates/tls.yaml renders from d, as the API server would hold it.
func secretOf(d Decision, rv string) *unstructured.Unstructured {
	enc := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	s := &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "v1", "kind": "Secret", "data": map[string]interface{}{
		Keys.CACert: enc(d.Data.CACurrent), Keys.CAKey: enc(d.Data.CAKey), Keys.CABundle: enc(d.Data.Bundle),
		Keys.Cert: enc(d.Data.Cert), Keys.Key: enc(d.Data.Key)}}}
	if d.Data.RotatedFor != "" {
		s.SetAnnotations(map[string]string{api.CertificatesRotatedForAnnotation: d.Data.RotatedFor})
	}
	s.SetResourceVersion(rv)
	return s
}

// Issued once for the cache's names; decided again from what was written, nothing changes; the
// annotation renews the certificate once per value (the CA stays); a third of the lifetime left
// renews it; what the operator dials with accepts the members' certificate and no other cache's.
func TestDecide(t *testing.T) {
	now := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	const life = 90 * time.Hour
	first, err := Decide(nil, "c", "ns", "cluster.local", "", life, now)
	if err != nil || !first.Renewed || first.Serial == "" || first.SecretVersion != "" {
		t.Fatalf("first: %+v %v", first, err)
	}
	leaf := pki.Leaf([]byte(first.Data.Cert))
	for _, n := range []string{"c-rw", "c-ro.ns", "c-rw.ns.svc.cluster.local", "c", "c-2", "c-0.c.ns.svc.cluster.local", "localhost", "127.0.0.1"} {
		if err := leaf.VerifyHostname(n); err != nil {
			t.Errorf("the certificate does not cover %s: %v", n, err)
		}
	}
	again, err := Decide(secretOf(first, "7"), "c", "ns", "cluster.local", "", life, now.Add(time.Hour))
	if err != nil || again.Renewed || again.Data != first.Data || again.SecretVersion != "7" {
		t.Fatalf("decided again from what was written: renewed %v, same %v, version %q", again.Renewed, again.Data == first.Data, again.SecretVersion)
	}
	rot, _ := Decide(secretOf(first, "8"), "c", "ns", "cluster.local", "r1", life, now.Add(time.Hour))
	if !rot.Renewed || rot.Serial == first.Serial || rot.Data.CACurrent != first.Data.CACurrent || rot.Data.RotatedFor != "r1" {
		t.Fatalf("rotation by annotation: renewed %v, serial %s (was %s), CA kept %v", rot.Renewed, rot.Serial, first.Serial, rot.Data.CACurrent == first.Data.CACurrent)
	}
	if once, _ := Decide(secretOf(rot, "9"), "c", "ns", "cluster.local", "r1", life, now.Add(2*time.Hour)); once.Renewed {
		t.Fatal("the same annotation value renewed again")
	}
	due, _ := Decide(secretOf(rot, "10"), "c", "ns", "cluster.local", "r1", life, rot.RenewAt.Add(time.Minute))
	if !due.Renewed || due.Serial == rot.Serial {
		t.Fatal("not renewed with a third of its lifetime left")
	}
	// Verified at the time of the certificates.
	fresh, _ := Decide(nil, "c", "ns", "cluster.local", "", life, time.Now())
	m, ok := MaterialOf(secretOf(fresh, "11"))
	if !ok || m.Serial != fresh.Serial {
		t.Fatalf("material: %+v %v", m, ok)
	}
	other, _ := Decide(nil, "d", "ns", "cluster.local", "", life, time.Now())
	cfg := m.ClientConfig(nil)
	for _, tc := range []struct {
		cert string
		ok   bool
	}{{fresh.Data.Cert, true}, {other.Data.Cert, false}} {
		err := cfg.VerifyConnection(tlsState(t, tc.cert))
		if (err == nil) != tc.ok {
			t.Errorf("verifying a member's certificate (want accepted %v): %v", tc.ok, err)
		}
	}
}
