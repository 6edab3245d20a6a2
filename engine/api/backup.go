package api

import (
	"fmt"
	"strings"

	"github.com/robfig/cron/v3"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The ManagedCacheBackup API: one backup of one cache (spec.cache), taken by a Job.
var (
	// BackupKind is the ManagedCacheBackup kind.
	BackupKind = "ManagedCacheBackup"
	// BackupResource is the ManagedCacheBackup resource.
	BackupResource = GroupVersion.WithResource("managedcachebackups")
	// JobResource is the resource of the Jobs that take backups.
	JobResource = schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}
)

// The phases of a ManagedCacheBackup (status.phase).
const (
	BackupPending   = "Pending"
	BackupRunning   = "Running"
	BackupCompleted = "Completed"
	BackupFailed    = "Failed"
)

// LabelBackupCache is the label, on a ManagedCacheBackup and its Job, naming the cache it backs
// up; LabelScheduled ("true") marks a backup the schedule created.
const (
	LabelBackupCache = "cache.example.com/cache"
	LabelScheduled   = "cache.example.com/scheduled"
)

// The keys of a store's Secret (spec.backup.store.secretName).
const (
	StoreEndpoint  = "endpoint"
	StoreBucket    = "bucket"
	StoreAccessKey = "accessKeyID"
	StoreSecretKey = "secretAccessKey"
	StoreRegion    = "region"
	StorePrefix    = "prefix"
	StoreCABundle  = "caBundle"
)

// StoreEnv maps a store Secret's keys to the environment variables the backup Job and the restore
// container read them from (the templates map each through a secretKeyRef).
var StoreEnv = map[string]string{
	StoreEndpoint: "STORE_ENDPOINT", StoreBucket: "STORE_BUCKET", StorePrefix: "STORE_PREFIX",
	StoreRegion: "STORE_REGION", StoreAccessKey: "STORE_ACCESS_KEY_ID",
	StoreSecretKey: "STORE_SECRET_ACCESS_KEY", StoreCABundle: "STORE_CA_BUNDLE",
}

// BackupJobName is the name of the Job that takes the backup of that name (at most 63
// characters: the Job's pods carry it in a label).
func BackupJobName(backup string) string {
	return shortened("backup-"+backup, backup) // the hash of the backup's name, as since the first release
}

// BackupLabelValue is the value of the backup's label on its Job and pods: its name, or, past the
// 63 characters a label value may hold (a scheduled backup of a cache named with 48 or more
// characters: <cache>-<date>-<time>), its first 54 and a hash of the whole.
func BackupLabelValue(backup string) string {
	return shortened(backup, backup)
}

// shortened is name when it fits in 63 characters, else its first 54 (without a trailing '-' or
// '.') and '-' and eight hexadecimal digits of a hash of of: distinct names stay distinct.
func shortened(name, of string) string {
	if len(name) > 63 {
		name = strings.TrimRight(name[:54], "-.") + fmt.Sprintf("-%08x", fnv32(of))
	}
	return name
}

func fnv32(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

// RestoreMember is the member a restore fills: the first, ordinal 0.
func RestoreMember(cacheName string) string { return cacheName + "-0" }

// RestoreStatus is a cache's status.restore.
type RestoreStatus struct {
	Phase          string `json:"phase,omitempty"`
	Location       string `json:"location,omitempty"`
	StoreSecret    string `json:"storeSecret,omitempty"`
	Path           string `json:"path,omitempty"`
	Checksum       string `json:"checksum,omitempty"`
	Bytes          int64  `json:"bytes,omitempty"`
	Keys           int64  `json:"keys,omitempty"`
	Version        string `json:"version,omitempty"`
	Refused        string `json:"refused,omitempty"`
	CompletionTime string `json:"completionTime,omitempty"`
	Message        string `json:"message,omitempty"`
	// Shards: a sharded cache restored from a sharded backup, one object per shard (Path is then
	// the backup's folder).
	Shards []RestoreShard `json:"shards,omitempty"`
}

// RestoreShard is one shard's object in status.restore.shards: its first member loads it, and
// the shard serves the slots it served in the backup.
type RestoreShard struct {
	Shard    int64  `json:"shard"`
	Slots    string `json:"slots"`
	Path     string `json:"path"`
	Checksum string `json:"checksum,omitempty"`
	Bytes    int64  `json:"bytes,omitempty"`
	Keys     int64  `json:"keys,omitempty"`
}

// The phases of a restore (status.restore.phase).
const (
	RestoreRunning   = "Running"
	RestoreCompleted = "Completed"
	RestoreFailed    = "Failed"
)

// RestoreStateKey is the key of a restoring cache's ConfigMap that says whether its restore
// completed; RestoreDone is its value once it has (the restore container then does nothing).
const (
	RestoreStateKey = "restore"
	RestoreDone     = "completed"
)

// Resolved says the source is known: the first member's init container can be rendered.
func (r *RestoreStatus) Resolved() bool { return r != nil && (r.Path != "" || r.Refused != "") }

// BackupStatus is a cache's status.backup.
type BackupStatus struct {
	LastBackupTime   string `json:"lastBackupTime,omitempty"`
	LastBackup       string `json:"lastBackup,omitempty"`
	NextScheduleTime string `json:"nextScheduleTime,omitempty"`
}

// BackupStatusOf reads status.backup of a cache (nil: none).
func BackupStatusOf(mc *unstructured.Unstructured) *BackupStatus {
	return statusField[BackupStatus](mc, "backup")
}

// RestoreStatusOf reads status.restore of a cache (nil: none).
func RestoreStatusOf(mc *unstructured.Unstructured) *RestoreStatus {
	return statusField[RestoreStatus](mc, "restore")
}

// ParseSchedule parses spec.backup.schedule: five cron fields, in UTC, or a descriptor (@hourly,
// @daily, @every 6h).
func ParseSchedule(s string) (cron.Schedule, error) {
	sched, err := cron.ParseStandard(s)
	if err != nil {
		return nil, fmt.Errorf("spec.backup.schedule %q does not parse: %v (five cron fields such as \"0 3 * * *\", or @hourly, @daily, @every 6h)", s, err)
	}
	return sched, nil
}
