package engine

import (
	"fmt"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Spec is a ManagedCache's spec (API v2, the operator's hub version) after defaulting and
// validation.
type Spec struct {
	// Replicas is the number of members (1-9).
	Replicas int64
	// Engine is the server: redis or valkey, and its MAJOR.MINOR version (the image tag).
	Engine Engine
	// Storage is each member's volume.
	Storage Storage
	// Eviction is what the server does when memory is full.
	Eviction Eviction
	// Resources are the container's requests and limits, as given (nil: none).
	Resources map[string]interface{}
}

// Engine names the cache server.
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

// Eviction configures maxmemory-policy and, optionally, maxmemory.
type Eviction struct {
	Policy string
	// MaxMemory is a quantity; empty: no limit.
	MaxMemory string
	// MaxMemoryBytes is MaxMemory in bytes (0: no limit), as redis.conf wants it.
	MaxMemoryBytes int64
}

// Values is everything a template sees.
type Values struct {
	// Name and Namespace are the ManagedCache's.
	Name, Namespace string
	// Spec is the validated spec.
	Spec Spec
	// Image is <repository>:<version>, the repository chosen by the engine.
	Image string
	// Labels are the standard labels every child and pod carries.
	Labels map[string]string
	// SelectorLabels select the cache's pods (a subset of Labels that never changes).
	SelectorLabels map[string]string
	// PrimaryHost is the DNS name of ordinal 0, the primary.
	PrimaryHost string
	// SecretName is the name of the Secret that holds the password.
	SecretName string
	// PasswordKey is the key of the password in that Secret.
	PasswordKey string
	// Password is the cache's password: read from the live Secret, or generated once.
	Password string
}

// PasswordKey is the key of the password in a cache's Secret.
const PasswordKey = "password"

// SecretName returns the name of the Secret that holds a cache's password. The operator reads the
// password from this Secret before rendering, so the name is fixed here, not in a template.
func SecretName(cacheName string) string { return cacheName + "-auth" }

// Defaults of the CRD schema, applied again here so that an object the API server did not
// default (an older stored object, a test) renders the same.
const (
	DefaultReplicas       = 1
	DefaultEngine         = "redis"
	DefaultStorageSize    = "8Gi"
	DefaultEvictionPolicy = "noeviction"
)

var (
	versionPattern   = regexp.MustCompile(`^[0-9]+\.[0-9]+$`)
	evictionPolicies = map[string]bool{"noeviction": true, "allkeys-lru": true, "volatile-lru": true}
	engines          = map[string]bool{"redis": true, "valkey": true}
	minStorage       = resource.MustParse("1Gi")
)

// SpecFrom reads and validates the spec of a v2 ManagedCache. The CRD schema already rejects bad
// input at admission; this is the operator's own guard, so that an odd object becomes a clear
// status condition instead of a panic or a broken child.
func SpecFrom(mc *unstructured.Unstructured) (Spec, error) {
	s := Spec{
		Replicas: DefaultReplicas, Engine: Engine{Name: DefaultEngine},
		Storage: Storage{Size: DefaultStorageSize}, Eviction: Eviction{Policy: DefaultEvictionPolicy},
	}
	spec, ok := mc.Object["spec"].(map[string]interface{})
	if !ok {
		return s, fmt.Errorf("spec: missing or not an object")
	}
	var err error
	if s.Replicas, err = intField(spec, "replicas", s.Replicas); err != nil {
		return s, err
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
		return s, fmt.Errorf("spec.engine.version: must look like MAJOR.MINOR (e.g. \"7.4\"), got %q", s.Engine.Version)
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
		s.Eviction.MaxMemoryBytes = q.Value()
	}
	return s, nil
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

func intField(spec map[string]interface{}, name string, def int64) (int64, error) {
	v, found := spec[name]
	if !found || v == nil {
		return def, nil
	}
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

// Standard label keys and values carried by every child.
const (
	LabelName      = "app.kubernetes.io/name"
	LabelInstance  = "app.kubernetes.io/instance"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedByValue is the value of LabelManagedBy on every child.
	ManagedByValue = "cache-operator"
	nameValue      = "managedcache"
)

// SelectorLabels returns the labels that select a cache's pods.
func SelectorLabels(name string) map[string]string {
	return map[string]string{LabelName: nameValue, LabelInstance: name}
}

// StandardLabels returns the labels every child of a cache carries.
func StandardLabels(name string) map[string]string {
	l := SelectorLabels(name)
	l[LabelManagedBy] = ManagedByValue
	return l
}

// ImageRepositories maps an engine name to its image repository.
type ImageRepositories map[string]string

// DefaultImageRepositories are the repositories of the engines when no flag says otherwise.
func DefaultImageRepositories() ImageRepositories {
	return ImageRepositories{"redis": "redis", "valkey": "valkey/valkey"}
}

// NewValues builds the template values of a cache.
func NewValues(mc *unstructured.Unstructured, spec Spec, images ImageRepositories, password string) Values {
	name, ns := mc.GetName(), mc.GetNamespace()
	repo := images[spec.Engine.Name]
	if repo == "" {
		repo = spec.Engine.Name
	}
	return Values{
		Name:           name,
		Namespace:      ns,
		Spec:           spec,
		Image:          repo + ":" + spec.Engine.Version,
		Labels:         StandardLabels(name),
		SelectorLabels: SelectorLabels(name),
		PrimaryHost:    fmt.Sprintf("%s-0.%s.%s.svc.cluster.local", name, name, ns),
		SecretName:     SecretName(name),
		PasswordKey:    PasswordKey,
		Password:       password,
	}
}
