package api

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"example.com/cache-operator/crd"
	"example.com/cache-operator/engine/support"
)

// Spec is a ManagedCache's spec (API v2, the operator's hub version) after defaulting and
// validation.
type Spec struct {
	// Replicas is the number of members (1-9): of the cache, or of each shard when Shards > 0.
	Replicas int64
	// Shards is spec.shards: 0 for a primary/replica cache; MinShards to MaxShards for a sharded
	// cache (Redis Cluster, Valkey cluster mode), whose every shard has Replicas members (a
	// primary and its replicas) and serves an even part of the 16,384 hash slots. A cache is one
	// or the other for its whole life.
	Shards int64
	// Engine is the server: redis or valkey, and its MAJOR.MINOR version (the image tag).
	Engine Engine
	// Storage is each member's volume.
	Storage Storage
	// Eviction is what the server does when memory is full.
	Eviction Eviction
	// Resources are the container's requests and limits, as given (nil: none).
	Resources map[string]interface{}
	// FailoverDelay is how long the primary may be unreachable or not ready before a replica
	// replaces it (spec.failover.delaySeconds).
	FailoverDelay time.Duration
	// Fence is how a primary cut off from its replicas stops taking writes.
	Fence Fence
	// TLS is spec.tls.enabled: members serve TLS only, replicate over TLS, and the operator
	// issues their certificates.
	TLS bool
	// Backup is spec.backup (nil: no backups).
	Backup *Backup
	// Restore is spec.restore (nil: the cache starts empty).
	Restore *Restore
	// Hibernate is spec.hibernate: every member stopped, the volumes and the other children kept.
	Hibernate bool
}

// The range of spec.shards. A cluster needs a majority of its primaries to fail one over, so
// that fewer than three cannot lose one; MaxShards bounds the members a cache makes (32 shards
// of 9) and the names: a member of shard 31 is <name>-s31-<ordinal>.
const (
	MinShards = 3
	MaxShards = 32
	// MaxShardedNameLength is the longest metadata.name of a sharded cache: its StatefulSets are
	// <name>-s<shard>, and their revision labels (<statefulset>-<10 characters>) must fit in 63.
	MaxShardedNameLength = 48
)

// Sharded reports whether the spec asks for a sharded cache.
func (s Spec) Sharded() bool { return s.Shards > 0 }

// ShardedNotServed lists, for a sharded cache, the fields this version of the operator does not
// serve for one yet (the CRD's rules and the webhook refuse them with these words; SpecFrom too),
// each with the way that works today; "" when there is none.
func (s Spec) ShardedNotServed() string {
	if !s.Sharded() {
		return ""
	}
	var out []string
	for _, f := range []struct {
		set  bool
		what string
	}{
		{s.Restore != nil && s.Restore.Path != "", ShardedRestorePathNotServed},
	} {
		if f.set {
			out = append(out, f.what)
		}
	}
	return strings.Join(out, "; ")
}

// ShardedTLSChange is the CRD rule's refusal of TLS turned on or off on a sharded cache.
const ShardedTLSChange = "spec.tls.enabled of a sharded cache is chosen when it is created: a change rolls the members one by one, and the cluster bus cannot join members that speak TLS with members that do not (each side would fail the other); create a new cache with the other setting and move the data"

// What a sharded cache cannot have yet, in the words of the CRD's rules, the webhook and SpecFrom.
const (
	ShardedRestorePathNotServed = "spec.restore.path: a sharded cache restores from a ManagedCacheBackup of a sharded cache (spec.restore.backup), one object per shard; a path names one object"
)

// Backup is spec.backup: where a cache's backups go, when, and how many stay.
type Backup struct {
	// StoreSecret names the Secret with the store's endpoint, bucket and keys.
	StoreSecret string
	// Schedule is a cron expression ("" : on demand only).
	Schedule string
	// Keep is how many completed backups remain.
	Keep int64
	// OnDelete is BackupDelete or BackupRetain.
	OnDelete string
}

// What happens to a cache's backups in the bucket when the cache is deleted (spec.backup.onDelete).
const (
	BackupDelete = "Delete"
	BackupRetain = "Retain"
)

// Restore is spec.restore: a ManagedCacheBackup, or an object in a store.
type Restore struct {
	// Backup names a ManagedCacheBackup in the cache's namespace ("" : StoreSecret and Path).
	Backup string
	// StoreSecret and Path: the store's Secret and the object's key.
	StoreSecret, Path string
}

// Fence bounds what a primary cut off from its replicas can acknowledge (min-replicas-to-write,
// min-replicas-max-lag): it refuses writes once fewer than MinReplicas replicas have acknowledged
// the stream within MaxLagSeconds. A primary the operator replaced while it was cut off therefore
// takes writes for at most MaxLagSeconds (and a little: the lag is counted in whole seconds).
type Fence struct {
	// MinReplicas is spec.failover.minReplicasToWrite, at most Replicas-1 (a larger value is
	// clamped, so that a scale-down never leaves a cache that refuses every write). Unset: 1 from
	// 3 members on, 0 below (at 2 members a fence would stop writes whenever the one replica
	// restarts: the user chooses, README "Write safety").
	MinReplicas int64
	// MaxLagSeconds is spec.failover.maxLagSeconds (1-10, default 5).
	MaxLagSeconds int64
}

// DefaultMaxLagSeconds is spec.failover.maxLagSeconds when unset.
const DefaultMaxLagSeconds = 5

// fenceFor reads spec.failover's fence fields of a cache of replicas members.
func fenceFor(failover map[string]interface{}, replicas int64) (Fence, error) {
	f := Fence{MaxLagSeconds: DefaultMaxLagSeconds}
	if replicas >= 3 {
		f.MinReplicas = 1
	}
	if _, set := failover["minReplicasToWrite"]; set {
		n, err := intField(failover, "minReplicasToWrite")
		if err != nil || n < 0 || n > 8 {
			return f, fmt.Errorf("spec.failover.minReplicasToWrite: must be an integer between 0 and 8, got %v", failover["minReplicasToWrite"])
		}
		f.MinReplicas = n
	}
	if _, set := failover["maxLagSeconds"]; set {
		n, err := intField(failover, "maxLagSeconds")
		if err != nil || n < 1 || n > 10 {
			return f, fmt.Errorf("spec.failover.maxLagSeconds: must be an integer between 1 and 10, got %v", failover["maxLagSeconds"])
		}
		f.MaxLagSeconds = n
	}
	f.MinReplicas = min(f.MinReplicas, replicas-1)
	return f, nil
}

// Engine names the cache server program (spec.engine): redis or valkey, and its version.
type Engine struct {
	Name, Version string
}

// Storage describes each member's volume.
type Storage struct {
	// Size is a quantity, for example "10Gi".
	Size string
	// StorageClassName is empty for the cluster's default class.
	StorageClassName string
}

// Eviction configures maxmemory-policy and maxmemory.
type Eviction struct {
	Policy string
	// MaxMemory is the quantity spec.eviction.maxMemory gives (empty: none given).
	MaxMemory string
	// MaxMemoryBytes is the server's maxmemory in bytes, as redis.conf wants it, always set:
	// MaxMemory when given, or else derived (MaxMemorySource says from what; see maxMemoryFor).
	MaxMemoryBytes int64
	// MaxMemorySource is where MaxMemoryBytes comes from: MaxMemoryFromSpec,
	// MaxMemoryFromLimit or MaxMemoryFromStorage.
	MaxMemorySource string
}

// Where a cache's maxmemory comes from.
const (
	MaxMemoryFromSpec    = "spec.eviction.maxMemory"
	MaxMemoryFromLimit   = "resources.limits.memory"
	MaxMemoryFromStorage = "storage.size"
)

// maxMemoryFor is the maxmemory of a cache that does not set spec.eviction.maxMemory.
//   - With a memory limit: three quarters of it. The rest is headroom the server needs beyond its
//     dataset, which maxmemory does not count: the copy-on-write pages of the child it forks to
//     rewrite the AOF, replication and client output buffers, and allocator fragmentation. (A
//     quarter is what ElastiCache reserves by default, reserved-memory-percent 25.)
//   - Without one (v1 has no memory field): half the data volume, so that the AOF, which holds
//     about the dataset, fits on the volume twice over while it is rewritten. A cache never grows
//     past what its disk can persist; the volume is the one size every cache has.
func maxMemoryFor(s Spec) (int64, string) {
	if limits, ok := s.Resources["limits"].(map[string]interface{}); ok {
		if str, ok := limits["memory"].(string); ok {
			if q, err := resource.ParseQuantity(str); err == nil && q.Sign() > 0 {
				return q.Value() / 4 * 3, MaxMemoryFromLimit
			}
		}
	}
	size := resource.MustParse(s.Storage.Size) // validated by the caller
	return size.Value() / 2, MaxMemoryFromStorage
}

var (
	versionPattern   = regexp.MustCompile(`^[0-9]+\.[0-9]+$`)
	evictionPolicies = map[string]bool{"noeviction": true, "allkeys-lru": true, "volatile-lru": true}
	engines          = map[string]bool{"redis": true, "valkey": true}
	minStorage       = resource.MustParse("1Gi")
)

// SpecFrom reads and validates the spec of a v2 ManagedCache, and refuses what this version of the
// operator does not serve for a sharded cache yet (Spec.ShardedNotServed). The CRD schema already rejects bad input at
// admission; this is the operator's own guard, so that an odd object becomes a clear status
// condition instead of a panic or a broken child.
func SpecFrom(mc *unstructured.Unstructured) (Spec, error) {
	s, err := ParseSpec(mc)
	if why := s.ShardedNotServed(); err == nil && why != "" {
		return s, errors.New(why)
	}
	return s, err
}

// ParseSpec reads and validates the spec of a v2 ManagedCache as SpecFrom does, whether or not the
// operator serves it yet: the templates' golden files render sharded caches before the operator
// forms clusters.
func ParseSpec(mc *unstructured.Unstructured) (Spec, error) {
	var s Spec
	raw, ok := mc.Object["spec"].(map[string]interface{})
	if !ok {
		return s, fmt.Errorf("spec: missing or not an object")
	}
	spec := WithDefaults(raw)
	var err error
	if s.Replicas, err = intField(spec, "replicas"); err != nil {
		return s, err
	}
	if _, set := spec["shards"]; set {
		if s.Shards, err = intField(spec, "shards"); err != nil || s.Shards < MinShards || s.Shards > MaxShards {
			return s, fmt.Errorf("spec.shards: must be an integer between %d and %d (a cluster needs a majority of its primaries to fail one over), got %v",
				MinShards, MaxShards, spec["shards"])
		}
		if n := len(mc.GetName()); n > MaxShardedNameLength {
			return s, fmt.Errorf("metadata.name: a sharded cache's name may be at most %d characters (its StatefulSets are <name>-s<shard>), got %d", MaxShardedNameLength, n)
		}
	}
	fields := []struct {
		path []string
		dst  *string
	}{
		{[]string{"engine", "name"}, &s.Engine.Name},
		{[]string{"engine", "version"}, &s.Engine.Version},
		{[]string{"storage", "size"}, &s.Storage.Size},
		{[]string{"storage", "storageClassName"}, &s.Storage.StorageClassName},
		{[]string{"eviction", "policy"}, &s.Eviction.Policy},
		{[]string{"eviction", "maxMemory"}, &s.Eviction.MaxMemory},
	}
	for _, f := range fields {
		v, found, err := unstructured.NestedFieldNoCopy(spec, f.path...)
		if err != nil || !found {
			continue
		}
		str, ok := v.(string)
		if !ok {
			return s, fmt.Errorf("spec.%s: must be a string, got %T", strings.Join(f.path, "."), v)
		}
		*f.dst = str
	}
	if f, ok := spec["failover"].(map[string]interface{}); ok {
		d, err := intField(f, "delaySeconds")
		if err != nil {
			return s, fmt.Errorf("spec.failover.%s", strings.TrimPrefix(err.Error(), "spec."))
		}
		s.FailoverDelay = time.Duration(d) * time.Second
	}
	if t, ok := spec["tls"].(map[string]interface{}); ok {
		switch v := t["enabled"].(type) {
		case bool:
			s.TLS = v
		case nil:
		default:
			return s, fmt.Errorf("spec.tls.enabled: must be true or false, got %v", v)
		}
	}
	switch v := spec["hibernate"].(type) {
	case bool:
		s.Hibernate = v
	case nil:
	default:
		return s, fmt.Errorf("spec.hibernate: must be true or false, got %v", v)
	}
	if s.Backup, err = backupFrom(spec); err != nil {
		return s, err
	}
	if s.Restore, err = restoreFrom(spec); err != nil {
		return s, err
	}
	failover, _ := spec["failover"].(map[string]interface{})
	if s.Fence, err = fenceFor(failover, s.Replicas); err != nil {
		return s, err
	}
	if s.FailoverDelay < time.Second || s.FailoverDelay > 300*time.Second {
		return s, fmt.Errorf("spec.failover.delaySeconds: must be between 1 and 300, got %v", s.FailoverDelay.Seconds())
	}
	if r, found := spec["resources"]; found {
		if s.Resources, err = resourcesFrom(r); err != nil {
			return s, err
		}
	}
	size, sizeErr := resource.ParseQuantity(s.Storage.Size)
	switch {
	case s.Replicas < 1 || s.Replicas > 9:
		return s, fmt.Errorf("spec.replicas: must be between 1 and 9, got %d", s.Replicas)
	case !engines[s.Engine.Name]:
		return s, fmt.Errorf("spec.engine.name: must be redis or valkey, got %q", s.Engine.Name)
	case !versionPattern.MatchString(s.Engine.Version):
		return s, fmt.Errorf("spec.engine.version: must look like MAJOR.MINOR (e.g. \"8.0\"), got %q", s.Engine.Version)
	case s.Sharded() && support.ClusterRefusal(s.Engine.Name, s.Engine.Version) != "":
		return s, fmt.Errorf("spec.shards: %s", support.ClusterRefusal(s.Engine.Name, s.Engine.Version))
	case sizeErr != nil:
		return s, fmt.Errorf("spec.storage.size: not a quantity: %q", s.Storage.Size)
	case size.Cmp(minStorage) < 0:
		return s, fmt.Errorf("spec.storage.size: must be at least 1Gi, got %s", s.Storage.Size)
	case !evictionPolicies[s.Eviction.Policy]:
		return s, fmt.Errorf("spec.eviction.policy: must be one of noeviction, allkeys-lru, volatile-lru, got %q", s.Eviction.Policy)
	}
	if s.Eviction.MaxMemory != "" {
		q, err := resource.ParseQuantity(s.Eviction.MaxMemory)
		if err != nil || q.Sign() <= 0 {
			return s, fmt.Errorf("spec.eviction.maxMemory: not a positive quantity: %q", s.Eviction.MaxMemory)
		}
		s.Eviction.MaxMemoryBytes, s.Eviction.MaxMemorySource = q.Value(), MaxMemoryFromSpec
	} else {
		s.Eviction.MaxMemoryBytes, s.Eviction.MaxMemorySource = maxMemoryFor(s)
	}
	return s, nil
}

// backupFrom reads spec.backup (the CRD has defaulted keep and onDelete).
func backupFrom(spec map[string]interface{}) (*Backup, error) {
	raw, ok := spec["backup"].(map[string]interface{})
	if !ok {
		return nil, nil
	}
	b := &Backup{Keep: 7, OnDelete: BackupRetain}
	b.StoreSecret, _, _ = unstructured.NestedString(raw, "store", "secretName")
	b.Schedule, _ = raw["schedule"].(string)
	if v, ok := raw["onDelete"].(string); ok {
		b.OnDelete = v
	}
	if _, set := raw["keep"]; set {
		n, err := intField(raw, "keep")
		if err != nil || n < 1 || n > 1000 {
			return nil, fmt.Errorf("spec.backup.keep: must be an integer between 1 and 1000, got %v", raw["keep"])
		}
		b.Keep = n
	}
	if b.Schedule != "" {
		if _, err := ParseSchedule(b.Schedule); err != nil {
			return nil, err
		}
	}
	switch {
	case b.StoreSecret == "":
		return nil, fmt.Errorf("spec.backup.store.secretName: required")
	case b.OnDelete != BackupDelete && b.OnDelete != BackupRetain:
		return nil, fmt.Errorf("spec.backup.onDelete: must be Delete or Retain, got %q", b.OnDelete)
	}
	return b, nil
}

// restoreFrom reads spec.restore: either backup, or store and path.
func restoreFrom(spec map[string]interface{}) (*Restore, error) {
	raw, ok := spec["restore"].(map[string]interface{})
	if !ok {
		return nil, nil
	}
	r := &Restore{}
	r.Backup, _ = raw["backup"].(string)
	r.StoreSecret, _, _ = unstructured.NestedString(raw, "store", "secretName")
	r.Path, _ = raw["path"].(string)
	if (r.Backup == "") == (r.Path == "" || r.StoreSecret == "") || (r.Backup != "" && (r.Path != "" || r.StoreSecret != "")) {
		return nil, fmt.Errorf("spec.restore: takes either backup (a ManagedCacheBackup) or store and path (an object in a bucket)")
	}
	return r, nil
}

// resourcesFrom checks spec.resources: {requests, limits}, each a map of quantities.
func resourcesFrom(v interface{}) (map[string]interface{}, error) {
	m, ok := v.(map[string]interface{})
	if !ok {
		return nil, fmt.Errorf("spec.resources: must be an object")
	}
	for k, list := range m {
		if k != "requests" && k != "limits" {
			return nil, fmt.Errorf("spec.resources.%s: unknown field (requests, limits)", k)
		}
		lm, ok := list.(map[string]interface{})
		if !ok {
			return nil, fmt.Errorf("spec.resources.%s: must be an object", k)
		}
		for name, q := range lm {
			str, ok := q.(string)
			if _, err := resource.ParseQuantity(str); !ok || err != nil {
				return nil, fmt.Errorf("spec.resources.%s.%s: not a quantity: %v", k, name, q)
			}
		}
	}
	if len(m) == 0 {
		return nil, nil
	}
	return m, nil
}

func intField(spec map[string]interface{}, name string) (int64, error) {
	v := spec[name]
	switch n := v.(type) {
	case int64:
		return n, nil
	case int32:
		return int64(n), nil
	case int:
		return int64(n), nil
	case float64:
		if n == float64(int64(n)) {
			return int64(n), nil
		}
	}
	return 0, fmt.Errorf("spec.%s: must be an integer, got %v", name, v)
}

// specSchema is the v2 spec's schema from the CRD: the defaults WithDefaults applies.
var specSchema = func() map[string]interface{} {
	var def struct {
		Spec struct {
			Versions []struct {
				Name   string
				Schema struct {
					OpenAPIV3Schema map[string]interface{} `json:"openAPIV3Schema"`
				}
			}
		}
	}
	if err := yaml.Unmarshal(crd.ManagedCaches, &def); err != nil {
		panic(fmt.Sprintf("the embedded CRD does not parse: %v", err))
	}
	for _, v := range def.Spec.Versions {
		if v.Name == GroupVersion.Version {
			props, _ := v.Schema.OpenAPIV3Schema["properties"].(map[string]interface{})
			if spec, ok := props["spec"].(map[string]interface{}); ok {
				return spec
			}
		}
	}
	panic("the embedded CRD has no " + GroupVersion.Version + " spec schema")
}()

// WithDefaults returns a copy of a v2 spec with the CRD schema's defaults filled in, as the API
// server fills them: a missing field with a default gets it, recursively into objects.
func WithDefaults(spec map[string]interface{}) map[string]interface{} {
	return withDefaults(spec, specSchema)
}

func withDefaults(obj map[string]interface{}, schema map[string]interface{}) map[string]interface{} {
	out := make(map[string]interface{}, len(obj))
	for k, v := range obj {
		out[k] = v
	}
	props, _ := schema["properties"].(map[string]interface{})
	for name, p := range props {
		ps, _ := p.(map[string]interface{})
		if _, set := out[name]; !set {
			if d, ok := ps["default"]; ok {
				out[name] = runtimeValue(d)
			}
		}
		if m, ok := out[name].(map[string]interface{}); ok {
			out[name] = withDefaults(m, ps)
		}
	}
	return out
}

// runtimeValue turns a YAML-decoded default into what the API machinery decodes: integers as
// int64.
func runtimeValue(v interface{}) interface{} {
	switch t := v.(type) {
	case float64:
		if t == float64(int64(t)) {
			return int64(t)
		}
	case map[string]interface{}:
		out := make(map[string]interface{}, len(t))
		for k, e := range t {
			out[k] = runtimeValue(e)
		}
		return out
	}
	return v
}

// Default returns the CRD's default of the v2 spec field at path (nil when it has none), for
// documentation and tests.
func Default(path ...string) interface{} {
	v, _, _ := unstructured.NestedFieldNoCopy(WithDefaults(map[string]interface{}{}), path...)
	return v
}
