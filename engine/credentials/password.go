package credentials

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"unicode"
	"unicode/utf8"

	"example.com/cache-operator/engine/api"
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
