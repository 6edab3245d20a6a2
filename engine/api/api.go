// Package api is the ManagedCache API as the operator sees it: the group, version and resource,
// the names every child and object of the operator shares (field manager, labels, finalizer,
// Secret, port, cluster domain), and a cache's spec read from an unstructured v2 object with the
// CRD's defaults applied and every field checked.
//
// It is not for talking to the API server, rendering, or conversion between versions (package
// conversion); the CRD schema in crd/ remains the first line of validation and the one source of
// defaults.
package api

import (
	"fmt"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
)

// The ManagedCache API.
var (
	// GroupVersion is the version the operator reads and writes: v2, the hub and the storage
	// version, so that none of its requests (nor its informers' lists) needs the conversion
	// webhook, and its managedFields entries are in the version the API server stores.
	GroupVersion = schema.GroupVersion{Group: "cache.example.com", Version: "v2"}
	// Kind is the ManagedCache kind.
	Kind = "ManagedCache"
	// Resource is the ManagedCache resource.
	Resource = GroupVersion.WithResource("managedcaches")
	// OwnerAPIVersion is the apiVersion of the children's owner references. The garbage collector
	// reads an owner in this version, so it is the storage version: no conversion, and so no
	// operator, is needed to collect a deleted cache's children.
	OwnerAPIVersion = GroupVersion.String()
)

// CRDName is the name of the ManagedCache CustomResourceDefinition.
const CRDName = "managedcaches.cache.example.com"

// CRDResource is the resource of CustomResourceDefinitions.
var CRDResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// FieldManager is the operator's field manager in every write, and the stem of its user agent.
const FieldManager = "cache-operator"

// Finalizer is set on a ManagedCache only while the operator has work to do before it goes.
const Finalizer = "cache.example.com/finalizer"

// SecretFinalizer keeps a cache's password Secret while the cache uses it, as Kubernetes'
// kubernetes.io/pvc-protection keeps a claim a pod uses: a `kubectl delete` of the Secret only
// marks it for deletion, its passwords stay in force (the members and the operator keep them), and
// the operator lets it go when the cache itself is deleted.
const SecretFinalizer = "cache.example.com/credentials-in-use"

// Port is the port every member serves on, and the port of the cache's Services.
const Port = 6379

// ClusterBusPort is the port a sharded cache's members gossip on (the cluster bus: Port + 10000,
// the engines' default).
const ClusterBusPort = Port + 10000

// LabelShard is the label of a sharded cache's member pods (and their claims) with the index of
// their shard ("0" to spec.shards-1); ShardSetName is the shard's StatefulSet, <name>-s<shard>
// (its members are <name>-s<shard>-<ordinal>), which is also its PodDisruptionBudget's name.
const LabelShard = "cache.example.com/shard"

// ShardSetName is the name of shard i's StatefulSet and PodDisruptionBudget.
func ShardSetName(cacheName string, i int) string { return fmt.Sprintf("%s-s%d", cacheName, i) }

// IsMemberSet reports whether a StatefulSet of this name holds the cache's members: the cache's
// own, or one of its shards' (<name>-s<shard>).
func IsMemberSet(cacheName, setName string) bool {
	if setName == cacheName {
		return true
	}
	rest, found := strings.CutPrefix(setName, cacheName+"-s")
	return found && digits(rest)
}

// ShardOfSet reads a shard's StatefulSet name, <name>-s<shard>: its shard; ok is false for any
// other name.
func ShardOfSet(cacheName, setName string) (int, bool) {
	rest, found := strings.CutPrefix(setName, cacheName+"-s")
	if !found || !digits(rest) {
		return 0, false
	}
	shard, err := strconv.Atoi(rest)
	return shard, err == nil
}

// ShardMemberOf reads a sharded cache's member pod name, <name>-s<shard>-<ordinal>: its shard and
// ordinal; ok is false for any other name.
func ShardMemberOf(cacheName, podName string) (shard, ordinal int, ok bool) {
	rest, found := strings.CutPrefix(podName, cacheName+"-s")
	if !found {
		return 0, 0, false
	}
	s, o, found := strings.Cut(rest, "-")
	if !found || !digits(s) || !digits(o) {
		return 0, 0, false
	}
	shard, err1 := strconv.Atoi(s)
	ordinal, err2 := strconv.Atoi(o)
	return shard, ordinal, err1 == nil && err2 == nil
}

// digits: s is a number as a StatefulSet writes one (no sign, no leading zero but "0").
func digits(s string) bool {
	if s == "" || len(s) > 1 && s[0] == '0' {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// DefaultClusterDomain is the cluster's DNS domain when no flag says otherwise.
const DefaultClusterDomain = "cluster.local"

// PasswordKey is the key of the clients' password in a cache's Secret: the password of the
// server's default user. The operator generates it once; a user may change it (a rotation).
const PasswordKey = "password"

// The other keys of a cache's Secret, which the operator keeps.
const (
	// InternalPasswordKey holds the password of InternalUser: generated once, rotated (with an
	// overlap) when RotateInternalPasswordAnnotation asks.
	InternalPasswordKey = "internal-password"
	// PreviousInternalPasswordKey holds, during an internal rotation's overlap, the internal
	// password before it, which the members accept too (the operator reaches a member not yet
	// given the new one with it) until PreviousInternalUntilAnnotation.
	PreviousInternalPasswordKey = "previous-internal-password"
	// PasswordHashKey holds the SHA-256 (hex) of the clients' password the members accept: the
	// Secret's password once the operator has accepted it. Members start with it (a hash, never
	// the password itself, goes into their configuration).
	PasswordHashKey = "password-sha256"
	// PreviousPasswordHashKey holds, during a rotation's overlap, the SHA-256 of the password
	// before it, which the members accept too until PreviousPasswordUntilAnnotation.
	PreviousPasswordHashKey = "previous-password-sha256"
)

// InternalUser is the server user that the operator, the probes and replication (masteruser)
// authenticate as, with the Secret's InternalPasswordKey: none of them depends on the clients'
// password, so rotating it cannot break them.
const InternalUser = "internal"

// Annotations of a cache's Secret, kept by the operator.
const (
	// PasswordRevisionAnnotation counts the clients' passwords the operator has accepted: 1 for
	// the first, one more at each rotation. Status reports it per member.
	PasswordRevisionAnnotation = "cache.example.com/password-revision"
	// PreviousPasswordUntilAnnotation is when the overlap of a rotation ends (RFC 3339): from then
	// the previous password is refused.
	PreviousPasswordUntilAnnotation = "cache.example.com/previous-password-until"
	// PasswordRotatedForAnnotation is the value of RotatePasswordAnnotation that the current
	// password was generated for.
	PasswordRotatedForAnnotation = "cache.example.com/password-rotated-for"
	// PreviousInternalUntilAnnotation is when the overlap of an internal rotation ends (RFC 3339).
	PreviousInternalUntilAnnotation = "cache.example.com/previous-internal-password-until"
	// InternalRotatedForAnnotation is the value of RotateInternalPasswordAnnotation that the
	// current internal password was generated for.
	InternalRotatedForAnnotation = "cache.example.com/internal-password-rotated-for"
)

// RotateInternalPasswordAnnotation on a ManagedCache asks for a new internal password (the
// operator's, the probes' and replication's): each new value rotates once, with the same overlap
// as the clients' password.
const RotateInternalPasswordAnnotation = "cache.example.com/rotate-internal-password"

// RotatePasswordAnnotation on a ManagedCache asks for a new generated password: each new value
// (any string, e.g. a date) rotates once.
const RotatePasswordAnnotation = "cache.example.com/rotate-password"

// RotateCertificatesAnnotation on a ManagedCache asks for new TLS certificates now: each new value
// renews the members' certificate once (CertificatesRotatedForAnnotation on the TLS Secret records
// the value served).
const (
	RotateCertificatesAnnotation     = "cache.example.com/rotate-certificates"
	CertificatesRotatedForAnnotation = "cache.example.com/certificates-rotated-for"
)

// TLSSecretName returns the name of a TLS cache's Secret: its CA and its members' certificate.
func TLSSecretName(cacheName string) string { return cacheName + "-tls" }

// CAConfigMapName returns the name of the ConfigMap that publishes a TLS cache's CA bundle for
// clients (key CAKey).
func CAConfigMapName(cacheName string) string { return cacheName + "-ca" }

// CAKey is the key of the CA bundle in the TLS Secret and in the CA ConfigMap.
const CAKey = "ca.crt"

// LabelServer is on every member's pod (from the pod template): the server it runs,
// "<engine>-<version>" (redis-8.0), so that a member pass knows which data a member on an older
// revision holds.
const LabelServer = "cache.example.com/server"

// ServerLabelValue is the value of LabelServer for engine and version.
func ServerLabelValue(engine, version string) string { return engine + "-" + version }

// ParseServerLabel reads a LabelServer value.
func ParseServerLabel(v string) (engine, version string, ok bool) {
	engine, version, ok = strings.Cut(v, "-")
	return engine, version, ok && engine != "" && version != ""
}

// AllowDataLossAnnotation, "true", lets a version or engine change that the data cannot survive
// through (the webhook refuses it otherwise): every member restarts at once on the new version
// and discards the data it cannot read, and the loss is reported (Event DataDiscarded, a metric).
const AllowDataLossAnnotation = "cache.example.com/allow-data-loss"

// AllowDataLossKey is the ConfigMap's key that says so to the members' start ("true" or "false").
const AllowDataLossKey = "allow-data-loss"

// LabelTLS ("true") is on the pods of a member that serves TLS only (from the pod template), so
// that the operator dials it with TLS.
const LabelTLS = "cache.example.com/tls"

// SecretName returns the name of the Secret that holds a cache's password. The operator reads the
// password from this Secret before rendering, so the name is fixed here, not in a template.
func SecretName(cacheName string) string { return cacheName + "-auth" }

// ConfigName returns the name of the ConfigMap that holds a cache's live settings: the ones the
// server applies while it runs (CONFIG SET), which the member passes read to apply them.
func ConfigName(cacheName string) string { return cacheName + "-config" }

// LiveConfigKey is the key of the live settings in that ConfigMap: redis.conf lines ("name
// value"), each value as CONFIG GET reports it.
const LiveConfigKey = "live.conf"

// UsersConfigKey is the key of the server users' permissions in that ConfigMap: one line per user,
// "<user> <ACL rules>" (templates/_helpers.tpl, users.acl), without passwords. A member starts
// with them and the operator applies a change live (ACL SETUSER).
const UsersConfigKey = "users.acl"

// Standard label keys and values carried by every child.
const (
	LabelName      = "app.kubernetes.io/name"
	LabelInstance  = "app.kubernetes.io/instance"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedByValue is the value of LabelManagedBy on every child.
	ManagedByValue = FieldManager
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

// The role label: the operator sets it on each member's pod from what the member's server reports
// (INFO replication). The read-only Service selects the replicas.
//
// The read-write label (value "true") is on the primary, and is what the read-write Service
// selects. It follows the role label, except in a handover, where it is put on the new primary
// before any role label moves: the first change kube-proxy sees is then the read-write Service's
// alone (with a change to both Services at once, kube-proxy may apply the read-only one first
// and the read-write one only after its minimum sync period, 1 s by default).
const (
	LabelRole      = "cache.example.com/role"
	RolePrimary    = "primary"
	RoleReplica    = "replica"
	LabelReadWrite = "cache.example.com/read-write"
)

// SwitchoverAnnotation on a ManagedCache names the member (a pod name) that should become the
// primary; the operator hands over to it and then removes the annotation.
const SwitchoverAnnotation = "cache.example.com/switchover-to"

// ReadWriteService is the name of the Service that reaches the primary only.
func ReadWriteService(cacheName string) string { return cacheName + "-rw" }

// ReadOnlyService is the name of the Service that reaches the ready replicas only.
func ReadOnlyService(cacheName string) string { return cacheName + "-ro" }

// ServiceHost returns the DNS name of the Service name in namespace ns.
func ServiceHost(name, ns, clusterDomain string) string {
	return fmt.Sprintf("%s.%s.svc.%s", name, ns, clusterDomain)
}

// OwnerReference returns the controller reference a child of mc carries.
func OwnerReference(mc *unstructured.Unstructured) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion:         OwnerAPIVersion,
		Kind:               Kind,
		Name:               mc.GetName(),
		UID:                mc.GetUID(),
		Controller:         ptr.To(true),
		BlockOwnerDeletion: ptr.To(true),
	}
}

// IsManagedCacheRef reports whether ref points at a ManagedCache (any version of the group).
func IsManagedCacheRef(ref *metav1.OwnerReference) bool {
	if ref == nil || ref.Kind != Kind {
		return false
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	return err == nil && gv.Group == GroupVersion.Group
}
