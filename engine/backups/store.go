package backups

import (
	"context"
	"fmt"

	"github.com/minio/minio-go/v7"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"example.com/cache-operator/engine/objectstore"
)

// storeClient reads the store's Secret and returns the store and a client of it. The last store read
// for each Secret is remembered (see cacheState.store).
func (c *Controller) storeClient(ctx context.Context, namespace, secret string) (objectstore.Store, *minio.Client, error) {
	store, err := c.storeOf(ctx, namespace, secret)
	if err != nil {
		return store, nil, err
	}
	cl, err := store.Client()
	if err != nil {
		return store, nil, fmt.Errorf("Secret %s/%s: %w", namespace, secret, err)
	}
	return store, cl, nil
}

func (c *Controller) storeOf(ctx context.Context, namespace, secret string) (objectstore.Store, error) {
	sec, err := c.kube.CoreV1().Secrets(namespace).Get(ctx, secret, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return objectstore.Store{}, fmt.Errorf("Secret %s/%s (the backup store) does not exist", namespace, secret)
	}
	if err != nil {
		return objectstore.Store{}, fmt.Errorf("reading Secret %s/%s: %w", namespace, secret, err)
	}
	store, err := objectstore.FromSecret(sec.Data)
	if err != nil {
		return store, fmt.Errorf("Secret %s/%s: %w", namespace, secret, err)
	}
	c.mu.Lock()
	c.stores[namespace+"/"+secret] = store
	c.mu.Unlock()
	return store, nil
}

// rememberedStore is the store last read from that Secret, if any.
func (c *Controller) rememberedStore(namespace, secret string) (objectstore.Store, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.stores[namespace+"/"+secret]
	return s, ok
}
