// Package snapshot_test runs the backup and restore commands' code (package engine/snapshot)
// against the real programs: Debian's redis-server and the local cluster's object store
// (bin/cluster/objectstore), without a cluster. It runs with the end-to-end tests (CACHE_E2E=1),
// after make cluster-bin has built the store.
package snapshot_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/redis/go-redis/v9"

	"example.com/cache-operator/e2e/framework"
	"example.com/cache-operator/engine/dataset"
	"example.com/cache-operator/engine/member"
	"example.com/cache-operator/engine/objectstore"
	"example.com/cache-operator/engine/snapshot"
)

// These tests run the real programs: redis-server (Debian's, make prereqs) and the local
// cluster's object store (bin/cluster/objectstore, make cluster-bin; make test builds it first).

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func requireE2E(t *testing.T) {
	t.Helper()
	if os.Getenv("CACHE_E2E") != "1" {
		t.Skip("end-to-end test: run with `make test-e2e` (CACHE_E2E=1)")
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatal("no redis-server (make prereqs installs it)")
	}
}

// startProcess runs cmd until the test ends and waits until addr accepts connections.
func startProcess(t *testing.T, addr string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not listen on %s within 20 s: %v\n%s", name, addr, err, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

const internalPassword = "internal-secret-for-tests"

// startServer runs redis-server with the internal user's rules of templates/_helpers.tpl (the
// commands a backup sends) and appendonly, in dir, then the extra lines (later lines win).
func startServer(t *testing.T, dir string, replicaOf int, extra ...string) (string, *redis.Client) {
	t.Helper()
	port := freePort(t)
	conf := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nappendonly yes\nsave \"\"\n"+
		"user internal on >%s resetkeys resetchannels -@all +ping +info +role +psync +sync +replconf\n"+
		"masteruser internal\nmasterauth %s\n", port, dir, internalPassword, internalPassword)
	if replicaOf > 0 {
		conf += fmt.Sprintf("replicaof 127.0.0.1 %d\n", replicaOf)
	}
	for _, l := range extra {
		conf += l + "\n"
	}
	path := filepath.Join(dir, "redis.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	startProcess(t, addr, "redis-server", path)
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	return addr, c
}

func startStore(t *testing.T) objectstore.Store {
	t.Helper()
	bin := filepath.Join(framework.RepoRoot(), "bin", "cluster", "objectstore")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("no %s (make cluster-bin builds it)", bin)
	}
	port := freePort(t)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	cmd := exec.Command(bin, "--port", addr, "--quiet", "posix", t.TempDir())
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY=testaccess", "ROOT_SECRET_KEY=testsecret-0123456789")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	s := objectstore.Store{Endpoint: "http://" + addr, Bucket: "backups", AccessKeyID: "testaccess", SecretAccessKey: "testsecret-0123456789"}
	cl, err := s.Client()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := cl.MakeBucket(context.Background(), s.Bucket, minio.MakeBucketOptions{})
		if err == nil {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("the object store did not take a bucket within 20 s: %v\n%s", err, out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// fill writes n keys of every type the reader skips (strings, hashes, lists, sets, sorted sets,
// streams with a consumer group), some with a TTL.
func fill(t *testing.T, c *redis.Client, n int) {
	t.Helper()
	ctx := context.Background()
	pipe := c.Pipeline()
	for i := 0; i < n; i++ {
		k := fmt.Sprintf("k:%06d", i)
		switch i % 7 {
		case 0:
			pipe.Set(ctx, k, strings.Repeat("v", i%300), 0)
		case 1:
			pipe.HSet(ctx, k, "a", i, "b", strings.Repeat("x", 100))
		case 2:
			pipe.RPush(ctx, k, i, i+1, "three")
		case 3:
			pipe.SAdd(ctx, k, i, "m")
		case 4:
			pipe.ZAdd(ctx, k, redis.Z{Score: float64(i) / 3, Member: "m"}, redis.Z{Score: 1, Member: "n"})
		case 5:
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: k, Values: []interface{}{"f", i}})
			pipe.XGroupCreate(ctx, k, "g", "0")
		case 6:
			pipe.Set(ctx, k, i, time.Hour)
		}
		if i%1000 == 999 {
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	// Large values: LZF-compressed strings, and a big list (quicklist) and hash (hashtable).
	big := make([]interface{}, 0, 2000)
	for i := 0; i < 1000; i++ {
		big = append(big, fmt.Sprintf("f%d", i), strings.Repeat("y", 70))
	}
	if err := c.HSet(ctx, "big:hash", big...).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.RPush(ctx, "big:list", big...).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "big:string", strings.Repeat("compressible ", 10000), 0).Err(); err != nil {
		t.Fatal(err)
	}
}

func waitInSync(t *testing.T, primary, replica *redis.Client) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		p, _ := primary.Info(ctx, "replication").Result()
		r, _ := replica.Info(ctx, "replication").Result()
		po, ro := infoField(p, "master_repl_offset"), infoField(r, "master_repl_offset")
		if strings.Contains(r, "master_link_status:up") && po != "" && po == ro {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica did not catch up within 30 s: primary offset %s, replica %s", po, ro)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func infoField(info, name string) string {
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), name+":"); ok {
			return v
		}
	}
	return ""
}

// backupTo backs up the server at addr to the object name in store, as the backup Job does.
func backupTo(ctx context.Context, t *testing.T, store objectstore.Store, addr, name, memberName string) (string, objectstore.Manifest) {
	t.Helper()
	key := store.ObjectKey("shop", "sessions", name)
	m, err := snapshot.Backup(ctx, snapshot.BackupOptions{
		Source: snapshot.Source{Addr: addr, User: "internal", Password: internalPassword},
		Store:  store, Key: key,
		Manifest: objectstore.Manifest{Namespace: "shop", Cache: "sessions", Backup: name, Member: memberName},
	})
	if err != nil {
		t.Fatalf("backup: %v", err)
	}
	return key, m
}

// restoreDirs restores the backup m of key into n empty directories, as n members' restore
// containers do, and checks each holds the snapshot with the backup's keys and checksum.
func restoreDirs(ctx context.Context, t *testing.T, store objectstore.Store, key string, m objectstore.Manifest, n int) []string {
	t.Helper()
	var dirs []string
	for i := 0; i < n; i++ {
		dir := t.TempDir()
		res, err := snapshot.Restore(ctx, snapshot.RestoreOptions{Store: store, Key: key, DataDir: dir, SHA256: m.SHA256, Bytes: m.Bytes})
		if err != nil {
			t.Fatalf("restore: %v", err)
		}
		if res.Keys != m.Keys || res.SHA256 != m.SHA256 {
			t.Errorf("restored %+v; want %d keys, sha256 %s", res, m.Keys, m.SHA256)
		}
		if _, err := os.Stat(filepath.Join(dir, snapshot.Snapshot)); err != nil {
			t.Fatalf("no snapshot in the restored directory: %v", err)
		}
		dirs = append(dirs, dir)
	}
	return dirs
}

func TestBackupFromReplicaAndRestore(t *testing.T) {
	requireE2E(t)
	store := startStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pAddr, primary := startServer(t, t.TempDir(), 0)
	pPort, _ := strconv.Atoi(strings.TrimPrefix(pAddr, "127.0.0.1:"))
	rAddr, replica := startServer(t, t.TempDir(), pPort)
	fill(t, primary, 20000)
	waitInSync(t, primary, replica)
	want, err := dataset.Of(ctx, primary)
	if err != nil {
		t.Fatal(err)
	}
	forksBefore := infoField(primary.Info(ctx, "stats").Val(), "total_forks")

	key, m := backupTo(ctx, t, store, rAddr, "b1", "sessions-1")
	t.Logf("backup: %d bytes, %d keys, RDB v%d, %s %s, sha256 %s", m.Bytes, m.Keys, m.RDBVersion, m.Engine, m.Version, m.SHA256)
	if m.Keys != want.Keys || m.Bytes == 0 || len(m.SHA256) != 64 || m.Engine != "redis" || m.Version == "" || m.RDBVersion < 9 {
		t.Errorf("manifest %+v; want %d keys, bytes, a checksum, the engine and version", m, want.Keys)
	}
	if f := infoField(primary.Info(ctx, "stats").Val(), "total_forks"); f != forksBefore {
		t.Errorf("the primary forked for a backup from its replica: total_forks %s -> %s", forksBefore, f)
	}
	cl, _ := store.Client()
	read, err := objectstore.ReadManifest(ctx, cl, store.Bucket, key)
	if err != nil || read.SHA256 != m.SHA256 || read.Keys != m.Keys {
		t.Fatalf("manifest in the bucket %+v (%v); want %+v", read, err, m)
	}

	// Restore into three empty directories, as a restored cache's members do. Each server starts
	// as the member's start script starts it (templates/statefulset.yaml): appendonly off, so
	// that it loads the snapshot with the replication history it records; the first as the
	// primary, the others as its replicas. Each holds the source's data, the replicas resume
	// from the primary with partial resyncs (no full copy), and the AOF then turned on (the
	// operator's member pass) is written and loaded again at a restart.
	dirs := restoreDirs(ctx, t, store, key, m, 3)
	rpAddr, restored := startServer(t, dirs[0], 0, "appendonly no")
	rpPort, _ := strconv.Atoi(strings.TrimPrefix(rpAddr, "127.0.0.1:"))
	waitLoaded(t, restored)
	var replicas []*redis.Client
	for _, dir := range dirs[1:] {
		_, r := startServer(t, dir, rpPort, "appendonly no")
		replicas = append(replicas, r)
	}
	for _, r := range replicas {
		waitInSync(t, restored, r)
	}
	stats := restored.Info(ctx, "stats").Val()
	if full, partial := infoField(stats, "sync_full"), infoField(stats, "sync_partial_ok"); full != "0" || partial != "2" {
		t.Errorf("the restored primary served %s full syncs and %s partial ones; want 0 and 2 (its replicas restored the same snapshot)", full, partial)
	}
	for i, c := range append([]*redis.Client{restored}, replicas...) {
		got, err := dataset.Of(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("restored member %d holds %v; the source held %v", i, got, want)
		}
		if err := member.EnableAOF(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := restored.Set(ctx, "after-restore", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 30*time.Second, "the restored primary's AOF written", func() (bool, string, error) {
		r, err := member.ObserveWith(ctx, restored)
		return err == nil && !r.AOFOff && !r.AOFRewriting, fmt.Sprintf("%+v", r), err
	})
	if _, err := os.Stat(filepath.Join(dirs[0], snapshot.AOFDir, snapshot.AOFManifest)); err != nil {
		t.Errorf("no AOF manifest once the AOF is on: %v", err)
	}
	// A restart with the AOF on (the member's next start: a manifest, appendonly yes) loads the
	// restored data and the write taken after the restore.
	want1, err := dataset.Of(ctx, restored)
	if err != nil {
		t.Fatal(err)
	}
	if err := restored.Do(ctx, "SHUTDOWN", "NOSAVE").Err(); err == nil {
		t.Fatal("SHUTDOWN answered; want the connection closed")
	}
	if err := os.Remove(filepath.Join(dirs[0], snapshot.Snapshot)); err != nil {
		t.Fatal(err) // as the start script does once the AOF holds the data
	}
	_, again := startServer(t, dirs[0], 0)
	waitLoaded(t, again)
	if got, err := dataset.Of(ctx, again); err != nil || got != want1 || got.Keys != want.Keys+1 {
		t.Errorf("after a restart from the AOF: %v (%v); want %v, the restored keys and one more", got, err, want1)
	}
	t.Logf("source %v; restored into three members, two partial resyncs; %v after a restart from the AOF", want, want1)
	// Again: the marker says it is done, and nothing is touched.
	if res, err := snapshot.Restore(ctx, snapshot.RestoreOptions{Store: store, Key: key, DataDir: dirs[0], SHA256: m.SHA256}); err != nil || !res.Skipped {
		t.Errorf("a second restore: %+v, %v; want it skipped", res, err)
	}
}

func waitLoaded(t *testing.T, c *redis.Client) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := c.Ping(context.Background()).Err()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the restored server did not load within 30 s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A corrupt or truncated object, or one the manifest does not vouch for, is refused, and the data
// directory stays empty: the server would start empty, never as if restored.
func TestRestoreRefusesCorruptAndTruncatedObjects(t *testing.T) {
	requireE2E(t)
	store := startStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, primary := startServer(t, t.TempDir(), 0)
	pAddr := primary.Options().Addr
	fill(t, primary, 3000)
	key := store.ObjectKey("shop", "sessions", "good")
	m, err := snapshot.Backup(ctx, snapshot.BackupOptions{Source: snapshot.Source{Addr: pAddr, User: "internal", Password: internalPassword}, Store: store, Key: key,
		Manifest: objectstore.Manifest{Namespace: "shop", Cache: "sessions", Backup: "good", Member: "sessions-0", FromPrimary: true}})
	if err != nil {
		t.Fatal(err)
	}
	cl, _ := store.Client()
	obj, err := cl.GetObject(ctx, store.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var data bytes.Buffer
	if _, err := data.ReadFrom(obj); err != nil {
		t.Fatal(err)
	}
	good := data.Bytes()
	flipped := append([]byte(nil), good...)
	flipped[len(flipped)/2] ^= 0x01
	cases := []struct {
		name, want string
		body       []byte
		sha        string
	}{
		{"flipped bit", "is corrupt", flipped, m.SHA256},
		{"truncated", "truncated", good[:len(good)-100], m.SHA256},
		{"wrong checksum given", "differs from the backup's", good, strings.Repeat("0", 64)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bad := store.ObjectKey("shop", "sessions", strings.ReplaceAll(c.name, " ", "-"))
			if _, err := cl.PutObject(ctx, store.Bucket, bad, bytes.NewReader(c.body), int64(len(c.body)), minio.PutObjectOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := objectstore.WriteManifest(ctx, cl, store.Bucket, bad, m); err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			_, err := snapshot.Restore(ctx, snapshot.RestoreOptions{Store: store, Key: bad, DataDir: dir, SHA256: c.sha, Bytes: m.Bytes})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("restore of a %s object: %v; want an error saying %q", c.name, err, c.want)
			}
			t.Logf("refused: %v", err)
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("the data directory holds %d entries after a refused restore; want none", len(entries))
			}
		})
	}
	// A missing object.
	if _, err := snapshot.Restore(ctx, snapshot.RestoreOptions{Store: store, Key: "nope.rdb", DataDir: t.TempDir(), SHA256: m.SHA256}); err == nil {
		t.Error("a restore of a missing object succeeded")
	}
}

// A restored primary lost before its AOF's base is written: the failure the member's start script
// guards against (templates/statefulset.yaml: a member holding a bare snapshot starts as the
// primary only before it was elected). Two members restored from one backup, the first serving as
// the primary with its AOF turned on and its rewrite slowed (rdb-key-save-delay) so that the
// window stays open; writes acknowledged by it and by its replica (WAIT) are recorded; it is
// killed inside the window. Its volume then holds the bare snapshot alone, without those writes:
// started as the primary from it, it would have lost every one. The replica is promoted (the
// operator's failover), the lost member starts as a replica as its start script says, and every
// acknowledged write is counted on both.
func TestRestoredPrimaryLostBeforeItsAOF(t *testing.T) {
	requireE2E(t)
	store := startStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, source := startServer(t, t.TempDir(), 0)
	fill(t, source, 3000)
	key, m := backupTo(ctx, t, store, source.Options().Addr, "window", "sessions-0")
	dirs := restoreDirs(ctx, t, store, key, m, 2)
	// 3,000 keys at 3 ms each: the AOF's base takes about 9 s to write.
	pAddr, primary := startServer(t, dirs[0], 0, "appendonly no", "rdb-key-save-delay 3000")
	pPort, _ := strconv.Atoi(strings.TrimPrefix(pAddr, "127.0.0.1:"))
	waitLoaded(t, primary)
	_, replica := startServer(t, dirs[1], pPort, "appendonly no")
	waitInSync(t, primary, replica)
	if err := member.EnableAOF(ctx, primary); err != nil {
		t.Fatal(err)
	}
	var acked []string
	for i := 0; i < 200; i++ {
		k := fmt.Sprintf("after:%03d", i)
		if err := primary.Set(ctx, k, i, 0).Err(); err == nil {
			acked = append(acked, k)
		}
	}
	if n, err := primary.Wait(ctx, 1, 5000).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT: %d replicas acknowledged (%v); want 1", n, err)
	}
	r, err := member.ObserveWith(ctx, primary)
	if err != nil || !r.AOFRewriting {
		t.Fatalf("the AOF's base is no longer being written (%+v, %v): the window this test aims at closed before the kill", r, err)
	}
	pid, _ := strconv.Atoi(infoField(primary.Info(ctx, "server").Val(), "process_id"))
	if pid <= 0 {
		t.Fatal("no process_id in INFO server")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dirs[0], snapshot.AOFDir, snapshot.AOFManifest)); err == nil {
		t.Fatal("the killed primary has an AOF manifest: the window closed before the kill")
	}
	// What the bare snapshot holds: the backup, none of the writes taken since.
	snap, err := os.ReadFile(filepath.Join(dirs[0], snapshot.Snapshot))
	if err != nil {
		t.Fatal(err)
	}
	copyDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(copyDir, snapshot.Snapshot), snap, 0o600); err != nil {
		t.Fatal(err)
	}
	_, fromSnapshot := startServer(t, copyDir, 0, "appendonly no")
	waitLoaded(t, fromSnapshot)
	if n := fromSnapshot.Exists(ctx, acked...).Val(); n != 0 {
		t.Errorf("the bare snapshot holds %d of the writes acknowledged after the restore; want none (it is the backup)", n)
	}
	// The failover, then the lost member back as a replica of the new primary.
	if err := member.Promote(ctx, replica); err != nil {
		t.Fatal(err)
	}
	rPort, _ := strconv.Atoi(strings.TrimPrefix(replica.Options().Addr, "127.0.0.1:"))
	_, back := startServer(t, dirs[0], rPort, "appendonly no")
	waitInSync(t, replica, back)
	for name, c := range map[string]*redis.Client{"the promoted replica": replica, "the lost primary, back as a replica": back} {
		if n := c.Exists(ctx, acked...).Val(); n != int64(len(acked)) {
			t.Errorf("%s holds %d of %d acknowledged writes", name, n, len(acked))
		}
	}
	t.Logf("killed inside the AOF's first rewrite: %d writes acknowledged, %d on the promoted replica, %d on the lost member back as a replica, 0 in its bare snapshot",
		len(acked), replica.Exists(ctx, acked...).Val(), back.Exists(ctx, acked...).Val())
}
