package cachetls

import (
	"crypto/tls"
	"crypto/x509"
	"testing"

	"example.com/cache-operator/engine/pki"
)

// tlsState is a connection state whose peer presented certPEM.
func tlsState(t *testing.T, certPEM string) tls.ConnectionState {
	t.Helper()
	c := pki.Leaf([]byte(certPEM))
	if c == nil {
		t.Fatal("no certificate")
	}
	return tls.ConnectionState{PeerCertificates: []*x509.Certificate{c}}
}
