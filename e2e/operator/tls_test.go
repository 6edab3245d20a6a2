package operator

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"example.com/cache-operator/e2e/framework"
	"example.com/cache-operator/engine/cachetls"
	"example.com/cache-operator/engine/member"
)

// tlsLoad writes and reads through a TLS Service on a new connection every second (a fresh
// handshake each time), recording each acknowledged write and each failed handshake.
type tlsLoad struct {
	rounds, handshakeFailures, opFailures atomic.Int64
	mu                                    sync.Mutex
	acked                                 []string
	lastErr                               atomic.Value
	stop, done                            chan struct{}
}

func startTLSLoad(addr, serverName, pw string, roots *x509.CertPool, limit time.Duration) *tlsLoad {
	l := &tlsLoad{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		deadline := time.Now().Add(limit)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for n := 0; time.Now().Before(deadline); n++ {
			l.round(addr, serverName, pw, roots, n)
			select {
			case <-l.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return l
}

func (l *tlsLoad) round(addr, serverName, pw string, roots *x509.CertPool, n int) {
	l.rounds.Add(1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	conn, err := (&tls.Dialer{Config: &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS12}}).DialContext(ctx, "tcp", addr)
	if err != nil {
		l.handshakeFailures.Add(1)
		l.lastErr.Store(err.Error())
		return
	}
	conn.Close()
	cl := redis.NewClient(&redis.Options{Addr: addr, Password: pw, Protocol: 2, DisableIdentity: true, MaxRetries: -1, PoolSize: 1,
		TLSConfig: &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS12}})
	defer cl.Close()
	for i := 0; i < 5; i++ {
		key := fmt.Sprintf("tls:%d:%d", n, i)
		if err := cl.Set(ctx, key, key, 0).Err(); err != nil {
			l.opFailures.Add(1)
			l.lastErr.Store(err.Error())
			continue
		}
		l.mu.Lock()
		l.acked = append(l.acked, key)
		l.mu.Unlock()
		if v, err := cl.Get(ctx, key).Result(); err != nil || v != key {
			l.opFailures.Add(1)
			l.lastErr.Store(fmt.Sprintf("GET %s: %q %v", key, v, err))
		}
	}
}

func (l *tlsLoad) finish() {
	close(l.stop)
	<-l.done
}

// caBundle reads the CA bundle a TLS cache publishes (status.tls.caConfigMap, key ca.crt).
func caBundle(t *testing.T, c *framework.Cluster, ns, cache string) ([]byte, *x509.CertPool) {
	t.Helper()
	mc, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Get(context.Background(), cache, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	name, _, _ := unstructured.NestedString(mc.Object, "status", "tls", "caConfigMap")
	if name != cache+"-ca" {
		t.Fatalf("status.tls.caConfigMap is %q, want %s-ca", name, cache)
	}
	cm, err := c.Kube.CoreV1().ConfigMaps(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(cm.Data["ca.crt"])) {
		t.Fatalf("ConfigMap %s has no CA in ca.crt", name)
	}
	return []byte(cm.Data["ca.crt"]), pool
}

// TestTLSCache: a size-3 cache with spec.tls.enabled on real nodes serves TLS only: redis-cli
// --tls --cacert (the published CA) through -rw works, a plain-text connection is refused, the
// replicas replicate over TLS with their links up. Its certificates rotated by the annotation under
// a writer and a reader that reconnect every second: no failed handshake, no replica link down, no
// restart, no new revision, no acknowledged write lost, the new serial served by every member within
// 60 s. Turning TLS off is refused at once.
func TestTLSCache(t *testing.T) {
	parallel(t)
	c := framework.Setup(t)
	ns := c.RealNamespace(t, "tls")
	startOperatorIn(t, c, ns)
	deleteCachesOnCleanup(t, c, ns)
	dumpMembersOnFailure(t, c, ns, "t")
	ctx := context.Background()
	createV2Cache(t, c, ns, "t", map[string]interface{}{"replicas": int64(3), "engine": map[string]interface{}{"version": "7.2"},
		"storage": map[string]interface{}{"size": "1Gi"}, "tls": map[string]interface{}{"enabled": true}})
	primary := waitWhole(t, c, ns, "t", 3, 3*time.Minute)
	pw, internal := password(t, c, ns, "t"), internalPassword(t, c, ns, "t")
	pem, roots := caBundle(t, c, ns, "t")
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, pem, 0o600); err != nil {
		t.Fatal(err)
	}
	rwIP := clusterIP(t, c, ns, "t-rw")
	rw := net.JoinHostPort(rwIP, "6379")

	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if out, err := redisCLI(cctx, rwIP, pw, "--tls", "--cacert", caFile, "--sni", "t-rw", "set", "tls:cli", "v"); out != "OK" {
		t.Errorf("redis-cli --tls --cacert through t-rw: %q %v", out, err)
	}
	plain := newClient(rw, pw)
	err := plain.Ping(cctx).Err()
	plain.Close()
	if err == nil || strings.Contains(err.Error(), "NOAUTH") || strings.Contains(err.Error(), "WRONGPASS") {
		t.Errorf("a plain-text connection through t-rw: %v; want it refused", err)
	}
	material := cachetls.Material{Pool: roots}
	internalTLS := func(ip, pw string) *redis.Client {
		return redis.NewClient(&redis.Options{Addr: net.JoinHostPort(ip, "6379"), Username: "internal", Password: pw, Protocol: 2, DisableIdentity: true,
			MaxRetries: -1, PoolSize: 1, DialTimeout: time.Second, ReadTimeout: time.Second, TLSConfig: material.ClientConfig(nil)})
	}
	links := func() (up, replicas int, why string) {
		for _, p := range memberPods(t, c, ns, "t") {
			cl := internalTLS(p.Status.PodIP, internal)
			info, err := cl.Info(ctx, "replication").Result()
			conf, _ := cl.ConfigGet(ctx, "tls-replication").Result()
			cl.Close()
			if err != nil {
				why += fmt.Sprintf("%s: %v; ", p.Name, err)
				continue
			}
			if strings.Contains(info, "role:master") {
				continue
			}
			replicas++
			if strings.Contains(info, "master_link_status:up") && conf["tls-replication"] == "yes" {
				up++
			}
		}
		return up, replicas, why
	}
	if up, replicas, why := links(); up != 2 || replicas != 2 {
		t.Fatalf("replication over TLS: %d of %d replicas linked with tls-replication yes (%s)", up, replicas, why)
	}
	t.Logf("TLS cache Ready; primary %s; redis-cli --tls through t-rw works, plain text refused (%v), both replicas linked over TLS", primary.Name, err)

	// The rotation, under load.
	before := restartsByPod(memberPods(t, c, ns, "t"))
	sts, err := c.Kube.AppsV1().StatefulSets(ns).Get(ctx, "t", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	revision := sts.Status.UpdateRevision
	oldSerial := tlsSerial(t, c, ns, "t")
	load := startTLSLoad(rw, "t-rw", pw, roots, 5*time.Minute)
	var samples, down atomic.Int64
	stopLinks := make(chan struct{})
	linksDone := make(chan struct{})
	go func() {
		defer close(linksDone)
		for n := 0; n < 4*60*5; n++ {
			select {
			case <-stopLinks:
				return
			case <-time.After(250 * time.Millisecond):
			}
			up, replicas, _ := links()
			samples.Add(1)
			if up != 2 || replicas != 2 {
				down.Add(1)
			}
		}
	}()
	framework.Eventually(t, 30*time.Second, "the load to run", func() (bool, string, error) {
		return load.rounds.Load() >= 3, fmt.Sprint(load.rounds.Load()), nil
	})
	patch := `{"metadata":{"annotations":{"cache.example.com/rotate-certificates":"r1"}}}`
	if _, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Patch(ctx, "t", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var newSerial string
	framework.Eventually(t, 30*time.Second, "a new serial in status.tls", func() (bool, string, error) {
		newSerial = tlsSerial(t, c, ns, "t")
		return newSerial != oldSerial && newSerial != "", newSerial, nil
	})
	framework.Eventually(t, 2*time.Minute, "every member serving the new certificate", func() (bool, string, error) {
		var seen []string
		all := true
		for _, p := range memberPods(t, c, ns, "t") {
			s, err := member.ServedSerial(ctx, net.JoinHostPort(p.Status.PodIP, "6379"), material.ClientConfig(nil))
			seen = append(seen, fmt.Sprintf("%s: %s %v", p.Name, s, err))
			all = all && s == newSerial
		}
		return all, strings.Join(seen, "; "), nil
	})
	served := time.Since(start)
	// A few more rounds on the new certificate.
	after := load.rounds.Load()
	framework.Eventually(t, 30*time.Second, "three more rounds", func() (bool, string, error) {
		return load.rounds.Load() >= after+3, fmt.Sprint(load.rounds.Load()), nil
	})
	load.finish()
	close(stopLinks)
	<-linksDone
	var lost int
	check := redis.NewClient(&redis.Options{Addr: rw, Password: pw, Protocol: 2, DisableIdentity: true,
		TLSConfig: &tls.Config{RootCAs: roots, ServerName: "t-rw", MinVersion: tls.VersionTLS12}})
	defer check.Close()
	load.mu.Lock()
	acked := append([]string(nil), load.acked...)
	load.mu.Unlock()
	for _, k := range acked {
		if v, err := check.Get(ctx, k).Result(); err != nil || v != k {
			lost++
		}
	}
	last, _ := load.lastErr.Load().(string)
	t.Logf("certificates rotated: new serial %s served by every member %v after the annotation; %d connections (one a second): %d failed handshakes, %d failed commands (last error %q); %d acknowledged writes, %d lost; replica links: %d samples, %d with a link down",
		newSerial, served.Round(10*time.Millisecond), load.rounds.Load(), load.handshakeFailures.Load(), load.opFailures.Load(), last, len(acked), lost, samples.Load(), down.Load())
	if load.handshakeFailures.Load() != 0 || load.opFailures.Load() != 0 {
		t.Errorf("%d failed handshakes, %d failed commands during the rotation", load.handshakeFailures.Load(), load.opFailures.Load())
	}
	if lost != 0 || len(acked) == 0 {
		t.Errorf("%d of %d acknowledged writes lost", lost, len(acked))
	}
	if down.Load() != 0 || samples.Load() == 0 {
		t.Errorf("replica links: %d of %d samples found one down", down.Load(), samples.Load())
	}
	if served > 60*time.Second {
		t.Errorf("the new certificate was served %v after the rotation; want within 60 s", served)
	}
	if got := restartsByPod(memberPods(t, c, ns, "t")); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Errorf("members restarted or replaced: before %v, after %v", before, got)
	}
	if sts, err = c.Kube.AppsV1().StatefulSets(ns).Get(ctx, "t", metav1.GetOptions{}); err != nil || sts.Status.UpdateRevision != revision {
		t.Errorf("the StatefulSet's revision moved (%v): a rotation must not touch the pod template", err)
	}

}

// TestTLSTurnedOnAndOff: TLS turned on for a running size-3 cache under a writer rolls the members
// (replicas first, the primary handed over to a TLS member by promotion) and loses no acknowledged
// write; every replica then replicates over TLS and plain text is refused. Turned off again, the
// cache serves plain text, with no acknowledged write lost either.
func TestTLSTurnedOnAndOff(t *testing.T) {
	parallel(t)
	rc := newRealCache(t, "tlson", "o")
	c, ns, pw, rw := rc.c, rc.ns, rc.password, rc.addr
	ctx := context.Background()
	for _, step := range []struct {
		name string
		on   bool
	}{{"on", true}, {"off", false}} {
		// The writer in the cache's mode before the change.
		dial := func() *redis.Client { return newClient(rw, pw) }
		if !step.on {
			_, roots := caBundle(t, c, ns, "o")
			dial = func() *redis.Client {
				return redis.NewClient(&redis.Options{Addr: rw, Password: pw, Protocol: 2, DisableIdentity: true, MaxRetries: -1, PoolSize: 1,
					DialTimeout: 500 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond,
					TLSConfig: &tls.Config{RootCAs: roots, ServerName: "o-rw", MinVersion: tls.VersionTLS12}})
			}
		}
		w := startWriterDial(t, dial, "w"+step.name+":", false, 0, 2_000_000, 10*time.Minute)
		w.waitOK(t, time.Now(), time.Minute)
		start := time.Now()
		patch := fmt.Sprintf(`{"spec":{"tls":{"enabled":%v}}}`, step.on)
		if _, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Patch(ctx, "o", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		framework.Eventually(t, 5*time.Minute, "every member rolled with TLS "+step.name, func() (bool, string, error) {
			var seen []string
			all := true
			for _, p := range memberPods(t, c, ns, "o") {
				tlsLabel := p.Labels["cache.example.com/tls"] == "true"
				seen = append(seen, fmt.Sprintf("%s tls=%v ready=%v", p.Name, tlsLabel, framework.PodReady(&p)))
				all = all && tlsLabel == step.on && framework.PodReady(&p)
			}
			return all, strings.Join(seen, "; "), nil
		})
		waitWhole(t, c, ns, "o", 3, 3*time.Minute)
		rolled := time.Since(start)
		w.halt()
		var reader *redis.Client
		if step.on {
			_, roots := caBundle(t, c, ns, "o")
			reader = redis.NewClient(&redis.Options{Addr: rw, Password: pw, Protocol: 2, DisableIdentity: true,
				TLSConfig: &tls.Config{RootCAs: roots, ServerName: "o-rw", MinVersion: tls.VersionTLS12}})
		} else {
			reader = newClient(rw, pw)
		}
		lost := w.lostWith(t, reader)
		reader.Close()
		var lastAck time.Time
		w.mu.Lock()
		for _, at := range w.acked {
			if at.After(lastAck) {
				lastAck = at
			}
		}
		w.mu.Unlock()
		t.Logf("TLS %s: rolled in %v; %d writes acknowledged, %d lost; the writer (in the old mode) acknowledged its last write %v after the change, at the handover",
			step.name, rolled.Round(100*time.Millisecond), w.ackedCount(), len(lost), lastAck.Sub(start).Round(100*time.Millisecond))
		if len(lost) != 0 || w.ackedCount() == 0 {
			t.Errorf("TLS %s: %d of %d acknowledged writes lost", step.name, len(lost), w.ackedCount())
		}
		plain := bulkClient(rw, pw)
		err := plain.Ping(ctx).Err()
		plain.Close()
		if step.on && err == nil {
			t.Errorf("TLS on: a plain-text PING through o-rw answered")
		}
		if !step.on && err != nil {
			t.Errorf("TLS off: a plain-text PING through o-rw: %v", err)
		}
	}
}

// tlsSerial is status.tls.serial.
func tlsSerial(t *testing.T, c *framework.Cluster, ns, cache string) string {
	t.Helper()
	mc, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Get(context.Background(), cache, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, _, _ := unstructured.NestedString(mc.Object, "status", "tls", "serial")
	return s
}
