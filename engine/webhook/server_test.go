package webhook

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"example.com/cache-operator/engine/admission"
	"example.com/cache-operator/engine/api"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
)

// The /scale rule's quorum override is read from the API server at the moment of the request: an
// annotation added just before `kubectl scale` counts. (It used to come from the informer cache,
// which may not have seen the annotation yet.)
func TestScaleOverrideIsReadLive(t *testing.T) {
	mc := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": api.GroupVersion.String(), "kind": api.Kind,
		"metadata": map[string]interface{}{"name": "sessions", "namespace": "shop"},
	}}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{api.Resource: "ManagedCacheList"}, mc)
	lookup := liveAnnotations(client)
	ctx := context.Background()
	if a, err := lookup(ctx, "shop", "sessions"); err != nil || a[admission.AllowQuorumLossAnnotation] != "" {
		t.Fatalf("before: %v %v", a, err)
	}
	mc = mc.DeepCopy()
	mc.SetAnnotations(map[string]string{admission.AllowQuorumLossAnnotation: "true"})
	if _, err := client.Resource(api.Resource).Namespace("shop").Update(ctx, mc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if a, err := lookup(ctx, "shop", "sessions"); err != nil || a[admission.AllowQuorumLossAnnotation] != "true" {
		t.Errorf("right after the annotation was added: %v %v; want it seen", a, err)
	}
	if _, err := lookup(ctx, "shop", "gone"); err == nil {
		t.Error("a cache that does not exist: no error")
	}
}

// A client that sends a request's headers and then trickles its body holds the webhook server's
// connection no longer than the read timeout: the server closes it, and the handler never gets a
// whole body.
func TestTricklingClientIsCutOff(t *testing.T) {
	var whole atomic.Bool
	srv := httpServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err == nil {
			whole.Store(true)
		}
	}), timeouts{header: time.Second, read: time.Second, write: time.Second, idle: time.Second})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// One byte every 200 ms, for at most 10 s: the fault, bounded.
	var werr error
	for i := 0; i < 50 && werr == nil; i++ {
		_, werr = conn.Write([]byte("x"))
		if werr == nil {
			_ = conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			if _, rerr := conn.Read(make([]byte, 512)); rerr != nil && !errors.Is(rerr, os.ErrDeadlineExceeded) {
				werr = rerr // the server answered or closed
			}
		}
	}
	held := time.Since(start)
	t.Logf("the trickling client held the connection %v (read timeout 1 s): %v", held.Round(10*time.Millisecond), werr)
	if werr == nil || held > 3*time.Second {
		t.Errorf("the connection still open after %v of trickling; want it closed about the 1 s read timeout", held)
	}
	if whole.Load() {
		t.Error("the handler read a whole body")
	}
}
