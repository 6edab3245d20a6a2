package controller

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/render"
)

// passwordBytes is the number of random bytes in a generated password.
const passwordBytes = 32

// maxPasswordBytes bounds a password a user sets.
const maxPasswordBytes = 512

// newPassword returns 32 bytes from crypto/rand, hex-encoded.
func newPassword() (string, error) {
	b := make([]byte, passwordBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generating password: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// secretValue returns the decoded value of key in a live Secret ("" when it holds none).
func secretValue(secret *unstructured.Unstructured, key string) string {
	if secret == nil {
		return ""
	}
	enc, _, _ := unstructured.NestedString(secret.Object, "data", key)
	dec, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return ""
	}
	return string(dec)
}

// passwordFrom returns the clients' password held by a live Secret ("" when it holds none).
func passwordFrom(secret *unstructured.Unstructured) string {
	return secretValue(secret, api.PasswordKey)
}

// isHex reports whether s is non-empty lowercase hex of length n (any length when n is 0).
func isHex(s string, n int) bool {
	if s == "" || (n > 0 && len(s) != n) {
		return false
	}
	for _, r := range s {
		if (r < '0' || r > '9') && (r < 'a' || r > 'f') {
			return false
		}
	}
	return true
}

// checkPassword says why a clients' password the user set is refused: it must be 1 to 512
// bytes of UTF-8 without whitespace or control characters. Quotes, backslashes and every other
// printable character are fine: the members are given only its hash, and the operator sends it
// nowhere. What is refused is what clients cannot send reliably (redis-cli, URLs, AUTH typed by
// hand split at whitespace) and what looks like an attempt to add lines to a configuration.
// The message never contains the password.
func checkPassword(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("the Secret's %q is empty", api.PasswordKey)
	case len(p) > maxPasswordBytes:
		return fmt.Errorf("the Secret's %q has %d bytes; at most %d are accepted", api.PasswordKey, len(p), maxPasswordBytes)
	case !utf8.ValidString(p):
		return fmt.Errorf("the Secret's %q is not valid UTF-8", api.PasswordKey)
	}
	for i, r := range p {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return fmt.Errorf("the Secret's %q has whitespace or a control character (%U at byte %d): not accepted", api.PasswordKey, r, i)
		}
	}
	return nil
}

// authDecision is what a reconcile makes of a cache's credentials.
type authDecision struct {
	auth render.Auth
	// rejected says why the Secret's password was not accepted ("" when it was): the members
	// keep the password of auth.PasswordHash.
	rejected string
	// rejectedHash identifies the refused value (its hash), so that it is reported once.
	rejectedHash string
	// rotated: this reconcile accepted a new password (a revision more).
	rotated bool
	// overlapEnds is when the previous password is to be dropped (zero: no overlap).
	overlapEnds time.Time
}

// decideAuth works out a cache's credentials from its live Secret (nil: none yet), its
// rotate-password annotation and the time, deterministically: a Secret that is already right gives
// back exactly what it holds.
//   - No Secret: both passwords generated, revision 1.
//   - A Secret without the operator's keys (made by an older operator): the internal password is
//     generated and the password's hash added; the members already run with that password.
//   - A rotate-password annotation value not yet served: a new password is generated.
//   - A password whose hash is not the accepted one: checked (checkPassword); accepted, it becomes
//     the new revision and the old hash is kept as the previous one until now+overlap; refused,
//     everything stays as it is and rejected says why.
//   - An overlap that has ended: the previous hash is dropped.
func decideAuth(secret *unstructured.Unstructured, rotateToken string, now time.Time, overlap time.Duration) (authDecision, error) {
	if secret == nil {
		pw, err := newPassword()
		if err != nil {
			return authDecision{}, err
		}
		internal, err := newPassword()
		if err != nil {
			return authDecision{}, err
		}
		return authDecision{auth: render.Auth{Password: pw, Internal: internal, PasswordHash: render.PasswordHash(pw), Revision: 1, RotatedFor: rotateToken}}, nil
	}
	ann := secret.GetAnnotations()
	a := render.Auth{
		Password:      passwordFrom(secret),
		Internal:      secretValue(secret, api.InternalPasswordKey),
		PasswordHash:  secretValue(secret, api.PasswordHashKey),
		PreviousHash:  secretValue(secret, api.PreviousPasswordHashKey),
		PreviousUntil: ann[api.PreviousPasswordUntilAnnotation],
		RotatedFor:    ann[api.PasswordRotatedForAnnotation],
	}
	a.Revision, _ = strconv.ParseInt(ann[api.PasswordRevisionAnnotation], 10, 64)
	if a.Revision < 1 {
		a.Revision = 1
	}
	if !isHex(a.Internal, 2*passwordBytes) {
		// An older operator's Secret, or one edited: a new internal password, which the member
		// pass gives the members (as the clients' default user) before anything uses it.
		internal, err := newPassword()
		if err != nil {
			return authDecision{}, err
		}
		a.Internal = internal
	}
	var d authDecision
	if a.Password == "" && !isHex(a.PasswordHash, 64) {
		// Nothing accepted and nothing set: a password as for a new cache.
		rotateToken = "" // served by this one
		pw, err := newPassword()
		if err != nil {
			return authDecision{}, err
		}
		a.Password = pw
	}
	if rotateToken != "" && rotateToken != a.RotatedFor {
		pw, err := newPassword()
		if err != nil {
			return authDecision{}, err
		}
		a.Password, a.RotatedFor = pw, rotateToken
	}
	switch h := render.PasswordHash(a.Password); {
	case !isHex(a.PasswordHash, 64):
		// No accepted password on record: the members run with the Secret's (an older
		// operator's cache), whatever it is; only its hash goes anywhere.
		a.PasswordHash = h
	case h != a.PasswordHash:
		if err := checkPassword(a.Password); err != nil {
			d.rejected, d.rejectedHash = err.Error(), h
			break
		}
		a.PreviousHash, a.PasswordHash = a.PasswordHash, h
		a.PreviousUntil = now.Add(overlap).UTC().Format(time.RFC3339)
		a.Revision++
		d.rotated = true
	}
	if a.PreviousHash != "" {
		until, err := time.Parse(time.RFC3339, a.PreviousUntil)
		if err != nil || !now.Before(until) || !isHex(a.PreviousHash, 64) {
			a.PreviousHash, a.PreviousUntil = "", ""
		} else {
			d.overlapEnds = until
		}
	} else {
		a.PreviousUntil = ""
	}
	d.auth = a
	return d, nil
}
