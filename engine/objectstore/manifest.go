package objectstore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/minio/minio-go/v7"
)

// Manifest is what a backup holds, written as JSON beside its data (ManifestKey) once the data
// is in the bucket: the restore checks the data against it, and a cluster that has only the
// bucket learns from it what it restores.
type Manifest struct {
	// Namespace, Cache and Backup name where it came from.
	Namespace string `json:"namespace"`
	Cache     string `json:"cache"`
	Backup    string `json:"backup"`
	// Member is the pod it was taken from; FromPrimary says it was the primary.
	Member      string `json:"member"`
	FromPrimary bool   `json:"fromPrimary,omitempty"`
	// Engine and Version are the server's (INFO server), RDBVersion the snapshot format's.
	Engine     string `json:"engine"`
	Version    string `json:"version"`
	RDBVersion int    `json:"rdbVersion"`
	// Bytes is the data's size; Keys the keys the snapshot records; SHA256 its checksum (hex).
	Bytes  int64  `json:"bytes"`
	Keys   int64  `json:"keys"`
	SHA256 string `json:"sha256"`
	// Start and End bound the transfer.
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
}

// maxManifest bounds what ReadManifest reads.
const maxManifest = 64 << 10

// WriteManifest stores m beside the data at objectKey.
func WriteManifest(ctx context.Context, cl *minio.Client, bucket, objectKey string, m Manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	_, err = cl.PutObject(ctx, bucket, ManifestKey(objectKey), bytes.NewReader(b), int64(len(b)),
		minio.PutObjectOptions{ContentType: "application/json", SendContentMd5: true})
	return err
}

// ReadManifest reads the manifest beside the data at objectKey.
func ReadManifest(ctx context.Context, cl *minio.Client, bucket, objectKey string) (Manifest, error) {
	var m Manifest
	obj, err := cl.GetObject(ctx, bucket, ManifestKey(objectKey), minio.GetObjectOptions{})
	if err != nil {
		return m, err
	}
	defer obj.Close()
	b, err := io.ReadAll(io.LimitReader(obj, maxManifest))
	if err != nil {
		return m, fmt.Errorf("reading %s: %w", ManifestKey(objectKey), err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("%s is not a backup manifest: %w", ManifestKey(objectKey), err)
	}
	return m, nil
}
