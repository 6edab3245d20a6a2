// Package credentials is everything about a cache's passwords: its Secret, read in one place
// (Parse); what a reconcile makes of it (Decide: generated once, a rotation with an overlap, a
// refused value); what the members are to accept (Of), and giving it to one member's server
// (Sync). The clients' password reaches members only as its SHA-256 hash; the internal user,
// which the operator, the probes and replication use, has its own password.
//
// It is not for scheduling: the reconcile (package controller) writes the Secret, and the member
// passes (package dataplane) decide which members to Sync and when.
package credentials

import (
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"example.com/cache-operator/engine/api"
)

// Secret is what a cache's Secret holds. Values this operator would not have written (an
// internal password or a hash that is not lowercase hex of the right length) read as absent.
type Secret struct {
	// Password is the clients' password as set (by the operator, or by a user).
	Password string
	// Internal is the internal user's password.
	Internal string
	// PreviousInternal is the internal password before the last internal rotation, accepted
	// until PreviousInternalUntil (RFC 3339).
	PreviousInternal, PreviousInternalUntil string
	// InternalRotatedFor is the rotate-internal-password annotation value last served.
	InternalRotatedFor string
	// PasswordHash is the SHA-256 of the accepted clients' password; PreviousHash that of the
	// previous one, accepted until PreviousUntil (RFC 3339).
	PasswordHash, PreviousHash, PreviousUntil string
	// RotatedFor is the rotate-password annotation value last served.
	RotatedFor string
	// Revision counts the accepted passwords (0: not recorded).
	Revision int64
}

// Parse reads a cache's live Secret (false: there is none).
func Parse(secret *unstructured.Unstructured) (Secret, bool) {
	if secret == nil {
		return Secret{}, false
	}
	value := func(key string) string {
		enc, _, _ := unstructured.NestedString(secret.Object, "data", key)
		dec, err := base64.StdEncoding.DecodeString(enc)
		if err != nil {
			return ""
		}
		return string(dec)
	}
	hexOrEmpty := func(s string, n int) string {
		if isHex(s, n) {
			return s
		}
		return ""
	}
	ann := secret.GetAnnotations()
	s := Secret{
		Password:              value(api.PasswordKey),
		Internal:              hexOrEmpty(value(api.InternalPasswordKey), 2*passwordBytes),
		PreviousInternal:      hexOrEmpty(value(api.PreviousInternalPasswordKey), 2*passwordBytes),
		PreviousInternalUntil: ann[api.PreviousInternalUntilAnnotation],
		InternalRotatedFor:    ann[api.InternalRotatedForAnnotation],
		PasswordHash:          hexOrEmpty(value(api.PasswordHashKey), 64),
		PreviousHash:          hexOrEmpty(value(api.PreviousPasswordHashKey), 64),
		PreviousUntil:         ann[api.PreviousPasswordUntilAnnotation],
		RotatedFor:            ann[api.PasswordRotatedForAnnotation],
	}
	s.Revision, _ = strconv.ParseInt(ann[api.PasswordRevisionAnnotation], 10, 64)
	return s, true
}

// Credentials are what the members of a cache are to have, from its Secret.
type Credentials struct {
	// Password is the clients' password (the fallback to reach an older operator's member).
	Password string
	// Internal is the internal user's password ("": not yet written by this operator; reach
	// members as the default user).
	Internal string
	// PreviousInternal is, during an internal rotation's overlap, the password before it: the
	// members accept both, and a member not yet given Internal is reached with it.
	PreviousInternal string
	// Hashes are the SHA-256 of the passwords the default user is to accept, sorted.
	Hashes   []string
	Revision int64
	// Key digests the above, so that a member found current is not read again for it.
	Key string
	// TLS, for a TLS cache, is how its members are dialled (their certificate chained to the
	// cache's CA), TLSKey names it; nil for a cache without TLS.
	TLS    *tls.Config
	TLSKey string
}

// Of reads the credentials of a cache's live Secret (false: none yet).
func Of(secret *unstructured.Unstructured) (Credentials, bool) {
	s, ok := Parse(secret)
	if !ok {
		return Credentials{}, false
	}
	cr := Credentials{Password: s.Password, Internal: s.Internal}
	if s.PreviousInternal != s.Internal {
		cr.PreviousInternal = s.PreviousInternal
	}
	if s.PasswordHash != "" {
		cr.Hashes = append(cr.Hashes, s.PasswordHash)
		if s.PreviousHash != "" && s.PreviousHash != s.PasswordHash {
			cr.Hashes = append(cr.Hashes, s.PreviousHash)
		}
		slices.Sort(cr.Hashes)
		cr.Revision = s.Revision
	}
	if cr.Password == "" && cr.Internal == "" {
		return cr, false
	}
	h := fnv.New64a()
	for _, v := range append([]string{cr.Internal, cr.PreviousInternal, strconv.FormatInt(cr.Revision, 10)}, cr.Hashes...) {
		_, _ = h.Write([]byte(v))
		_, _ = h.Write([]byte{0})
	}
	cr.Key = strconv.FormatUint(h.Sum64(), 16)
	return cr, true
}

// Keep puts into want, a cache's Secret as rendered, the data and the operator's annotations that
// live holds: credentials rendered without the Secret in view were generated anew, and what the
// Secret holds wins.
func Keep(want, live *unstructured.Unstructured) error {
	data, found, _ := unstructured.NestedMap(live.Object, "data")
	if !found || len(data) == 0 {
		return nil
	}
	if err := unstructured.SetNestedMap(want.Object, data, "data"); err != nil {
		return fmt.Errorf("keeping the Secret's data: %w", err)
	}
	ann := want.GetAnnotations()
	for _, k := range []string{api.PasswordRevisionAnnotation, api.PreviousPasswordUntilAnnotation, api.PasswordRotatedForAnnotation,
		api.PreviousInternalUntilAnnotation, api.InternalRotatedForAnnotation} {
		delete(ann, k)
		if v, ok := live.GetAnnotations()[k]; ok {
			if ann == nil {
				ann = map[string]string{}
			}
			ann[k] = v
		}
	}
	want.SetAnnotations(ann)
	return nil
}
