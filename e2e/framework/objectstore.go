package framework

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"example.com/cache-operator/engine/objectstore"
)

// ObjectStore is the local cluster's object store (cluster.sh starts it), as a store the
// operator's code reads.
func (c *Cluster) ObjectStore(t testing.TB) objectstore.Store {
	t.Helper()
	cmd := exec.Command(filepath.Join(c.Root, "localcluster", "cluster.sh"), "objectstore-env")
	cmd.Env = append(os.Environ(), "CLUSTER_NAME="+c.Name, "CLUSTER_DIR="+c.Dir)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("cluster.sh objectstore-env: %v", err)
	}
	env := map[string]string{}
	for _, l := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			env[k] = v
		}
	}
	s := objectstore.Store{Endpoint: env["OBJECTSTORE_ENDPOINT"], Bucket: env["OBJECTSTORE_BUCKET"], Region: env["OBJECTSTORE_REGION"],
		AccessKeyID: env["OBJECTSTORE_ACCESS_KEY"], SecretAccessKey: env["OBJECTSTORE_SECRET_KEY"]}
	if err := s.Validate(); err != nil {
		t.Fatalf("the cluster's object store: %v (cluster.sh objectstore-env said %q)", err, out)
	}
	return s
}

// StoreSecret creates the Secret name in ns holding the store, with the given prefix; extra keys
// replace or add to it.
func (c *Cluster) StoreSecret(t testing.TB, ns, name string, s objectstore.Store, extra map[string]string) {
	t.Helper()
	data := map[string]string{"endpoint": s.Endpoint, "bucket": s.Bucket, "accessKeyID": s.AccessKeyID,
		"secretAccessKey": s.SecretAccessKey, "region": s.Region, "prefix": s.Prefix}
	for k, v := range extra {
		if v == "" {
			delete(data, k)
		} else {
			data[k] = v
		}
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, StringData: data}
	if _, err := c.Kube.CoreV1().Secrets(ns).Create(context.Background(), sec, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Secret %s/%s: %v", ns, name, err)
	}
}

// ObjectStoreCommand runs cluster.sh stop-objectstore or start-objectstore.
func (c *Cluster) ObjectStoreCommand(t testing.TB, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(c.Root, "localcluster", "cluster.sh"), what)
	cmd.Env = append(os.Environ(), "CLUSTER_NAME="+c.Name, "CLUSTER_DIR="+c.Dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cluster.sh %s: %v\n%s", what, err, out)
	}
}

// ObjectKeys lists the keys under prefix in the store's bucket.
func ObjectKeys(ctx context.Context, s objectstore.Store, prefix string) ([]string, error) {
	cl, err := s.Client()
	if err != nil {
		return nil, err
	}
	var keys []string
	for o := range cl.ListObjects(ctx, s.Bucket, listOptions(prefix)) {
		if o.Err != nil {
			return keys, fmt.Errorf("listing %s: %w", prefix, o.Err)
		}
		keys = append(keys, o.Key)
	}
	return keys, nil
}

func listOptions(prefix string) minio.ListObjectsOptions {
	return minio.ListObjectsOptions{Prefix: prefix, Recursive: true}
}
