package snapshot

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/objectstore"
)

// The environment of the backup Job and the restore container (templates/job-backup.yaml and
// templates/statefulset.yaml). The store's settings come as api.StoreEnv.
const (
	EnvMemberAddr       = "MEMBER_ADDR"   // host:port of the member to back up
	EnvMember           = "MEMBER"        // its pod
	EnvFromPrimary      = "FROM_PRIMARY"  // "true": the member is the primary
	EnvInternalUser     = "INTERNAL_USER" // the user that may PSYNC
	EnvPasswordFile     = "INTERNAL_PASSWORD_FILE"
	EnvTLSCAFile        = "TLS_CA_FILE" // set: the member serves TLS, signed by this bundle
	EnvNamespace        = "NAMESPACE"
	EnvCache            = "CACHE"
	EnvBackup           = "BACKUP"
	EnvObjectKey        = "OBJECT_KEY"
	EnvRateLimit        = "RATE_LIMIT_MIB" // the most MiB/s to read from the member (unset: no cap)
	EnvPodName          = "POD_NAME"       // the restore: the pod it runs in
	EnvRestoreMember    = "RESTORE_MEMBER" // the pod elected first, whose restore must succeed
	EnvDataDir          = "DATA_DIR"
	EnvExpectedSHA256   = "EXPECTED_SHA256"
	EnvExpectedBytes    = "EXPECTED_BYTES"
	EnvRefused          = "RESTORE_REFUSED" // set: the operator refused the restore, saying why
	EnvRestoreState     = "RESTORE_STATE"   // "completed": the cache's restore is done (the ConfigMap)
	EnvRestoreOnly      = "RESTORE_ONLY"    // "true": only RESTORE_MEMBER restores (a shard's first member)
	backupIdleTimeout   = 2 * time.Minute
	backupNice          = 10
	commandTotalTimeout = 6 * time.Hour
)

// BackupCommand is "cache-operator backup": it backs up MEMBER_ADDR to OBJECT_KEY in the store and
// prints the manifest (JSON) as its last line. Exit status 1 with the reason on stderr otherwise.
func BackupCommand(stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, commandTotalTimeout)
	defer cancel()
	fail := func(err error) int {
		fmt.Fprintf(stderr, "backup failed: %v\n", err)
		return 1
	}
	// The backup yields the CPU to the members it shares a node with (raising one's own niceness
	// needs no privilege).
	if err := syscall.Setpriority(syscall.PRIO_PROCESS, 0, backupNice); err != nil {
		fmt.Fprintf(stderr, "backup: could not lower its CPU priority: %v\n", err)
	}
	store, err := objectstore.FromEnv()
	if err != nil {
		return fail(fmt.Errorf("the store's Secret: %w", err))
	}
	src := Source{Addr: os.Getenv(EnvMemberAddr), User: os.Getenv(EnvInternalUser), IdleTimeout: backupIdleTimeout}
	pw, err := os.ReadFile(os.Getenv(EnvPasswordFile))
	if err != nil {
		return fail(fmt.Errorf("the internal password: %w", err))
	}
	src.Password = strings.TrimSpace(string(pw))
	if ca := os.Getenv(EnvTLSCAFile); ca != "" {
		if src.TLS, err = tlsConfig(ca, src.Addr); err != nil {
			return fail(err)
		}
	}
	m := objectstore.Manifest{
		Namespace: os.Getenv(EnvNamespace), Cache: os.Getenv(EnvCache), Backup: os.Getenv(EnvBackup),
		Member: os.Getenv(EnvMember), FromPrimary: os.Getenv(EnvFromPrimary) == "true",
	}
	key := os.Getenv(EnvObjectKey)
	var limit int64
	if v := os.Getenv(EnvRateLimit); v != "" {
		mib, err := strconv.Atoi(v)
		if err != nil || mib < 0 {
			return fail(fmt.Errorf("%s=%q: want a whole number of MiB/s", EnvRateLimit, v))
		}
		limit = int64(mib) << 20
	}
	fmt.Fprintf(stderr, "backup: streaming %s (%s) to %s (at most %s)\n", m.Member, src.Addr, store.Location(key), rateString(limit))
	m, err = Backup(ctx, BackupOptions{Source: src, Store: store, Key: key, Manifest: m, RateLimit: limit,
		Progress: func(n int64) { fmt.Fprintf(stderr, "backup: %d MiB sent\n", n>>20) }})
	if err != nil {
		return fail(err)
	}
	b, _ := json.Marshal(m)
	fmt.Fprintf(stderr, "backup: %d bytes, %d keys, sha256 %s, in %s\n", m.Bytes, m.Keys, m.SHA256, m.End.Sub(m.Start))
	fmt.Fprintln(stdout, string(b))
	return 0
}

func tlsConfig(caFile, addr string) (*tls.Config, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("the cache's CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no certificate", caFile)
	}
	host := addr
	if i := strings.LastIndex(addr, ":"); i > 0 {
		host = addr[:i]
	}
	return &tls.Config{RootCAs: pool, ServerName: host, MinVersion: tls.VersionTLS12}, nil
}

// RestoreCommand is "cache-operator restore", every member's init container while the cache's
// restore has not completed: it fills the empty data directory from OBJECT_KEY, verified, and
// does nothing in a member already restored, or once the restore completed. On RESTORE_MEMBER,
// the member elected first, exit status 1 with the reason on stderr (the container's termination
// message) when the operator refused the restore or the object is missing, corrupt or truncated:
// the server then never starts, so the cache never comes up empty as if restored. On any other
// member a restore that fails leaves the directory empty and exits 0: that member syncs from the
// primary instead (each member's own restore only spares the primary a full sync). With
// RESTORE_ONLY (a sharded cache's shard) no other member restores.
func RestoreCommand(stdout, stderr io.Writer) int {
	pod, member := os.Getenv(EnvPodName), os.Getenv(EnvRestoreMember)
	if os.Getenv(EnvRestoreState) == api.RestoreDone {
		fmt.Fprintf(stdout, "restore: the cache's restore completed before; %s starts from its volume, or syncs\n", pod)
		return 0
	}
	first := pod == member
	if !first && os.Getenv(EnvRestoreOnly) == "true" {
		// A sharded cache: a member holding keys is a node that claims their slots, so only the
		// shard's first member loads the shard's object; the others start empty and sync from it.
		fmt.Fprintf(stdout, "restore: %s loads the shard's object; %s starts empty and syncs from it\n", member, pod)
		return 0
	}
	fail := func(err error) int {
		if !first {
			fmt.Fprintf(stdout, "restore: not restored here (%v); %s syncs from the primary\n", err, pod)
			return 0
		}
		fmt.Fprintf(stderr, "restore failed: %v\n", err)
		return 1
	}
	if why := os.Getenv(EnvRefused); why != "" {
		return fail(fmt.Errorf("refused by the operator: %s", why))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, commandTotalTimeout)
	defer cancel()
	store, err := objectstore.FromEnv()
	if err != nil {
		return fail(fmt.Errorf("the store's Secret: %w", err))
	}
	o := RestoreOptions{Store: store, Key: os.Getenv(EnvObjectKey), DataDir: os.Getenv(EnvDataDir), SHA256: os.Getenv(EnvExpectedSHA256),
		Progress: func(n int64) { fmt.Fprintf(stdout, "restore: %d MiB read\n", n>>20) }}
	if b := os.Getenv(EnvExpectedBytes); b != "" {
		if o.Bytes, err = strconv.ParseInt(b, 10, 64); err != nil {
			return fail(fmt.Errorf("%s: %w", EnvExpectedBytes, err))
		}
	}
	start := time.Now()
	res, err := Restore(ctx, o)
	if err != nil {
		return fail(err)
	}
	if res.Skipped {
		fmt.Fprintf(stdout, "restore: the data directory already holds %s\n", res.Location)
		return 0
	}
	fmt.Fprintf(stdout, "restore: %s verified and in place: %d bytes, %d keys, sha256 %s, in %s\n",
		res.Location, res.Bytes, res.Keys, res.SHA256, time.Since(start).Round(time.Millisecond))
	return 0
}
