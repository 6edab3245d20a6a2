package controller

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

func mustDecide(t *testing.T, s *unstructured.Unstructured, token string, now time.Time) authDecision {
	t.Helper()
	d, err := decideAuth(s, token, now, 10*time.Minute)
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
	a := first.auth
	if !isHex(a.Password, 64) || !isHex(a.Internal, 64) || a.Password == a.Internal || a.PasswordHash != render.PasswordHash(a.Password) || a.Revision != 1 || a.PreviousHash != "" {
		t.Fatalf("new cache: %+v", a)
	}
	// Stable: deciding again from what was written gives it back, at any later time.
	if again := mustDecide(t, secretOf(a), "", now.Add(time.Hour)); again.auth != a || again.rotated || again.rejected != "" {
		t.Fatalf("deciding from the written Secret: %+v, want %+v", again.auth, a)
	}

	// A user's new password, quotes and backslashes included: accepted, with an overlap.
	const users = `n"ew\pa'ss`
	rot := mustDecide(t, withPassword(secretOf(a), users), "", now)
	if !rot.rotated || rot.auth.Revision != 2 || rot.auth.PasswordHash != render.PasswordHash(users) || rot.auth.PreviousHash != a.PasswordHash ||
		rot.auth.PreviousUntil != "2026-12-01T12:10:00Z" || !rot.overlapEnds.Equal(now.Add(10*time.Minute)) || rot.auth.Internal != a.Internal {
		t.Fatalf("rotation: %+v", rot)
	}
	during := mustDecide(t, secretOf(rot.auth), "", now.Add(9*time.Minute))
	if during.auth != rot.auth || during.rotated {
		t.Fatalf("during the overlap: %+v, want %+v", during.auth, rot.auth)
	}
	after := mustDecide(t, secretOf(rot.auth), "", now.Add(10*time.Minute))
	if after.auth.PreviousHash != "" || after.auth.PreviousUntil != "" || after.auth.Revision != 2 || !after.overlapEnds.IsZero() {
		t.Fatalf("after the overlap: %+v", after.auth)
	}

	// Hostile values: refused, nothing changes, the message does not carry the value.
	for _, bad := range []string{"", "two\nlines", "x\nreplicaof 198.18.0.1 6379", "tab\there", "sp ace", "nul\x00", "\xff\xfe", strings.Repeat("a", 513)} {
		d := mustDecide(t, withPassword(secretOf(a), bad), "", now)
		if d.rejected == "" || d.rotated || d.auth.PasswordHash != a.PasswordHash || d.auth.Revision != 1 || d.auth.PreviousHash != "" {
			t.Errorf("%q: %+v", bad, d)
		}
		if len(bad) > 2 && strings.Contains(d.rejected, bad) {
			t.Errorf("%q: the message carries the value: %s", bad, d.rejected)
		}
	}

	// The annotation: a new password once per value.
	byToken := mustDecide(t, secretOf(a), "2026-12-01", now)
	if !byToken.rotated || byToken.auth.Password == a.Password || !isHex(byToken.auth.Password, 64) || byToken.auth.RotatedFor != "2026-12-01" || byToken.auth.Revision != 2 {
		t.Fatalf("rotation by annotation: %+v", byToken.auth)
	}
	if again := mustDecide(t, secretOf(byToken.auth), "2026-12-01", now.Add(time.Minute)); again.rotated || again.auth != byToken.auth {
		t.Fatalf("the same annotation value rotated again: %+v", again.auth)
	}
	// A new cache records the value it was created under, and does not rotate for it.
	if d := mustDecide(t, nil, "t1", now); d.auth.RotatedFor != "t1" || d.rotated {
		t.Fatalf("new cache with an annotation: %+v", d)
	}

	// An older operator's Secret (only the password): the keys are added, no rotation.
	old := &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "v1", "kind": "Secret",
		"data": map[string]interface{}{api.PasswordKey: base64.StdEncoding.EncodeToString([]byte("legacy"))}}}
	up := mustDecide(t, old, "", now)
	if up.rotated || up.auth.Password != "legacy" || up.auth.PasswordHash != render.PasswordHash("legacy") || !isHex(up.auth.Internal, 64) || up.auth.Revision != 1 {
		t.Fatalf("older Secret: %+v", up.auth)
	}
}

func TestCredentialsOf(t *testing.T) {
	a := render.Auth{Password: "p", Internal: strings.Repeat("ab", 32), PasswordHash: render.PasswordHash("p"), PreviousHash: render.PasswordHash("o"),
		PreviousUntil: "2026-12-01T12:10:00Z", Revision: 3}
	cr, ok := credentialsOf(secretOf(a))
	if !ok || cr.revision != 3 || len(cr.hashes) != 2 || cr.internal != a.Internal || cr.key == "" {
		t.Fatalf("%+v %v", cr, ok)
	}
	b := a
	b.PreviousHash, b.PreviousUntil = "", ""
	cr2, _ := credentialsOf(secretOf(b))
	if len(cr2.hashes) != 1 || cr2.key == cr.key {
		t.Fatalf("after the overlap: %+v (key %s, before %s)", cr2, cr2.key, cr.key)
	}
	if _, ok := credentialsOf(nil); ok {
		t.Fatal("no Secret gave credentials")
	}
}
