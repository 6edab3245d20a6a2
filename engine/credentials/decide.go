package credentials

import (
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"example.com/cache-operator/engine/render"
)

// DefaultPasswordOverlap is how long the previous clients' password is still accepted after a
// rotation when no flag says otherwise: long enough for clients that read the Secret at start to
// be restarted by their owners, short enough that a leaked password dies soon.
const DefaultPasswordOverlap = 10 * time.Minute

// Decision is what a reconcile makes of a cache's credentials.
type Decision struct {
	// Auth is what the Secret is to hold (rendered by the Secret's template).
	Auth render.Auth
	// Rejected says why the Secret's password was not accepted ("" when it was): the members
	// keep the password of Auth.PasswordHash.
	Rejected string
	// RejectedHash identifies the refused value (its hash), so that it is reported once.
	RejectedHash string
	// Rotated: this reconcile accepted a new password (a revision more).
	Rotated bool
	// SecretVersion is the resourceVersion of the Secret decided from ("": none yet). The
	// Secret's write carries it, so that a user's edit made after the read is never overwritten:
	// the write conflicts, and the next reconcile decides from the edit.
	SecretVersion string
	// InternalRotated: this reconcile generated a new internal password.
	InternalRotated bool
	// OverlapEnds is when the previous password (of either user) is next to be dropped (zero: no
	// overlap).
	OverlapEnds time.Time
}

// Tokens are the values of a ManagedCache's rotation annotations.
type Tokens struct {
	// Password is the rotate-password annotation's, Internal the rotate-internal-password one's.
	Password, Internal string
}

// Decide works out a cache's credentials from its live Secret (nil: none yet), its rotation
// annotations and the time, deterministically: a Secret that is already right gives back exactly
// what it holds.
//   - No Secret: both passwords generated, revision 1.
//   - A Secret without the operator's keys (made by an older operator): the internal password is
//     generated and the password's hash added; the members already run with that password.
//   - A rotate-password annotation value not yet served: a new password is generated, unless the
//     Secret holds a password the user set that is not yet accepted: that one serves it (the
//     user's edit wins over a generated value).
//   - A rotate-internal-password annotation value not yet served: a new internal password, the
//     previous one kept until now+overlap.
//   - A password whose hash is not the accepted one: checked (checkPassword); accepted, it becomes
//     the new revision and the old hash is kept as the previous one until now+overlap; refused,
//     everything stays as it is and rejected says why.
//   - An overlap that has ended: the previous hash is dropped.
func Decide(secret *unstructured.Unstructured, tokens Tokens, now time.Time, overlap time.Duration) (Decision, error) {
	rotateToken := tokens.Password
	s, ok := Parse(secret)
	if !ok {
		pw, err := newPassword()
		if err != nil {
			return Decision{}, err
		}
		internal, err := newPassword()
		if err != nil {
			return Decision{}, err
		}
		return Decision{Auth: render.Auth{Password: pw, Internal: internal, PasswordHash: render.PasswordHash(pw), Revision: 1,
			RotatedFor: rotateToken, InternalRotatedFor: tokens.Internal}}, nil
	}
	a := render.Auth{
		Password: s.Password, Internal: s.Internal, PasswordHash: s.PasswordHash, PreviousHash: s.PreviousHash,
		PreviousUntil: s.PreviousUntil, RotatedFor: s.RotatedFor, Revision: max(s.Revision, 1),
		PreviousInternal: s.PreviousInternal, PreviousInternalUntil: s.PreviousInternalUntil, InternalRotatedFor: s.InternalRotatedFor,
	}
	if a.Internal == "" {
		// An older operator's Secret, or one edited: a new internal password, which the member
		// pass gives the members (as the clients' default user) before anything uses it.
		internal, err := newPassword()
		if err != nil {
			return Decision{}, err
		}
		a.Internal = internal
		a.PreviousInternal, a.PreviousInternalUntil = "", ""
	}
	var d Decision
	if tokens.Internal != "" && tokens.Internal != a.InternalRotatedFor {
		internal, err := newPassword()
		if err != nil {
			return Decision{}, err
		}
		a.PreviousInternal, a.Internal, a.InternalRotatedFor = a.Internal, internal, tokens.Internal
		a.PreviousInternalUntil = now.Add(overlap).UTC().Format(time.RFC3339)
		d.InternalRotated = true
	}
	if a.Password == "" && a.PasswordHash == "" {
		// Nothing accepted and nothing set: a password as for a new cache.
		rotateToken = "" // served by this one
		pw, err := newPassword()
		if err != nil {
			return Decision{}, err
		}
		a.Password = pw
	}
	if rotateToken != "" && rotateToken != a.RotatedFor {
		if a.PasswordHash != "" && render.PasswordHash(a.Password) != a.PasswordHash && checkPassword(a.Password) == nil {
			// The user set a password that is not yet accepted (an edit that raced the
			// annotation, or came first): it is the new password this value asked for.
			a.RotatedFor = rotateToken
		} else {
			pw, err := newPassword()
			if err != nil {
				return Decision{}, err
			}
			a.Password, a.RotatedFor = pw, rotateToken
		}
	}
	switch h := render.PasswordHash(a.Password); {
	case a.PasswordHash == "":
		// No accepted password on record: the members run with the Secret's (an older
		// operator's cache), whatever it is; only its hash goes anywhere.
		a.PasswordHash = h
	case h != a.PasswordHash:
		if err := checkPassword(a.Password); err != nil {
			d.Rejected, d.RejectedHash = err.Error(), h
			break
		}
		a.PreviousHash, a.PasswordHash = a.PasswordHash, h
		a.PreviousUntil = now.Add(overlap).UTC().Format(time.RFC3339)
		a.Revision++
		d.Rotated = true
	}
	d.SecretVersion = secret.GetResourceVersion()
	if a.PreviousHash != "" {
		until, err := time.Parse(time.RFC3339, a.PreviousUntil)
		if err != nil || !now.Before(until) {
			a.PreviousHash, a.PreviousUntil = "", ""
		} else {
			d.OverlapEnds = until
		}
	} else {
		a.PreviousUntil = ""
	}
	if a.PreviousInternal != "" {
		until, err := time.Parse(time.RFC3339, a.PreviousInternalUntil)
		if err != nil || !now.Before(until) {
			a.PreviousInternal, a.PreviousInternalUntil = "", ""
		} else if d.OverlapEnds.IsZero() || until.Before(d.OverlapEnds) {
			d.OverlapEnds = until
		}
	} else {
		a.PreviousInternalUntil = ""
	}
	d.Auth = a
	return d, nil
}
