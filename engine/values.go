package engine

import (
	"fmt"
	"regexp"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Spec is a ManagedCache's spec after defaulting and validation.
type Spec struct {
	// Size is the number of Redis members (1-9).
	Size int64
	// Version is the Redis version, MAJOR.MINOR, used as the image tag.
	Version string
	// StorageGi is the size of each member's volume in GiB.
	StorageGi int64
	// EvictionPolicy is Redis' maxmemory-policy.
	EvictionPolicy string
}

// Values is everything a template sees.
type Values struct {
	// Name and Namespace are the ManagedCache's.
	Name, Namespace string
	// Spec is the validated spec.
	Spec Spec
	// Image is <repository>:<version>.
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
	DefaultSize           = 1
	DefaultStorageGi      = 8
	DefaultEvictionPolicy = "noeviction"
)

var (
	versionPattern   = regexp.MustCompile(`^[0-9]+\.[0-9]+$`)
	evictionPolicies = map[string]bool{"noeviction": true, "allkeys-lru": true, "volatile-lru": true}
)

// SpecFrom reads and validates the spec of a ManagedCache. The CRD schema already rejects bad
// input at admission; this is the operator's own guard, so that an odd object becomes a clear
// status condition instead of a panic or a broken child.
func SpecFrom(mc *unstructured.Unstructured) (Spec, error) {
	s := Spec{Size: DefaultSize, StorageGi: DefaultStorageGi, EvictionPolicy: DefaultEvictionPolicy}
	spec, ok := mc.Object["spec"].(map[string]interface{})
	if !ok {
		return s, fmt.Errorf("spec: missing or not an object")
	}
	var err error
	if s.Size, err = intField(spec, "size", s.Size); err != nil {
		return s, err
	}
	if s.StorageGi, err = intField(spec, "storageGi", s.StorageGi); err != nil {
		return s, err
	}
	if v, found := spec["version"]; found {
		s.Version, _ = v.(string)
	}
	if p, found := spec["evictionPolicy"]; found {
		if str, ok := p.(string); ok {
			s.EvictionPolicy = str
		} else {
			return s, fmt.Errorf("spec.evictionPolicy: must be a string, got %T", p)
		}
	}
	switch {
	case s.Size < 1 || s.Size > 9:
		return s, fmt.Errorf("spec.size: must be between 1 and 9, got %d", s.Size)
	case !versionPattern.MatchString(s.Version):
		return s, fmt.Errorf("spec.version: must look like MAJOR.MINOR (e.g. \"7.4\"), got %q", s.Version)
	case s.StorageGi < 1:
		return s, fmt.Errorf("spec.storageGi: must be at least 1, got %d", s.StorageGi)
	case !evictionPolicies[s.EvictionPolicy]:
		return s, fmt.Errorf("spec.evictionPolicy: must be one of noeviction, allkeys-lru, volatile-lru, got %q", s.EvictionPolicy)
	}
	return s, nil
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

// NewValues builds the template values of a cache.
func NewValues(mc *unstructured.Unstructured, spec Spec, imageRepository, password string) Values {
	name, ns := mc.GetName(), mc.GetNamespace()
	return Values{
		Name:           name,
		Namespace:      ns,
		Spec:           spec,
		Image:          imageRepository + ":" + spec.Version,
		Labels:         StandardLabels(name),
		SelectorLabels: SelectorLabels(name),
		PrimaryHost:    fmt.Sprintf("%s-0.%s.%s.svc.cluster.local", name, name, ns),
		SecretName:     SecretName(name),
		PasswordKey:    PasswordKey,
		Password:       password,
	}
}
