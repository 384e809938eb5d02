package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// SecretPrefix starts every signing secret: "whsec_", then the key in
// base64 (Standard Webhooks).
const SecretPrefix = "whsec_"

// minKeyBytes is the shortest key accepted; the specification asks for 24
// to 64 bytes.
const minKeyBytes = 24

// ParseSecret is the HMAC key of a "whsec_…" secret.
func ParseSecret(s string) ([]byte, error) {
	b64, ok := strings.CutPrefix(strings.TrimSpace(s), SecretPrefix)
	if !ok {
		return nil, errors.New("a webhook secret starts with whsec_ and goes on with its key in base64 (make one with: echo whsec_$(head -c 32 /dev/urandom | base64))")
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("the webhook secret after whsec_ is not base64: %w", err)
	}
	if len(key) < minKeyBytes || len(key) > 64 {
		return nil, fmt.Errorf("the webhook secret's key is %d bytes; give 24 to 64 (32 random bytes, say)", len(key))
	}
	return key, nil
}

// Fingerprint names a secret without revealing it: the first 8 bytes of
// its SHA-256, in hex.
func Fingerprint(secret string) string {
	sum := sha256.Sum256([]byte(strings.TrimSpace(secret)))
	return hex.EncodeToString(sum[:8])
}

// Sign is the webhook-signature header of a delivery: for each secret,
// "v1," and the base64 HMAC-SHA256 of "id.timestamp.body" keyed by the
// secret's key, space-separated, so that a receiver holding either secret
// of a rotation verifies it.
func Sign(secrets []string, id string, timestamp int64, body []byte) (string, error) {
	if len(secrets) == 0 {
		return "", errors.New("sign a webhook: no secret")
	}
	sigs := make([]string, 0, len(secrets))
	for _, s := range secrets {
		key, err := ParseSecret(s)
		if err != nil {
			return "", err
		}
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(id))
		mac.Write([]byte{'.'})
		mac.Write([]byte(strconv.FormatInt(timestamp, 10)))
		mac.Write([]byte{'.'})
		mac.Write(body)
		sigs = append(sigs, "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	}
	return strings.Join(sigs, " "), nil
}
