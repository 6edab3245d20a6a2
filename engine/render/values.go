package render

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/support"
)

// Values is everything a template sees.
type Values struct {
	// Name and Namespace are the ManagedCache's.
	Name, Namespace string
	// Spec is the validated spec.
	Spec api.Spec
	// Image is <repository>:<version>, the repository chosen by the engine.
	Image string
	// Labels are the standard labels every child and pod carries.
	Labels map[string]string
	// SelectorLabels select the cache's pods (a subset of Labels that never changes).
	SelectorLabels map[string]string
	// Port is the port every member serves on.
	Port int
	// Sharded: the cache is sharded (spec.shards), a cluster of MemberSets, one per shard.
	Sharded bool
	// ClusterBusPort is the port a sharded cache's members gossip on.
	ClusterBusPort int
	// MemberSet is the name of a member StatefulSet and its PodDisruptionBudget: the cache's name,
	// or <name>-s<shard> in a shard's values (ShardValues). MemberSelector selects its pods: the
	// SelectorLabels, and for a shard its ShardLabel with the value Shard.
	MemberSet      string
	MemberSelector map[string]string
	ShardLabel     string
	Shard          string
	// RoleLabel is the label key of a member's role; RolePrimary and RoleReplica its values.
	RoleLabel, RolePrimary, RoleReplica string
	// ServerLabel is the label key of the server a member runs, ServerValue its value.
	ServerLabel, ServerValue string
	// SnapshotFormat is the newest snapshot (RDB) format the server reads, from the support
	// matrix (0: not in it): a member's start discards, or refuses, data in a newer one.
	SnapshotFormat int
	// DataLoss is the ConfigMap's key that lets a member's start discard data its server cannot
	// read, and whether the cache allows it (the annotation cache.example.com/allow-data-loss).
	DataLoss struct {
		Key     string
		Allowed bool
	}
	// ReadWriteLabel is the label key ("true") of the member the read-write Service leads to.
	ReadWriteLabel string
	// ReadWriteService and ReadOnlyService are the names of the Services that reach the primary
	// and the ready replicas.
	ReadWriteService, ReadOnlyService string
	// ReadWriteHost is the DNS name of the read-write Service: a starting member follows it.
	ReadWriteHost string
	// SecretName is the name of the Secret that holds the password.
	SecretName string
	// PasswordKey is the key of the password in that Secret.
	PasswordKey string
	// ConfigName is the name of the ConfigMap of the live settings, LiveConfigKey their key in it.
	ConfigName, LiveConfigKey string
	// UsersConfigKey is the key of the users' permissions in that ConfigMap.
	UsersConfigKey string
	// Password is the clients' password: read from the live Secret, or generated once.
	Password string
	// Auth is everything the Secret holds: the password, the internal user's password, the hashes
	// the members accept and the rotation's bookkeeping.
	Auth Auth
	// Keys are the Secret's keys and annotations (engine/api), which the operator reads back.
	Keys SecretKeys
	// TLS is the cache's TLS.
	TLS TLSValues
	// OperatorImage is the operator's image, which runs the backup and restore commands.
	OperatorImage string
	// BackupRateLimit is the backup Job's cap in MiB/s (0: none).
	BackupRateLimit int
	// StoreEnv maps a store Secret's keys to the commands' environment.
	StoreEnv []StoreEnvVar
	// Restore, when set, fills the first member from a backup before its server starts.
	Restore *RestoreValues
	// RestoreShards is, for a sharded cache's restore, each shard's object (ShardValues gives
	// each shard's Restore from it).
	RestoreShards []api.RestoreShard
	// Backup is set only when rendering a backup Job.
	Backup *BackupJob
	// ClusterDomain is the cluster's DNS domain.
	ClusterDomain string
}

// Auth is what a cache's Secret holds (see engine/api for the keys).
type Auth struct {
	// Password is the clients' password.
	Password string
	// Internal is the password of the internal user (engine/api.InternalUser).
	Internal string
	// PreviousInternal and PreviousInternalUntil (RFC 3339): during an internal rotation's overlap,
	// the internal password before it and when the overlap ends; empty otherwise.
	PreviousInternal, PreviousInternalUntil string
	// InternalRotatedFor is the rotate-internal-password annotation value the internal password
	// was generated for.
	InternalRotatedFor string
	// PasswordHash is the SHA-256 (hex) of the password the members accept.
	PasswordHash string
	// PreviousHash and PreviousUntil (RFC 3339): during a rotation's overlap, the hash of the
	// password before it and when the overlap ends; empty otherwise.
	PreviousHash, PreviousUntil string
	// Revision counts the accepted passwords.
	Revision int64
	// RotatedFor is the rotate-password annotation value the password was generated for.
	RotatedFor string
	// TLS is what a TLS cache's Secret holds (engine/cachetls); empty for a cache without TLS.
	TLS TLSData
}

// TLSData is a TLS cache's certificates (PEM): the current CA and its key, the CA bundle, the
// members' certificate and key; and the rotate-certificates annotation value last served.
type TLSData struct {
	CACurrent, CAKey, Bundle, Cert, Key string
	RotatedFor                          string
}

// TLSValues are what the templates know of a cache's TLS.
type TLSValues struct {
	// Enabled is spec.tls.enabled. Mounted: the members have the TLS Secret's files (TLS is on,
	// or was: a cache keeps its TLS Secret, so that a roll that turns TLS off can still reach a
	// TLS primary).
	Enabled, Mounted bool
	// SecretName is the TLS Secret's name, CAName the CA ConfigMap's, CAKey the bundle's key in
	// both; Dir is where members mount the Secret.
	SecretName, CAName, CAKey, Dir string
	// Data: the Secret's content.
	Data TLSData
	// Keys are its keys.
	Keys TLSKeys
	// RotatedForAnnotation is the Secret's annotation for RotatedFor; Label the pods' label
	// (LabelTLS) that says a member serves TLS.
	RotatedForAnnotation, Label string
}

// PasswordHash is the SHA-256 of a password in hex, as ACL GETUSER reports it and as redis.conf
// takes it ("#<hash>").
func PasswordHash(password string) string {
	sum := sha256.Sum256([]byte(password))
	return hex.EncodeToString(sum[:])
}

// SimpleAuth is the Auth of a new cache whose password is password, with an internal password
// derived from it: for previews, tests and benchmarks, never for a real cache (the operator
// generates both at random).
func SimpleAuth(password string) Auth {
	return Auth{Password: password, Internal: PasswordHash("internal:" + password), PasswordHash: PasswordHash(password), Revision: 1}
}

// SecretKeys are the keys and annotations of a cache's Secret.
type SecretKeys struct {
	Password, Internal, PasswordHash, PreviousHash, PreviousInternal string
	RevisionAnnotation, PreviousUntilAnnotation, RotatedFor          string
	PreviousInternalUntilAnnotation, InternalRotatedFor              string
	// InternalUser is the server user of the internal password.
	InternalUser string
	// Finalizer keeps the Secret while the cache uses it (api.SecretFinalizer).
	Finalizer string
}

var secretKeys = SecretKeys{
	Password: api.PasswordKey, Internal: api.InternalPasswordKey, PasswordHash: api.PasswordHashKey,
	PreviousHash: api.PreviousPasswordHashKey, RevisionAnnotation: api.PasswordRevisionAnnotation,
	PreviousUntilAnnotation: api.PreviousPasswordUntilAnnotation, RotatedFor: api.PasswordRotatedForAnnotation,
	PreviousInternal: api.PreviousInternalPasswordKey, PreviousInternalUntilAnnotation: api.PreviousInternalUntilAnnotation,
	InternalRotatedFor: api.InternalRotatedForAnnotation,
	InternalUser:       api.InternalUser,
	Finalizer:          api.SecretFinalizer,
}

// TLSKeys are the keys of the TLS Secret (engine/cachetls.Keys).
type TLSKeys struct{ CACurrent, CAKey, Bundle, Cert, Key string }

var tlsKeys = TLSKeys{CACurrent: "ca-current.crt", CAKey: "ca.key", Bundle: api.CAKey, Cert: "tls.crt", Key: "tls.key"}

// Config is what rendering takes from the operator's flags rather than from the ManagedCache.
type Config struct {
	// Images maps each engine (redis, valkey) to its image repository; the tag is the version.
	Images ImageRepositories
	// ClusterDomain is the cluster's DNS domain (default cluster.local).
	ClusterDomain string
	// OperatorImage is the image of the operator's own binary, for backup Jobs and restores
	// (default cache-operator).
	OperatorImage string
	// BackupRateLimit caps how fast a backup Job reads a member's snapshot, in MiB/s (0: no cap).
	BackupRateLimit int
}

// DefaultConfig is the Config of an operator started without flags.
func DefaultConfig() Config {
	return Config{Images: DefaultImageRepositories(), ClusterDomain: api.DefaultClusterDomain, OperatorImage: DefaultOperatorImage,
		BackupRateLimit: DefaultBackupRateLimit}
}

// DefaultBackupRateLimit is the backups' cap in MiB/s when no flag says otherwise: a 1 GiB
// cache backs up in under a minute, and the member that serves the snapshot, and the others on
// its node, keep most of the CPU while it does (the member's snapshot, the Job's checksums and
// the store's writes all go at this pace).
const DefaultBackupRateLimit = 28

// DefaultOperatorImage is the operator's image when no flag says otherwise.
const DefaultOperatorImage = "cache-operator"

// ImageRepositories maps an engine name to its image repository.
type ImageRepositories map[string]string

// DefaultImageRepositories are the repositories of the engines when no flag says otherwise: the
// support matrix's.
func DefaultImageRepositories() ImageRepositories {
	return ImageRepositories(support.Repositories())
}

// NewValues builds the template values of a cache.
func NewValues(mc *unstructured.Unstructured, spec api.Spec, cfg Config, auth Auth) Values {
	name, ns := mc.GetName(), mc.GetNamespace()
	repo := cfg.Images[spec.Engine.Name]
	if repo == "" {
		repo = spec.Engine.Name
	}
	domain := cfg.ClusterDomain
	if domain == "" {
		domain = api.DefaultClusterDomain
	}
	opImage := cfg.OperatorImage
	if opImage == "" {
		opImage = DefaultOperatorImage
	}
	v := Values{
		OperatorImage:    opImage,
		BackupRateLimit:  cfg.BackupRateLimit,
		StoreEnv:         storeEnv(),
		Restore:          restoreValues(mc, spec),
		RestoreShards:    restoreShards(mc, spec),
		ClusterDomain:    domain,
		Name:             name,
		Namespace:        ns,
		Spec:             spec,
		Image:            repo + ":" + spec.Engine.Version,
		Labels:           api.StandardLabels(name),
		SelectorLabels:   api.SelectorLabels(name),
		Port:             api.Port,
		RoleLabel:        api.LabelRole,
		RolePrimary:      api.RolePrimary,
		RoleReplica:      api.RoleReplica,
		ReadWriteLabel:   api.LabelReadWrite,
		ReadWriteService: api.ReadWriteService(name),
		ReadOnlyService:  api.ReadOnlyService(name),
		ReadWriteHost:    api.ServiceHost(api.ReadWriteService(name), ns, domain),
		SecretName:       api.SecretName(name),
		PasswordKey:      api.PasswordKey,
		ConfigName:       api.ConfigName(name),
		LiveConfigKey:    api.LiveConfigKey,
		UsersConfigKey:   api.UsersConfigKey,
		Password:         auth.Password,
		Auth:             auth,
		Keys:             secretKeys,
		TLS: TLSValues{Enabled: spec.TLS, Mounted: spec.TLS || auth.TLS.Cert != "", SecretName: api.TLSSecretName(name), CAName: api.CAConfigMapName(name), CAKey: api.CAKey,
			Dir: "/var/run/cache/tls", Data: auth.TLS, Keys: tlsKeys,
			RotatedForAnnotation: api.CertificatesRotatedForAnnotation, Label: api.LabelTLS},
		ServerLabel: api.LabelServer, ServerValue: api.ServerLabelValue(spec.Engine.Name, spec.Engine.Version),
	}
	v.Sharded, v.ClusterBusPort, v.ShardLabel = spec.Sharded(), api.ClusterBusPort, api.LabelShard
	v.MemberSet, v.MemberSelector = name, v.SelectorLabels
	if r, ok := support.Find(spec.Engine.Name, spec.Engine.Version); ok {
		v.SnapshotFormat = r.RDB
	}
	v.DataLoss.Key = api.AllowDataLossKey
	v.DataLoss.Allowed = mc.GetAnnotations()[api.AllowDataLossAnnotation] == "true"
	return v
}

// ShardValues returns the values of each shard of a sharded cache, in shard order: v with
// MemberSet, MemberSelector and Shard set to the shard's (nil when the cache is not sharded). The
// templates range over them for the per-shard children.
func (v Values) ShardValues() []Values {
	if !v.Sharded {
		return nil
	}
	out := make([]Values, v.Spec.Shards)
	for i := range out {
		s := v
		s.MemberSet, s.Shard = api.ShardSetName(v.Name, i), strconv.Itoa(i)
		s.MemberSelector = map[string]string{v.ShardLabel: s.Shard}
		for k, val := range v.SelectorLabels {
			s.MemberSelector[k] = val
		}
		if v.Restore != nil {
			// The shard's first member loads the shard's object (status.restore.shards); a
			// refused restore fails there with the reason.
			r := *v.Restore
			r.Member, r.Path, r.Checksum, r.Bytes, r.Only = api.ShardSetName(v.Name, i)+"-0", "", "", "", true
			for _, sh := range v.RestoreShards {
				if sh.Shard == int64(i) {
					r.Path, r.Checksum = sh.Path, sh.Checksum
					if sh.Bytes > 0 {
						r.Bytes = strconv.FormatInt(sh.Bytes, 10)
					}
				}
			}
			s.Restore = &r
		}
		out[i] = s
	}
	return out
}
