package api

// The reasons of the Events the operator emits, declared once and explained in Events (the API
// page's table is generated from it). Some are also conditions' reasons (conditions.go).
const (
	EventCreated             = "Created"
	EventUpdated             = "Updated"
	EventReconciled          = "Reconciled"
	EventFailoverStarted     = "FailoverStarted"
	EventFailoverCompleted   = "FailoverCompleted"
	EventSwitchoverStarted   = "SwitchoverStarted"
	EventSwitchoverCompleted = "SwitchoverCompleted"
	EventSwitchoverFailed    = "SwitchoverFailed"
	EventWritesDiscarded     = "WritesDiscarded"
	// EventFormerPrimaryEmptied: a sharded cache's member that served no slot and held keys no
	// client reached was emptied so that it follows its shard's primary.
	EventFormerPrimaryEmptied = "FormerPrimaryEmptied"
	// EventRestartingMember: a sharded cache's member in a state no command leaves is started
	// again (its pod deleted, its volume kept).
	EventRestartingMember   = "RestartingMember"
	EventDataDiscarded      = "DataDiscarded"
	EventReplacingMember    = "ReplacingStuckMember"
	EventStorageGrowing     = "StorageGrowing"
	EventStorageGrown       = "StorageGrown"
	EventResumed            = "Resumed"
	EventRestoreStarted     = "RestoreStarted"
	EventRestored           = "Restored"
	EventBackupScheduled    = "BackupScheduled"
	EventBackupStarted      = "BackupStarted"
	EventBackupCompleted    = "BackupCompleted"
	EventBackupFailed       = "BackupFailed"
	EventBackupDeleted      = "BackupDeleted"
	EventCertificateRenewed = "CertificateRenewed"
	EventCredentialsKept    = "CredentialsKept"
	// EventCredentialsRestored: the password Secret was gone; it was written back from the last
	// copy the operator saw, with the same passwords.
	EventCredentialsRestored = "CredentialsRestored"
	EventClaimOwned          = "VolumeClaimOwned"
	EventReshardStarted      = "ReshardStarted"
	EventReshardCompleted    = "ReshardCompleted"
	EventShardRemoved        = "ShardRemoved"
	EventShardFailedOver     = "ShardFailedOver"
)

// EventDoc is one Event reason: its type (Normal or Warning), on what, and what it means.
type EventDoc struct {
	Reason, Type, Meaning string
}

// Events is the catalogue of the Events the operator emits on a ManagedCache (and, for the
// backups', on the ManagedCacheBackup too).
var Events = []EventDoc{
	{EventCreated, "Normal", "a reconcile created children (named in the message)"},
	{EventUpdated, "Normal", "a reconcile updated children (named, with the fields that changed)"},
	{EventReconciled, "Normal", "a reconcile created some children and updated others"},
	{FailedReason("<Kind>"), "Warning", "the API server refused a child of that kind; the message has its answer"},
	{ReasonInvalidSpec, "Warning", "the spec cannot be rendered as it is"},
	{ReasonRenderFailed, "Warning", "a template did not render"},
	{EventFailoverStarted, "Warning", "the primary is gone; a replica is being promoted (the message names both and the lag)"},
	{EventFailoverCompleted, "Normal", "the new primary takes writes (the message gives the time it took)"},
	{EventSwitchoverStarted, "Normal", "a planned handover started"},
	{EventSwitchoverCompleted, "Normal", "the handover finished"},
	{EventSwitchoverFailed, "Warning", "the handover could not be done; the primary stays"},
	{EventWritesDiscarded, "Warning", "a deposed primary had acknowledged writes that no other member had; the bytes dropped when it rejoined (or that they could not be measured)"},
	{EventRestartingMember, "Warning", "a sharded cache's member whose cluster flags said master while its replication followed a primary, holding keys (a state no command leaves), had its pod deleted so that its server starts again on the same volume, to be emptied and attached"},
	{EventFormerPrimaryEmptied, "Warning", "a sharded cache's former primary, left a master with keys and no slots, was emptied so that it follows its shard's primary (its keys' slots were another member's; what it took that its successor never had is what WritesDiscarded counts)"},
	{ReasonDataLost, "Warning", "every member came back empty after the cache held keys"},
	{EventDataDiscarded, "Warning", "a version change the data cannot survive, let through by cache.example.com/allow-data-loss: every member restarted empty"},
	{ReasonOperatorRefused, "Warning", "the members refuse the operator's commands"},
	{EventReplacingMember, "Warning", "a member stuck on a failing revision is deleted so that it starts on the current one"},
	{ReasonPasswordRotated, "Normal", "a password rotation finished"},
	{ReasonPasswordRejected, "Warning", "the Secret's password cannot be used; the accepted one is kept"},
	{EventStorageGrowing, "Normal", "the volumes are being grown"},
	{EventStorageGrown, "Normal", "every volume has its new size"},
	{ReasonExpansionNotAllowed, "Warning", "a storage change refused: the class does not allow expansion"},
	{ReasonChangeImmutable, "Warning", "a storage change refused: the cluster cannot make it"},
	{ReasonHibernating, "Normal", "the members are being stopped"},
	{ReasonHibernated, "Normal", "every member is stopped"},
	{ReasonResuming, "Normal", "the members are starting again"},
	{EventResumed, "Normal", "the cache is Ready again after hibernation"},
	{ReasonRestorePending, "Warning", "spec.restore cannot start yet (the message says why)"},
	{EventRestoreStarted, "Normal", "the members are being filled from the backup"},
	{EventRestored, "Normal", "the restore finished (keys and bytes)"},
	{ReasonRestoreFailed, "Warning", "the restore cannot be done"},
	{EventBackupScheduled, "Normal", "the schedule created a ManagedCacheBackup"},
	{EventBackupStarted, "Normal", "a backup's Job started"},
	{EventBackupCompleted, "Normal", "a backup is in the bucket (bytes, keys)"},
	{EventBackupFailed, "Warning", "a backup failed"},
	{EventBackupDeleted, "Normal", "retention deleted an old backup and its object"},
	{ReasonStoreSecretInvalid, "Warning", "backups: the store's Secret is missing or lacks a key"},
	{ReasonStoreUnreachable, "Warning", "backups: the store does not answer"},
	{ReasonBucketNotFound, "Warning", "backups: the bucket does not exist"},
	{ReasonScheduleInvalid, "Warning", "backups: the schedule does not parse"},
	{ReasonCleanupFailed, "Warning", "the cache's backups could not be deleted with it"},
	{EventCertificateRenewed, "Normal", "a TLS cache's members' certificate was renewed"},
	{EventCredentialsKept, "Warning", "the password Secret was deleted while the cache uses it; it is kept"},
	{EventCredentialsRestored, "Warning", "the password Secret was gone; it was written back with the same passwords"},
	{EventClaimOwned, "Normal", "a volume claim of the cache was given the cache's owner reference"},
	{EventReshardStarted, "Normal", "a sharded cache's slots began moving to reach spec.shards (or went on after an operator restart; the message says which)"},
	{EventReshardCompleted, "Normal", "every shard serves its share of the slots (slots and keys moved, time)"},
	{EventShardFailedOver, "Warning", "a sharded cache's cluster elected a replica in place of a primary that stopped answering (the message names both, and the replica's lag at the last poll that read both)"},
	{EventShardRemoved, "Normal", "a shard past spec.shards, which served no slot and held no key, was removed (its StatefulSet, disruption budget and volume claims)"},
}
