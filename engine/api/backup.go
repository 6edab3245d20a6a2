package api

import (
	"fmt"
	"strings"

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

// BackupCRDName is the name of the ManagedCacheBackup CustomResourceDefinition.
const BackupCRDName = "managedcachebackups.cache.example.com"

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

// BackupJobName is the name of the Job that takes the backup of that name (at most 63
// characters: the Job's pods carry it in a label).
func BackupJobName(backup string) string {
	name := "backup-" + backup
	if len(name) > 63 {
		name = strings.TrimRight(name[:54], "-.") + fmt.Sprintf("-%08x", fnv32(backup))
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
