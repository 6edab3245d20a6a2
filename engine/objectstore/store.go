// Package objectstore is the operator's side of an S3-compatible bucket: a store's settings read
// from its Secret (or, in a backup Job, from the environment), the client (minio-go, path-style
// requests), where a cache's backups go in the bucket, and the small manifest written beside each
// backup that says what it holds.
//
// It is not for moving a backup's data: that is package snapshot, which runs in a Job or an init
// container, never in the controller.
package objectstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"example.com/cache-operator/engine/api"
)

// Store is one bucket and how to reach it.
type Store struct {
	// Endpoint is the store's URL, http:// or https://.
	Endpoint string
	// Bucket holds the backups, under Prefix (may be empty).
	Bucket, Prefix string
	// Region is the bucket's region ("" : us-east-1).
	Region string
	// AccessKeyID and SecretAccessKey sign the requests.
	AccessKeyID, SecretAccessKey string
	// CABundle (PEM), when set, is the only trust for an https:// endpoint.
	CABundle []byte
}

// FromSecret reads a store from its Secret's data, naming every missing or malformed key.
func FromSecret(data map[string][]byte) (Store, error) {
	s := Store{
		Endpoint:        strings.TrimSpace(string(data[api.StoreEndpoint])),
		Bucket:          strings.TrimSpace(string(data[api.StoreBucket])),
		Prefix:          strings.Trim(strings.TrimSpace(string(data[api.StorePrefix])), "/"),
		Region:          strings.TrimSpace(string(data[api.StoreRegion])),
		AccessKeyID:     strings.TrimSpace(string(data[api.StoreAccessKey])),
		SecretAccessKey: strings.TrimSpace(string(data[api.StoreSecretKey])),
		CABundle:        data[api.StoreCABundle],
	}
	return s, s.Validate()
}

// FromEnv reads a store from the environment (api.StoreEnv: a Job's or init container's).
func FromEnv() (Store, error) {
	data := map[string][]byte{}
	for key, env := range api.StoreEnv {
		if v, ok := os.LookupEnv(env); ok {
			data[key] = []byte(v)
		}
	}
	return FromSecret(data)
}

// Validate names what is missing or malformed.
func (s Store) Validate() error {
	var missing []string
	for key, v := range map[string]string{api.StoreEndpoint: s.Endpoint, api.StoreBucket: s.Bucket,
		api.StoreAccessKey: s.AccessKeyID, api.StoreSecretKey: s.SecretAccessKey} {
		if v == "" {
			missing = append(missing, key)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return fmt.Errorf("missing keys: %s (a store's Secret has endpoint, bucket, accessKeyID, secretAccessKey, and optionally region, prefix, caBundle)", strings.Join(missing, ", "))
	}
	u, err := url.Parse(s.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return fmt.Errorf("endpoint %q: must be an http:// or https:// URL without a path", s.Endpoint)
	}
	if len(s.CABundle) > 0 && !x509.NewCertPool().AppendCertsFromPEM(s.CABundle) {
		return errors.New("caBundle: no PEM certificate in it")
	}
	return nil
}

// Client returns a client of the store: path-style requests, signature V4.
func (s Store) Client() (*minio.Client, error) {
	u, err := url.Parse(s.Endpoint)
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.ResponseHeaderTimeout = time.Minute
	if len(s.CABundle) > 0 {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(s.CABundle)
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	region := s.Region
	if region == "" {
		region = "us-east-1"
	}
	return minio.New(u.Host, &minio.Options{
		Creds:        credentials.NewStaticV4(s.AccessKeyID, s.SecretAccessKey, ""),
		Secure:       u.Scheme == "https",
		Region:       region,
		BucketLookup: minio.BucketLookupPath,
		Transport:    tr,
	})
}

// CacheFolder is the key prefix of a cache's backups: [<prefix>/]<namespace>/<cache>/.
func (s Store) CacheFolder(namespace, cache string) string {
	return path.Join(s.Prefix, namespace, cache) + "/"
}

// ObjectKey is the key of a backup's data: <CacheFolder><backup>.rdb.
func (s Store) ObjectKey(namespace, cache, backup string) string {
	return s.CacheFolder(namespace, cache) + backup + ".rdb"
}

// ManifestKey is the key of the manifest beside a backup's data.
func ManifestKey(objectKey string) string { return objectKey + ".json" }

// Location is how status shows an object: s3://<bucket>/<key>.
func (s Store) Location(key string) string { return "s3://" + s.Bucket + "/" + key }

// Check says whether the store answers and the bucket exists, in words for a condition.
func Check(ctx context.Context, cl *minio.Client, bucket string) error {
	ok, err := cl.BucketExists(ctx, bucket)
	if err != nil {
		return fmt.Errorf("store unreachable or refusing: %w", err)
	}
	if !ok {
		return fmt.Errorf("bucket %q does not exist", bucket)
	}
	return nil
}

// DeleteFolder deletes every object under prefix and returns how many it deleted.
func DeleteFolder(ctx context.Context, cl *minio.Client, bucket, prefix string) (int, error) {
	objs := cl.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true})
	n := 0
	for o := range objs {
		if o.Err != nil {
			return n, o.Err
		}
		if err := cl.RemoveObject(ctx, bucket, o.Key, minio.RemoveObjectOptions{}); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// DeleteBackup deletes a backup's data and its manifest.
func DeleteBackup(ctx context.Context, cl *minio.Client, bucket, objectKey string) error {
	for _, k := range []string{objectKey, ManifestKey(objectKey)} {
		if err := cl.RemoveObject(ctx, bucket, k, minio.RemoveObjectOptions{}); err != nil {
			return err
		}
	}
	return nil
}
