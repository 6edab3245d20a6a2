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
	"hash"
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
	// RateLimit, when positive, caps how fast the snapshot is read, in bytes per second: the
	// member's snapshot, the checksums and the upload all follow.
	RateLimit int64
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
	w := newWatched(paced(ctx, rdb, o.RateLimit), o.Progress)
	_, err = cl.PutObject(ctx, o.Store.Bucket, o.Key, w, -1, minio.PutObjectOptions{
		ContentType: "application/octet-stream", PartSize: PartSize, NumThreads: 1, SendContentMd5: true,
		// No SHA-256 of each part for the request's signature (UNSIGNED-PAYLOAD), a pass over
		// the data on both ends: each part's MD5 (signed) and CRC32C are checked by the store,
		// and the object's SHA-256, computed here, by the restore.
		DisableContentSha256: true,
	})
	scan := w.finish(err)
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
	if st.Size != w.count.n {
		return m, fmt.Errorf("the store holds %d bytes of the %d sent", st.Size, w.count.n)
	}
	m.End = time.Now().UTC().Truncate(time.Second)
	m.Bytes, m.Keys, m.RDBVersion = w.count.n, scan.info.Keys, scan.info.Version
	m.SHA256 = w.sum()
	if err := objectstore.WriteManifest(ctx, cl, o.Store.Bucket, o.Key, m); err != nil {
		return m, fmt.Errorf("writing the manifest: %w", err)
	}
	return m, nil
}

type scanResult struct {
	info RDBInfo
	err  error
}

// watched reads a snapshot stream through: it counts the bytes, hashes them (SHA-256) and scans
// them as a snapshot (ScanRDB, through a pipe, in a goroutine), with no buffer of its own.
type watched struct {
	r       io.Reader
	hash    hash.Hash
	count   *counter
	pw      *io.PipeWriter
	scanned chan scanResult
}

func newWatched(src io.Reader, progress func(int64)) *watched {
	w := &watched{hash: sha256.New(), count: &counter{progress: progress, last: time.Now()}, scanned: make(chan scanResult, 1)}
	pr, pw := io.Pipe()
	w.pw = pw
	go func() {
		info, err := ScanRDB(pr)
		_, _ = io.Copy(io.Discard, pr) // the rest, when a module's value ended the scan
		w.scanned <- scanResult{info, err}
	}()
	w.r = io.TeeReader(src, io.MultiWriter(w.hash, w.count, pw))
	return w
}

func (w *watched) Read(p []byte) (int, error) { return w.r.Read(p) }

// finish ends the stream (with err, if reading it failed) and returns the scan's result.
func (w *watched) finish(err error) scanResult {
	w.pw.CloseWithError(err)
	return <-w.scanned
}

func (w *watched) sum() string { return hex.EncodeToString(w.hash.Sum(nil)) }
