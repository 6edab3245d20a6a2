package operator

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"example.com/cache-operator/e2e/framework"
	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/cachetls"
	"example.com/cache-operator/engine/member"
)

// TestShardedCacheTLS: a sharded cache (3 shards × 2, Redis 7.2) created with spec.tls.enabled
// serves TLS only, and its members gossip, vote and migrate over TLS (tls-cluster yes): a cluster
// client given the read-write Service and the published CA (verifying every member against the
// name <name>-rw, which the certificate covers) finds every shard, redis-cli --tls -c follows the
// redirections, a plain-text connection is refused. Its certificates rotated by the annotation
// under a cluster writer: every member serves the new serial, no member restarts, no write fails
// and none is lost. Turning TLS off is refused at once.
func TestShardedCacheTLS(t *testing.T) {
	parallel(t)
	c := framework.Setup(t)
	ctx := context.Background()
	ns := c.RealNamespace(t, "shtls")
	startOperatorIn(t, c, ns)
	deleteCachesOnCleanup(t, c, ns)
	const name = "vault"
	t0 := time.Now()
	createShardedWith(t, c, ns, name, map[string]interface{}{"tls": map[string]interface{}{"enabled": true}})
	t.Logf("3 shards × 2 members with TLS Ready %.1f s after the create", time.Since(t0).Seconds())
	pw, internal := password(t, c, ns, name), internalPassword(t, c, ns, name)
	pem, roots := caBundle(t, c, ns, name)
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, pem, 0o600); err != nil {
		t.Fatal(err)
	}
	rwIP := clusterIP(t, c, ns, name+"-rw")
	seed := net.JoinHostPort(rwIP, "6379")
	tlsCluster := func() *redis.ClusterClient {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{seed}, Password: pw, Protocol: 2, DisableIdentity: true,
			DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second, MaxRedirects: 8,
			ClusterStateReloadInterval: time.Second,
			TLSConfig:                  &tls.Config{RootCAs: roots, ServerName: name + "-rw", MinVersion: tls.VersionTLS12}})
	}
	cc := tlsCluster()
	defer cc.Close()

	// Every slot served by three shards of two, over TLS.
	framework.Eventually(t, time.Minute, "CLUSTER SLOTS over TLS: three shards of two over every slot", func() (bool, string, error) {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		slots, err := cc.ClusterSlots(cctx).Result()
		if err != nil {
			return false, err.Error(), nil
		}
		covered, pairs := 0, 0
		for _, s := range slots {
			covered += s.End - s.Start + 1
			if len(s.Nodes) == 2 {
				pairs++
			}
		}
		return covered == 16384 && pairs == len(slots) && len(slots) == 3, fmt.Sprintf("%d slots in %d ranges, %d with two members", covered, len(slots), pairs), nil
	})
	// redis-cli --tls -c follows a redirection to another shard over TLS.
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for _, k := range []string{"alpha", "bravo", "charlie"} {
		if out, err := redisCLI(cctx, rwIP, pw, "--tls", "--cacert", caFile, "--sni", name+"-rw", "-c", "set", k, "v-"+k); out != "OK" {
			t.Errorf("redis-cli --tls -c SET %s through %s-rw: %q %v", k, name, out, err)
		}
		if v, err := cc.Get(cctx, k).Result(); err != nil || v != "v-"+k {
			t.Errorf("GET %s through the TLS cluster client: %q, %v", k, v, err)
		}
	}
	// Each member: plain text refused; over TLS, tls-cluster yes and the cluster ok.
	material := cachetls.Material{Pool: roots}
	for _, p := range memberPods(t, c, ns, name) {
		plain := newClient(net.JoinHostPort(p.Status.PodIP, "6379"), pw)
		err := plain.Ping(cctx).Err()
		plain.Close()
		if err == nil || strings.Contains(err.Error(), "NOAUTH") || strings.Contains(err.Error(), "WRONGPASS") {
			t.Errorf("%s: a plain-text connection answered (%v); want it refused", p.Name, err)
		}
		ic := redis.NewClient(&redis.Options{Addr: net.JoinHostPort(p.Status.PodIP, "6379"), Username: api.InternalUser, Password: internal,
			Protocol: 2, DisableIdentity: true, MaxRetries: -1, PoolSize: 1, DialTimeout: time.Second, ReadTimeout: time.Second,
			TLSConfig: material.ClientConfig(nil)})
		conf, cerr := ic.ConfigGet(cctx, "tls-cluster").Result()
		info, ierr := ic.ClusterInfo(cctx).Result()
		ic.Close()
		if cerr != nil || ierr != nil || conf["tls-cluster"] != "yes" || !strings.Contains(info, "cluster_state:ok") {
			t.Errorf("%s over TLS: tls-cluster %q (%v), cluster info ok %v (%v)", p.Name, conf["tls-cluster"], cerr, strings.Contains(info, "cluster_state:ok"), ierr)
		}
	}

	// The rotation, under a cluster writer.
	tags := shardTags(t, ctx, cc, 3)
	w := startClusterWriter(cc, tags, 200_000, 5*time.Minute)
	defer w.halt()
	framework.Eventually(t, 30*time.Second, "the writer's first 300 acknowledged writes", func() (bool, string, error) {
		n := w.ackedCount()
		return n >= 300, fmt.Sprintf("%d acknowledged", n), nil
	})
	before := restartsByPod(memberPods(t, c, ns, name))
	oldSerial := tlsSerial(t, c, ns, name)
	patch := `{"metadata":{"annotations":{"cache.example.com/rotate-certificates":"r1"}}}`
	if _, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	rotated := time.Now()
	var newSerial string
	framework.Eventually(t, 30*time.Second, "a new serial in status.tls", func() (bool, string, error) {
		newSerial = tlsSerial(t, c, ns, name)
		return newSerial != oldSerial && newSerial != "", newSerial, nil
	})
	framework.Eventually(t, 2*time.Minute, "every member serving the new certificate", func() (bool, string, error) {
		var seen []string
		all := true
		for _, p := range memberPods(t, c, ns, name) {
			s, err := member.ServedSerial(ctx, net.JoinHostPort(p.Status.PodIP, "6379"), material.ClientConfig(nil))
			seen = append(seen, fmt.Sprintf("%s: %s %v", p.Name, s, err))
			all = all && s == newSerial
		}
		return all, strings.Join(seen, "; "), nil
	})
	served := time.Since(rotated)
	// A few more seconds of writes on the new certificate, over new connections too.
	after := w.ackedCount()
	framework.Eventually(t, 30*time.Second, "300 more acknowledged writes", func() (bool, string, error) {
		return w.ackedCount() >= after+300, fmt.Sprint(w.ackedCount() - after), nil
	})
	w.halt()
	fresh := tlsCluster() // new connections: every member's new certificate verified against the CA
	defer fresh.Close()
	lost, acked := w.lost(t, fresh)
	failures := w.failures()
	t.Logf("certificates rotated: new serial %s served by every member %.1f s after the annotation; %d writes acknowledged, %d lost, failures %v",
		newSerial, served.Seconds(), acked, len(lost), failures)
	if len(lost) > 0 || len(failures) > 0 {
		t.Errorf("through the rotation: %d acknowledged writes lost, failures %v; want none", len(lost), failures)
	}
	if got := restartsByPod(memberPods(t, c, ns, name)); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Errorf("members restarted or replaced: before %v, after %v", before, got)
	}

	// Turning TLS off is refused: the bus cannot mix TLS and plain members through a roll.
	_, err := c.Kubectl(ctx, "patch", "managedcaches.v2.cache.example.com", name, "-n", ns, "--type=merge", "-p", `{"spec":{"tls":{"enabled":false}}}`)
	wantRejected(t, "turning TLS off on a sharded cache", err, api.ShardedTLSChange)
}

// createShardedWith is createSharded with more of the spec (merged over 3 shards × 2 of Redis 7.2).
func createShardedWith(t *testing.T, c *framework.Cluster, ns, name string, extra map[string]interface{}) {
	t.Helper()
	spec := map[string]interface{}{"engine": map[string]interface{}{"name": "redis", "version": "7.2"},
		"shards": int64(3), "replicas": int64(2), "storage": map[string]interface{}{"size": "1Gi"}}
	for k, v := range extra {
		spec[k] = v
	}
	obj := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "cache.example.com/v2", "kind": "ManagedCache",
		"metadata": map[string]interface{}{"name": name, "namespace": ns}, "spec": spec}}
	if _, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Create(context.Background(), obj, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a sharded cache: %v", err)
	}
	dumpMembersOnFailure(t, c, ns, name)
	waitReady(t, c, ns, name, 2, 3*time.Minute)
}
