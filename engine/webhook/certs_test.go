package webhook

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"net"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
)

func newCerts(client *fake.Clientset, lifetime time.Duration) *certs {
	return &certs{client: client, namespace: "ops", name: "tls", ips: []net.IP{net.ParseIP("127.0.0.1")}, lifetime: lifetime}
}

// verify checks that the served certificate chains to the CA bundle for 127.0.0.1 at time now.
func verify(t *testing.T, c *certs, now time.Time) {
	t.Helper()
	pool := x509.NewCertPool()
	rest := c.caBundle()
	n := 0
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		ca, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		pool.AddCert(ca)
		n++
	}
	if n == 0 {
		t.Fatal("empty CA bundle")
	}
	leaf := c.current.Load().Leaf
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "127.0.0.1", CurrentTime: now}); err != nil {
		t.Fatalf("serving certificate does not verify: %v", err)
	}
}

func TestCertsCreateKeepRenew(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	c := newCerts(client, time.Hour)
	now := time.Now()
	if renewed, err := c.ensure(ctx, now, nil); err != nil || !renewed {
		t.Fatalf("first ensure: renewed=%v err=%v", renewed, err)
	}
	verify(t, c, now)
	first := c.serial.Load()
	ca := string(c.caBundle())

	// Nothing due: no write, same certificate.
	client.ClearActions()
	if renewed, err := c.ensure(ctx, now.Add(30*time.Minute), nil); err != nil || renewed {
		t.Fatalf("ensure with nothing due: renewed=%v err=%v", renewed, err)
	}
	for _, a := range client.Actions() {
		if a.GetVerb() != "get" {
			t.Errorf("unexpected %s with nothing due", a.GetVerb())
		}
	}

	// A third of the lifetime left: a new serving certificate from the same CA.
	later := now.Add(41 * time.Minute)
	if renewed, err := c.ensure(ctx, later, nil); err != nil || !renewed {
		t.Fatalf("ensure when due: renewed=%v err=%v", renewed, err)
	}
	if c.serial.Load().Cmp(first) == 0 || string(c.caBundle()) != ca {
		t.Fatal("want a new serving certificate and the same CA")
	}
	verify(t, c, later)

	// The CA due (10h lifetime, 7h later): a new CA, and the old one stays in the bundle.
	muchLater := now.Add(7 * time.Hour)
	if _, err := c.ensure(ctx, muchLater, nil); err != nil {
		t.Fatal(err)
	}
	if got := len(pemBlocks(c.caBundle())); got != 2 {
		t.Fatalf("CA bundle has %d certificates during a CA rotation, want 2", got)
	}
	verify(t, c, muchLater)

	// Another lifetime (the flag changed): renewed at once.
	short := newCerts(client, time.Minute)
	if renewed, err := short.ensure(ctx, muchLater, nil); err != nil || !renewed {
		t.Fatalf("ensure with a shorter lifetime: renewed=%v err=%v", renewed, err)
	}
	if got := short.current.Load().Leaf; got.NotAfter.Sub(muchLater) > time.Minute+time.Second {
		t.Fatalf("certificate valid until %s, want about a minute", got.NotAfter)
	}
}

func pemBlocks(b []byte) []*pem.Block {
	var out []*pem.Block
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return out
		}
		out = append(out, blk)
	}
}

// Two replicas starting together end up serving the same certificate.
func TestCertsConcurrentReplicasAgree(t *testing.T) {
	client := fake.NewClientset()
	replicas := []*certs{newCerts(client, time.Hour), newCerts(client, time.Hour), newCerts(client, time.Hour)}
	var wg sync.WaitGroup
	now := time.Now()
	for _, r := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := r.ensure(context.Background(), now, nil); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for _, r := range replicas[1:] {
		if r.serial.Load().Cmp(replicas[0].serial.Load()) != 0 {
			t.Fatal("replicas serve different certificates")
		}
	}
}
