package controller

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"example.com/cache-operator/engine/api"
)

// passwordBytes is the number of random bytes in a generated password.
const passwordBytes = 32

// newPassword returns 32 bytes from crypto/rand, hex-encoded (safe to quote in redis.conf).
func newPassword() (string, error) {
	b := make([]byte, passwordBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generating password: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// passwordFrom returns the password held by a live Secret ("" when it holds none).
func passwordFrom(secret *unstructured.Unstructured) string {
	if secret == nil {
		return ""
	}
	enc, _, _ := unstructured.NestedString(secret.Object, "data", api.PasswordKey)
	dec, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return ""
	}
	return string(dec)
}
