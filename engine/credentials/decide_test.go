package credentials

import (
	"encoding/base64"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/render"
)

// secretOf is the Secret the template renders for a, as the API server would hold it.
func secretOf(a render.Auth) *unstructured.Unstructured {
	data := map[string]interface{}{
		api.PasswordKey:         base64.StdEncoding.EncodeToString([]byte(a.Password)),
		api.InternalPasswordKey: base64.StdEncoding.EncodeToString([]byte(a.Internal)),
		api.PasswordHashKey:     base64.StdEncoding.EncodeToString([]byte(a.PasswordHash)),
	}
	ann := map[string]string{api.PasswordRevisionAnnotation: strconv.FormatInt(a.Revision, 10)}
	if a.PreviousInternal != "" {
		data[api.PreviousInternalPasswordKey] = base64.StdEncoding.EncodeToString([]byte(a.PreviousInternal))
		ann[api.PreviousInternalUntilAnnotation] = a.PreviousInternalUntil
	}
	if a.InternalRotatedFor != "" {
		ann[api.InternalRotatedForAnnotation] = a.InternalRotatedFor
	}
	if a.PreviousHash != "" {
		data[api.PreviousPasswordHashKey] = base64.StdEncoding.EncodeToString([]byte(a.PreviousHash))
		ann[api.PreviousPasswordUntilAnnotation] = a.PreviousUntil
	}
	if a.RotatedFor != "" {
		ann[api.PasswordRotatedForAnnotation] = a.RotatedFor
	}
	s := &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "v1", "kind": "Secret", "data": data}}
	s.SetName("c-auth")
	s.SetAnnotations(ann)
	return s
}

func withPassword(s *unstructured.Unstructured, pw string) *unstructured.Unstructured {
	s = s.DeepCopy()
	_ = unstructured.SetNestedField(s.Object, base64.StdEncoding.EncodeToString([]byte(pw)), "data", api.PasswordKey)
	return s
}

func mustDecide(t *testing.T, s *unstructured.Unstructured, token string, now time.Time) Decision {
	t.Helper()
	d, err := Decide(s, Tokens{Password: token}, now, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// decideAuth: generated once, then stable; a rotation overlaps for the configured time and then
// drops the previous password; a refused value changes nothing; the annotation rotates once per
// value; an older operator's Secret gains the keys without a rotation.
func TestDecideAuth(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	first := mustDecide(t, nil, "", now)
	a := first.Auth
	if !isHex(a.Password, 64) || !isHex(a.Internal, 64) || a.Password == a.Internal || a.PasswordHash != render.PasswordHash(a.Password) || a.Revision != 1 || a.PreviousHash != "" {
		t.Fatalf("new cache: %+v", a)
	}
	// Stable: deciding again from what was written gives it back, at any later time.
	if again := mustDecide(t, secretOf(a), "", now.Add(time.Hour)); again.Auth != a || again.Rotated || again.Rejected != "" {
		t.Fatalf("deciding from the written Secret: %+v, want %+v", again.Auth, a)
	}

	// A user's new password, quotes and backslashes included: accepted, with an overlap.
	const users = `n"ew\pa'ss`
	rot := mustDecide(t, withPassword(secretOf(a), users), "", now)
	if !rot.Rotated || rot.Auth.Revision != 2 || rot.Auth.PasswordHash != render.PasswordHash(users) || rot.Auth.PreviousHash != a.PasswordHash ||
		rot.Auth.PreviousUntil != "2026-12-01T12:10:00Z" || !rot.OverlapEnds.Equal(now.Add(10*time.Minute)) || rot.Auth.Internal != a.Internal {
		t.Fatalf("rotation: %+v", rot)
	}
	during := mustDecide(t, secretOf(rot.Auth), "", now.Add(9*time.Minute))
	if during.Auth != rot.Auth || during.Rotated {
		t.Fatalf("during the overlap: %+v, want %+v", during.Auth, rot.Auth)
	}
	after := mustDecide(t, secretOf(rot.Auth), "", now.Add(10*time.Minute))
	if after.Auth.PreviousHash != "" || after.Auth.PreviousUntil != "" || after.Auth.Revision != 2 || !after.OverlapEnds.IsZero() {
		t.Fatalf("after the overlap: %+v", after.Auth)
	}

	// Hostile values: refused, nothing changes, the message does not carry the value.
	for _, bad := range []string{"", "two\nlines", "x\nreplicaof 198.18.0.1 6379", "tab\there", "sp ace", "nul\x00", "\xff\xfe", strings.Repeat("a", 513)} {
		d := mustDecide(t, withPassword(secretOf(a), bad), "", now)
		if d.Rejected == "" || d.Rotated || d.Auth.PasswordHash != a.PasswordHash || d.Auth.Revision != 1 || d.Auth.PreviousHash != "" {
			t.Errorf("%q: %+v", bad, d)
		}
		if len(bad) > 2 && strings.Contains(d.Rejected, bad) {
			t.Errorf("%q: the message carries the value: %s", bad, d.Rejected)
		}
	}

	// The annotation: a new password once per value.
	byToken := mustDecide(t, secretOf(a), "2026-12-01", now)
	if !byToken.Rotated || byToken.Auth.Password == a.Password || !isHex(byToken.Auth.Password, 64) || byToken.Auth.RotatedFor != "2026-12-01" || byToken.Auth.Revision != 2 {
		t.Fatalf("rotation by annotation: %+v", byToken.Auth)
	}
	if again := mustDecide(t, secretOf(byToken.Auth), "2026-12-01", now.Add(time.Minute)); again.Rotated || again.Auth != byToken.Auth {
		t.Fatalf("the same annotation value rotated again: %+v", again.Auth)
	}
	// A new cache records the value it was created under, and does not rotate for it.
	if d := mustDecide(t, nil, "t1", now); d.Auth.RotatedFor != "t1" || d.Rotated {
		t.Fatalf("new cache with an annotation: %+v", d)
	}

	// An older operator's Secret (only the password): the keys are added, no rotation.
	old := &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "v1", "kind": "Secret",
		"data": map[string]interface{}{api.PasswordKey: base64.StdEncoding.EncodeToString([]byte("legacy"))}}}
	up := mustDecide(t, old, "", now)
	if up.Rotated || up.Auth.Password != "legacy" || up.Auth.PasswordHash != render.PasswordHash("legacy") || !isHex(up.Auth.Internal, 64) || up.Auth.Revision != 1 {
		t.Fatalf("older Secret: %+v", up.Auth)
	}
}

// A user's edit and the rotate-password annotation, seen by the same reconcile (the edit raced a
// generated rotation's write, which conflicted): the user's password serves the annotation.
func TestDecideUserEditWinsOverTheAnnotation(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	a := mustDecide(t, nil, "", now).Auth
	edited := withPassword(secretOf(a), "the-users-own")
	edited.SetResourceVersion("42")
	d := mustDecide(t, edited, "rotate-1", now)
	if d.Auth.Password != "the-users-own" || d.Auth.PasswordHash != render.PasswordHash("the-users-own") || !d.Rotated || d.Auth.RotatedFor != "rotate-1" || d.Auth.Revision != 2 {
		t.Fatalf("the user's edit did not win: %+v", d.Auth)
	}
	if d.SecretVersion != "42" {
		t.Fatalf("SecretVersion %q, want the read Secret's 42", d.SecretVersion)
	}
	// A refused edit does not serve it: a generated password does.
	bad := mustDecide(t, withPassword(secretOf(a), "two words"), "rotate-1", now)
	if bad.Auth.Password == "two words" || !isHex(bad.Auth.Password, 64) || bad.Auth.RotatedFor != "rotate-1" {
		t.Fatalf("a refused edit served the annotation: %+v", bad.Auth)
	}
}

// The internal password: rotated once per annotation value, the previous one kept (and accepted
// by the members) until the overlap ends; the clients' password untouched.
func TestDecideInternalRotation(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	a := mustDecide(t, nil, "", now).Auth
	rot, err := Decide(secretOf(a), Tokens{Internal: "i1"}, now, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	r := rot.Auth
	if !rot.InternalRotated || rot.Rotated || r.Internal == a.Internal || !isHex(r.Internal, 64) || r.PreviousInternal != a.Internal ||
		r.PreviousInternalUntil != "2026-12-01T12:10:00Z" || r.InternalRotatedFor != "i1" || r.Password != a.Password || r.Revision != a.Revision {
		t.Fatalf("internal rotation: %+v", rot)
	}
	if !rot.OverlapEnds.Equal(now.Add(10 * time.Minute)) {
		t.Fatalf("overlap ends %v", rot.OverlapEnds)
	}
	again, _ := Decide(secretOf(r), Tokens{Internal: "i1"}, now.Add(time.Minute), 10*time.Minute)
	if again.InternalRotated || again.Auth != r {
		t.Fatalf("the same value rotated again: %+v", again.Auth)
	}
	cr, _ := Of(secretOf(r))
	if cr.Internal != r.Internal || cr.PreviousInternal != a.Internal {
		t.Fatalf("credentials during the overlap: %+v", cr)
	}
	after, _ := Decide(secretOf(r), Tokens{Internal: "i1"}, now.Add(10*time.Minute), 10*time.Minute)
	if after.Auth.PreviousInternal != "" || after.Auth.PreviousInternalUntil != "" || after.Auth.Internal != r.Internal {
		t.Fatalf("after the overlap: %+v", after.Auth)
	}
}

func TestOf(t *testing.T) {
	a := render.Auth{Password: "p", Internal: strings.Repeat("ab", 32), PasswordHash: render.PasswordHash("p"), PreviousHash: render.PasswordHash("o"),
		PreviousUntil: "2026-12-01T12:10:00Z", Revision: 3}
	cr, ok := Of(secretOf(a))
	if !ok || cr.Revision != 3 || len(cr.Hashes) != 2 || cr.Internal != a.Internal || cr.Key == "" {
		t.Fatalf("%+v %v", cr, ok)
	}
	b := a
	b.PreviousHash, b.PreviousUntil = "", ""
	cr2, _ := Of(secretOf(b))
	if len(cr2.Hashes) != 1 || cr2.Key == cr.Key {
		t.Fatalf("after the overlap: %+v (key %s, before %s)", cr2, cr2.Key, cr.Key)
	}
	if _, ok := Of(nil); ok {
		t.Fatal("no Secret gave credentials")
	}
}
