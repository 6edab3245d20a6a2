// Package snapshot moves a cache's data between a member and a bucket, in the processes the
// operator starts for it: a backup Job (cache-operator backup) streams a member's snapshot to the
// store, and an init container (cache-operator restore) streams it back into the first member's
// data directory before its server starts. Both hash what passes (SHA-256) and hold a bounded
// buffer, never the dataset.
//
// It is not for deciding when to back up, from which member, or what to keep: that is package
// backups, in the controller, which never handles the data.
package snapshot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"time"

	"github.com/minio/minio-go/v7"

	"example.com/cache-operator/engine/objectstore"
)

// PartSize is the size of each part of a backup's multipart upload: with one part in flight, it
// bounds the Job's buffer.
const PartSize = 16 << 20

// BackupOptions say what to back up where.
type BackupOptions struct {
	Source Source
	Store  objectstore.Store
	// Key is the object's key in the store's bucket.
	Key string
	// Manifest is the manifest to write, with its names filled in (namespace, cache, backup,
	// member); Backup fills in the rest.
	Manifest objectstore.Manifest
	// Progress, when set, is called with the bytes sent so far, at most every few seconds.
	Progress func(bytes int64)
}

// counter counts bytes and reports progress.
type counter struct {
	n        int64
	last     time.Time
	progress func(int64)
}

func (c *counter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	if c.progress != nil && time.Since(c.last) > 5*time.Second {
		c.last = time.Now()
		c.progress(c.n)
	}
	return len(p), nil
}

// Backup streams a full synchronisation's snapshot from the source member to the store, then
// writes the manifest beside it. The data passes through a pipe with one part's buffer; its
// SHA-256 is computed on the way and sent parts carry their MD5, which the store checks.
func Backup(ctx context.Context, o BackupOptions) (objectstore.Manifest, error) {
	m := o.Manifest
	cl, err := o.Store.Client()
	if err != nil {
		return m, err
	}
	if err := objectstore.Check(ctx, cl, o.Store.Bucket); err != nil {
		return m, err
	}
	conn, err := dial(ctx, o.Source)
	if err != nil {
		return m, fmt.Errorf("connecting to %s: %w", o.Source.Addr, err)
	}
	defer conn.Close()
	srv, err := conn.server()
	if err != nil {
		return m, err
	}
	m.Engine, m.Version = srv.Engine, srv.Version
	m.Start = time.Now().UTC().Truncate(time.Second)
	rdb, err := conn.fullSync()
	if err != nil {
		return m, err
	}
	hash := sha256.New()
	count := &counter{progress: o.Progress, last: time.Now()}
	pr, pw := io.Pipe()
	scanned := make(chan scanResult, 1)
	go func() {
		info, err := ScanRDB(pr)
		_, _ = io.Copy(io.Discard, pr) // the rest, when a module's value ended the scan
		scanned <- scanResult{info, err}
	}()
	body := io.TeeReader(rdb, io.MultiWriter(hash, count, pw))
	_, err = cl.PutObject(ctx, o.Store.Bucket, o.Key, body, -1, minio.PutObjectOptions{
		ContentType: "application/octet-stream", PartSize: PartSize, NumThreads: 1, SendContentMd5: true,
	})
	pw.CloseWithError(err)
	scan := <-scanned
	if err != nil {
		return m, fmt.Errorf("uploading to %s: %w", o.Store.Location(o.Key), err)
	}
	if scan.err != nil {
		_ = cl.RemoveObject(ctx, o.Store.Bucket, o.Key, minio.RemoveObjectOptions{})
		return m, fmt.Errorf("the member's snapshot is not valid (removed from the bucket): %w", scan.err)
	}
	st, err := cl.StatObject(ctx, o.Store.Bucket, o.Key, minio.StatObjectOptions{})
	if err != nil {
		return m, fmt.Errorf("checking the uploaded object: %w", err)
	}
	if st.Size != count.n {
		return m, fmt.Errorf("the store holds %d bytes of the %d sent", st.Size, count.n)
	}
	m.End = time.Now().UTC().Truncate(time.Second)
	m.Bytes, m.Keys, m.RDBVersion = count.n, scan.info.Keys, scan.info.Version
	m.SHA256 = hex.EncodeToString(hash.Sum(nil))
	if err := objectstore.WriteManifest(ctx, cl, o.Store.Bucket, o.Key, m); err != nil {
		return m, fmt.Errorf("writing the manifest: %w", err)
	}
	return m, nil
}

type scanResult struct {
	info RDBInfo
	err  error
}
