package api

// Every condition a ManagedCache's status holds, every reason each can give, and every reason of a
// ManagedCacheBackup's status: declared here once, explained in Conditions and BackupReasons
// (docs/api.md's tables are generated from them; a test checks that each constant is there).

// Condition types of a ManagedCache.
const (
	// ConditionReady says whether a cache is serving.
	ConditionReady = "Ready"
	// ConditionDegraded is True while a cache is not whole: no primary, a failover or a roll under
	// way, a member that does not answer or a replica out of sync.
	ConditionDegraded = "Degraded"
	// ConditionConfigApplied says whether every member runs with the cache's live settings.
	ConditionConfigApplied = "ConfigApplied"
	// ConditionPasswordApplied says whether every member accepts the Secret's password.
	ConditionPasswordApplied = "PasswordApplied"
	// ConditionStorageResizing is present while a cache's volumes grow, or when a storage change
	// cannot be made.
	ConditionStorageResizing = "StorageResizing"
	// ConditionHibernated is present while a cache hibernates or resumes (spec.hibernate).
	ConditionHibernated = "Hibernated"
	// ConditionBackupsReady says whether the cache's backups can run: the store answers, the
	// bucket exists and the schedule parses.
	ConditionBackupsReady = "BackupsReady"
	// ConditionResharding is present while a sharded cache's slots move to reach spec.shards.
	ConditionResharding = "Resharding"
	// ConditionDataLost is present, True, once every member of a cache came back empty after it
	// held keys; it stays until the cache's spec changes.
	ConditionDataLost = "DataLost"
)

// Reasons of the Ready condition. A child the API server refuses gives FailedReason(kind).
const (
	ReasonAllReplicasReady   = "AllReplicasReady"
	ReasonWaitingForReplicas = "WaitingForReplicas"
	ReasonInvalidSpec        = "InvalidSpec"
	ReasonRenderFailed       = "RenderFailed"
	ReasonRestorePending     = "RestorePending"
	ReasonRestoring          = "Restoring"
	ReasonRestoreFailed      = "RestoreFailed"
)

// FailedReason is the Ready reason of a child of the given kind that could not be written
// (SecretFailed, ServiceFailed, StatefulSetFailed, ...).
func FailedReason(kind string) string { return kind + "Failed" }

// Reasons of the Degraded condition.
const (
	ReasonPrimaryUnreachable = "PrimaryUnreachable"
	ReasonFailingOver        = "FailingOver"
	ReasonNoPrimary          = "NoPrimary"
	ReasonMemberUnreachable  = "MemberUnreachable"
	ReasonReplicaNotInSync   = "ReplicaNotInSync"
	ReasonRolling            = "RollingRestart"
	ReasonHandingOver        = "HandingOver"
	ReasonClusterIncomplete  = "ClusterIncomplete"
	ReasonHealthy            = "AllMembersHealthy"
	// ReasonOperatorRefused is also a Warning Event: the members refused the operator's command
	// (NOPERM, WRONGPASS, NOAUTH).
	ReasonOperatorRefused = "OperatorRefused"
)

// Reasons of the ConfigApplied condition.
const (
	ReasonLiveSettingsApplied = "LiveSettingsApplied"
	ReasonLiveSettingsPending = "LiveSettingsPending"
	ReasonLiveSettingsInvalid = "LiveSettingsInvalid"
)

// Reasons of the PasswordApplied condition (ReasonPasswordRotated and ReasonPasswordRejected are
// Events too).
const (
	ReasonPasswordApplied  = "PasswordApplied"
	ReasonPasswordPending  = "PasswordPending"
	ReasonPasswordRejected = "PasswordRejected"
	ReasonPasswordRotated  = "PasswordRotated"
)

// Reasons of the StorageResizing condition.
const (
	ReasonExpandingVolumes    = "ExpandingVolumes"
	ReasonExpansionNotAllowed = "ExpansionNotAllowed"
	ReasonChangeImmutable     = "StorageChangeImmutable"
)

// Reasons of the Hibernated condition; ReasonHibernated is also the Ready condition's reason
// while the members are stopped (kubectl get's Status column).
const (
	ReasonHibernating = "Hibernating"
	ReasonHibernated  = "Hibernated"
	ReasonResuming    = "Resuming"
)

// Reasons of a backup's status and of the cache's BackupsReady condition.
const (
	ReasonFromReplica        = "FromReplica"
	ReasonFromPrimary        = "FromPrimary"
	ReasonCacheNotReady      = "CacheNotReady"
	ReasonNoBackupConfigured = "NoBackupConfigured"
	ReasonStoreSecretInvalid = "StoreSecretInvalid"
	ReasonStoreUnreachable   = "StoreUnreachable"
	ReasonBucketNotFound     = "BucketNotFound"
	ReasonStoreReachable     = "StoreReachable"
	ReasonScheduleInvalid    = "ScheduleInvalid"
	ReasonJobFailed          = "JobFailed"
	ReasonJobMissing         = "JobMissing"
	ReasonManifestUnreadable = "ManifestUnreadable"
	ReasonCacheGone          = "CacheNotFound"
	// ReasonBackupWaitsForReshard (Pending) and ReasonResharded (Failed): a sharded cache's
	// backup waits for a reshard to finish; one that started during the backup fails it.
	ReasonBackupWaitsForReshard = "ReshardRunning"
	ReasonResharded             = "Resharded"
	// ReasonCleanupFailed is the BackupsReady reason of a deletion that cannot delete the backups.
	ReasonCleanupFailed = "CleanupFailed"
)

// Reasons of the Resharding condition.
const (
	ReasonMovingSlots    = "MovingSlots"
	ReasonRemovingShards = "RemovingShards"
)

// ReasonDataLost is the DataLost condition's reason, and a Warning Event: every member of the
// cache came back empty after it held keys.
const ReasonDataLost = "DataLost"

// Reason is one reason a condition or a status can give, and what it means.
type Reason struct {
	Reason, Status, Meaning string
}

// ConditionDoc is one condition type, what it says, and its reasons.
type ConditionDoc struct {
	Type, Meaning string
	Reasons       []Reason
}

// Conditions is the catalogue of a ManagedCache's conditions, in the order of the API page.
var Conditions = []ConditionDoc{
	{ConditionReady, "whether the cache is serving: its wanted members are ready", []Reason{
		{ReasonAllReplicasReady, "True", "every wanted member is ready"},
		{ReasonWaitingForReplicas, "False", "fewer members ready than wanted (a new cache, a roll, a lost member)"},
		{ReasonInvalidSpec, "False", "the spec cannot be rendered as it is (the message names the field); nothing is changed"},
		{ReasonRenderFailed, "False", "a template did not render (a bug, or a changed --templates-dir)"},
		{FailedReason("<Kind>"), "False", "the API server refused a child of that kind (SecretFailed, ServiceFailed, StatefulSetFailed, ...); the message has its answer"},
		{ReasonRestorePending, "False", "spec.restore names a backup that is not Completed yet, or its store cannot be read yet"},
		{ReasonRestoring, "False", "the members are being filled from the backup"},
		{ReasonRestoreFailed, "False", "the restore cannot be done (a missing backup, a checksum that does not match, a snapshot too new for the engine)"},
		{ReasonHibernated, "False", "spec.hibernate: every member is stopped, the data kept"},
	}},
	{ConditionDegraded, "whether the cache is not whole; False when it is", []Reason{
		{ReasonHealthy, "False", "every member answers and every replica is in sync"},
		{ReasonPrimaryUnreachable, "True", "the primary does not answer; a failover follows after spec.failover.delaySeconds"},
		{ReasonFailingOver, "True", "a replica is being promoted"},
		{ReasonNoPrimary, "True", "no member can be the primary (none answers, or none may be promoted without losing data)"},
		{ReasonMemberUnreachable, "True", "a replica does not answer"},
		{ReasonReplicaNotInSync, "True", "a replica is not linked to the primary or is syncing"},
		{ReasonRolling, "True", "a change rolls the members, replicas first"},
		{ReasonHandingOver, "True", "the primary role is being handed over (a switchover, or the end of a roll)"},
		{ReasonClusterIncomplete, "True", "a sharded cache's cluster is being formed or mended (members to introduce or forget, slots to assign, replicas to attach), or a member says it is not ok"},
		{ReasonOperatorRefused, "True", "the members refuse the operator's commands (its credentials); nothing moves until they accept them"},
	}},
	{ConditionConfigApplied, "whether every member runs with the live settings of the ConfigMap's revision", []Reason{
		{ReasonLiveSettingsApplied, "True", "every member has them"},
		{ReasonLiveSettingsPending, "False", "the members named in the message have not yet (and why)"},
		{ReasonLiveSettingsInvalid, "False", "the live settings do not parse"},
	}},
	{ConditionPasswordApplied, "whether every member accepts the Secret's passwords", []Reason{
		{ReasonPasswordApplied, "True", "every member accepts the current password (and, during a rotation's overlap, the previous one)"},
		{ReasonPasswordPending, "False", "the members named in the message do not yet"},
		{ReasonPasswordRejected, "False", "the Secret's password cannot be used (empty, too long, a character that breaks ACL rules); the accepted one is kept"},
		{ReasonPasswordRotated, "True", "a rotation finished; the previous password is no longer accepted"},
	}},
	{ConditionStorageResizing, "present while the volumes grow, or when a storage change cannot be made", []Reason{
		{ReasonExpandingVolumes, "True", "the claims are being expanded and the StatefulSet replaced without its pods"},
		{ReasonExpansionNotAllowed, "True", "the storage class does not allow expansion; the size stays"},
		{ReasonChangeImmutable, "True", "a storage change the cluster cannot make (a smaller size, another class)"},
	}},
	{ConditionHibernated, "present while the cache hibernates or resumes, removed once it is Ready again", []Reason{
		{ReasonHibernating, "True", "the members are being stopped (after the primary's snapshot)"},
		{ReasonHibernated, "True", "every member is stopped"},
		{ReasonResuming, "False", "the members are starting again"},
	}},
	{ConditionBackupsReady, "present on a cache with spec.backup: whether its backups can run", []Reason{
		{ReasonStoreReachable, "True", "the store answers, the bucket exists and the schedule parses"},
		{ReasonStoreSecretInvalid, "False", "the store's Secret is missing or lacks a key"},
		{ReasonStoreUnreachable, "False", "the store does not answer"},
		{ReasonBucketNotFound, "False", "the bucket does not exist"},
		{ReasonScheduleInvalid, "False", "spec.backup.schedule does not parse"},
		{ReasonCleanupFailed, "False", "onDelete: Delete could not delete the cache's backups (the deletion waits)"},
	}},
	{ConditionResharding, "present while a sharded cache's slots move to reach spec.shards, removed once every shard serves its share and the shards past it are gone", []Reason{
		{ReasonMovingSlots, "True", "slots move with their keys while clients write (the message and status.reshard give slots moved and to move)"},
		{ReasonRemovingShards, "True", "every slot is where it should be; the shards past spec.shards, which hold no slot and no key, are being removed"},
	}},
	{ConditionDataLost, "present, True, once every member came back empty after the cache held keys; removed when the spec changes", []Reason{
		{ReasonDataLost, "True", "the message gives the keys held before and when it was seen"},
	}},
}

// BackupReasons is the catalogue of a ManagedCacheBackup's status.reason.
var BackupReasons = []Reason{
	{ReasonFromReplica, "Running, Completed", "taken from a replica in sync with the primary"},
	{ReasonFromPrimary, "Running, Completed", "taken from the primary: no replica was in sync (the primary forks)"},
	{ReasonCacheNotReady, "Pending", "the cache has no member to take it from yet (a sharded cache: a shard has none)"},
	{ReasonBackupWaitsForReshard, "Pending", "a sharded cache's reshard runs: the backup starts once every shard's slots are settled"},
	{ReasonResharded, "Failed", "a sharded cache's slots moved while the backup ran (a reshard): its snapshots may not match the shards"},
	{ReasonCacheGone, "Failed", "the cache it names does not exist"},
	{ReasonNoBackupConfigured, "Failed", "the cache has no spec.backup.store"},
	{ReasonStoreSecretInvalid, "Failed", "the store's Secret is missing or lacks a key"},
	{ReasonStoreUnreachable, "Failed", "the store does not answer, or its bucket does not exist (the message says which)"},
	{ReasonJobFailed, "Failed", "the backup Job failed (the message has its last words)"},
	{ReasonJobMissing, "Failed", "the backup Job is gone before it finished"},
	{ReasonManifestUnreadable, "Failed", "the object's manifest in the bucket cannot be read"},
}
