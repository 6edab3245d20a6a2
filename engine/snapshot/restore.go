package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/minio/minio-go/v7"

	"example.com/cache-operator/engine/objectstore"
)

// The data directory's layout. A member persists through its AOF (appendonly yes, Redis 7's
// multi-part AOF: a manifest naming a base file and increments). A restore leaves the snapshot as
// Snapshot (dump.rdb) beside no AOF: the member's start script then starts the server with
// appendonly off, which loads the snapshot together with the replication ID and offset recorded
// in it (an AOF's base would load the data without them), and the operator turns the AOF on once
// it is loaded (templates/statefulset.yaml). Members restored from the same snapshot share that
// history, so that each replica resumes from the restored primary with a partial resync instead
// of a full copy of the dataset.
const (
	AOFDir      = "appendonlydir"
	AOFManifest = "appendonly.aof.manifest"
	Snapshot    = "dump.rdb"
	// RestoredMarker, in the data directory, records the restore that filled it (JSON), so that
	// a restarted member does not restore again.
	RestoredMarker = "restored-from.json"
)

// RestoreOptions say what to restore where.
type RestoreOptions struct {
	Store objectstore.Store
	// Key is the object's key.
	Key string
	// DataDir is the member's data directory.
	DataDir string
	// SHA256 and Bytes are what the backup recorded (ManagedCacheBackup status); empty, the
	// manifest beside the object says.
	SHA256 string
	Bytes  int64
	// Progress, when set, is called with the bytes read so far.
	Progress func(bytes int64)
}

// Restored is what a restore did, as the marker records it.
type Restored struct {
	Location string `json:"location"`
	SHA256   string `json:"sha256"`
	Bytes    int64  `json:"bytes"`
	Keys     int64  `json:"keys"`
	// Skipped: the directory already held this restore.
	Skipped bool `json:"-"`
}

// Restore fills an empty data directory with the object, as the snapshot the server loads. The
// object is streamed to a temporary folder while its SHA-256 is computed and its snapshot read
// to the end; only an object whose checksum and size match what the backup recorded, and whose
// snapshot is whole, is moved into place. A directory that already holds data is never touched.
func Restore(ctx context.Context, o RestoreOptions) (Restored, error) {
	loc := o.Store.Location(o.Key)
	var done Restored
	if b, err := os.ReadFile(filepath.Join(o.DataDir, RestoredMarker)); err == nil {
		if json.Unmarshal(b, &done) == nil && done.Location == loc {
			done.Skipped = true
			return done, nil
		}
		return done, fmt.Errorf("the data directory was restored from another backup (%s); not restoring %s over it", done.Location, loc)
	}
	for _, existing := range []string{AOFDir, Snapshot} {
		if _, err := os.Stat(filepath.Join(o.DataDir, existing)); err == nil {
			return done, fmt.Errorf("the data directory already holds data (%s); not restoring over it", existing)
		}
	}
	cl, err := o.Store.Client()
	if err != nil {
		return done, err
	}
	if err := objectstore.Check(ctx, cl, o.Store.Bucket); err != nil {
		return done, err
	}
	man, err := objectstore.ReadManifest(ctx, cl, o.Store.Bucket, o.Key)
	switch {
	case err != nil && o.SHA256 == "":
		return done, fmt.Errorf("no checksum to verify %s against: %w", loc, err)
	case err == nil && o.SHA256 != "" && man.SHA256 != o.SHA256:
		return done, fmt.Errorf("the manifest's checksum %s differs from the backup's %s", man.SHA256, o.SHA256)
	}
	want, wantBytes := o.SHA256, o.Bytes
	if want == "" {
		want, wantBytes = man.SHA256, man.Bytes
	}
	obj, err := cl.GetObject(ctx, o.Store.Bucket, o.Key, minio.GetObjectOptions{})
	if err != nil {
		return done, fmt.Errorf("reading %s: %w", loc, err)
	}
	defer obj.Close()

	tmp := filepath.Join(o.DataDir, ".restore")
	if err := os.RemoveAll(tmp); err != nil {
		return done, err
	}
	if err := os.MkdirAll(tmp, 0o750); err != nil {
		return done, err
	}
	f, err := os.OpenFile(filepath.Join(tmp, Snapshot), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o640)
	if err != nil {
		return done, err
	}
	w := newWatched(obj, o.Progress)
	_, err = io.Copy(f, w)
	scan := w.finish(err)
	count := w.count
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	got := w.sum()
	var resp minio.ErrorResponse
	switch {
	case errors.As(err, &resp) && resp.Code == "NoSuchKey":
		err = fmt.Errorf("%s does not exist", loc)
	case err != nil:
		err = fmt.Errorf("reading %s after %d bytes: %w", loc, count.n, err)
	case wantBytes > 0 && count.n != wantBytes:
		err = fmt.Errorf("%s is truncated or padded: %d bytes, the backup recorded %d", loc, count.n, wantBytes)
	case got != want:
		err = fmt.Errorf("%s is corrupt: its SHA-256 is %s, the backup recorded %s", loc, got, want)
	case scan.err != nil:
		err = fmt.Errorf("%s is not a whole snapshot: %w", loc, scan.err)
	}
	if err != nil {
		_ = os.RemoveAll(tmp)
		return done, err
	}
	if err := os.Rename(filepath.Join(tmp, Snapshot), filepath.Join(o.DataDir, Snapshot)); err != nil {
		return done, err
	}
	if err := os.Remove(tmp); err != nil {
		return done, err
	}
	done = Restored{Location: loc, SHA256: got, Bytes: count.n, Keys: scan.info.Keys}
	b, _ := json.Marshal(done)
	if err := os.WriteFile(filepath.Join(o.DataDir, RestoredMarker), b, 0o640); err != nil {
		return done, err
	}
	return done, syncDir(o.DataDir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
