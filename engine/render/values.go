package render

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"example.com/cache-operator/engine/api"
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
	// RoleLabel is the label key of a member's role; RolePrimary and RoleReplica its values.
	RoleLabel, RolePrimary, RoleReplica string
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
	// Password is the cache's password: read from the live Secret, or generated once.
	Password string
}

// Config is what rendering takes from the operator's flags rather than from the ManagedCache.
type Config struct {
	// Images maps each engine (redis, valkey) to its image repository; the tag is the version.
	Images ImageRepositories
	// ClusterDomain is the cluster's DNS domain (default cluster.local).
	ClusterDomain string
}

// DefaultConfig is the Config of an operator started without flags.
func DefaultConfig() Config {
	return Config{Images: DefaultImageRepositories(), ClusterDomain: api.DefaultClusterDomain}
}

// ImageRepositories maps an engine name to its image repository.
type ImageRepositories map[string]string

// DefaultImageRepositories are the repositories of the engines when no flag says otherwise.
func DefaultImageRepositories() ImageRepositories {
	return ImageRepositories{"redis": "redis", "valkey": "valkey/valkey"}
}

// NewValues builds the template values of a cache.
func NewValues(mc *unstructured.Unstructured, spec api.Spec, cfg Config, password string) Values {
	name, ns := mc.GetName(), mc.GetNamespace()
	repo := cfg.Images[spec.Engine.Name]
	if repo == "" {
		repo = spec.Engine.Name
	}
	domain := cfg.ClusterDomain
	if domain == "" {
		domain = api.DefaultClusterDomain
	}
	return Values{
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
		ReadWriteService: api.ReadWriteService(name),
		ReadOnlyService:  api.ReadOnlyService(name),
		ReadWriteHost:    api.ServiceHost(api.ReadWriteService(name), ns, domain),
		SecretName:       api.SecretName(name),
		PasswordKey:      api.PasswordKey,
		ConfigName:       api.ConfigName(name),
		LiveConfigKey:    api.LiveConfigKey,
		Password:         password,
	}
}
