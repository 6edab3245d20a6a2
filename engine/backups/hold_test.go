package backups

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/internal/workloop"
	"example.com/cache-operator/engine/objectstore"
)

// A cache that deletes its backups with it holds its store's Secret (a finalizer) so that its
// deletion can reach the bucket; a Secret that does not read as a store (a tenant naming any
// Secret) is not held, and the cache says why in BackupsReady.
func TestOnlyAStoreSecretIsHeld(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		data map[string][]byte
		held bool
	}{
		{"not a store", map[string][]byte{"password": []byte("x")}, false},
		{"a store", map[string][]byte{"endpoint": []byte("http://127.0.0.1:1"), "bucket": []byte("b"),
			"accessKeyID": []byte("k"), "secretAccessKey": []byte("s")}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kube := kubefake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "app-secret", Namespace: "shop"}, Data: tc.data})
			c := &Controller{opts: Options{Now: time.Now, StoreCheck: time.Minute}, kube: kube, recorder: record.NewFakeRecorder(10),
				reconciles: workloop.New(workloop.Options{Name: "test"}), state: map[string]*cacheState{}, stores: map[string]objectstore.Store{}}
			mc := &unstructured.Unstructured{}
			mc.SetNamespace("shop")
			mc.SetName("c")
			c.checkStore(ctx, mc, api.Spec{Backup: &api.Backup{StoreSecret: "app-secret", OnDelete: api.BackupDelete}})
			sec, err := kube.CoreV1().Secrets("shop").Get(ctx, "app-secret", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if held := hasFinalizer(sec); held != tc.held {
				t.Errorf("finalizers %v: held %v, want %v", sec.Finalizers, held, tc.held)
			}
		})
	}
}
