package webhook

import (
	"strings"
	"testing"
)

// The example of the Standard Webhooks specification and its reference
// libraries: a receiver's library must accept what rein signs.
const (
	specSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	specID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	specTimestamp = 1614265330
	specBody      = `{"test": 2432232314}`
	specSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func TestSignMatchesTheSpecificationVector(t *testing.T) {
	got, err := Sign([]string{specSecret}, specID, specTimestamp, []byte(specBody))
	if err != nil {
		t.Fatal(err)
	}
	if got != specSignature {
		t.Fatalf("Sign = %q, want the specification's %q", got, specSignature)
	}
}

func TestSignChangesWithEveryPart(t *testing.T) {
	for name, sig := range map[string]func() (string, error){
		"body":      func() (string, error) { return Sign([]string{specSecret}, specID, specTimestamp, []byte(specBody+" ")) },
		"id":        func() (string, error) { return Sign([]string{specSecret}, specID+"x", specTimestamp, []byte(specBody)) },
		"timestamp": func() (string, error) { return Sign([]string{specSecret}, specID, specTimestamp+1, []byte(specBody)) },
	} {
		got, err := sig()
		if err != nil {
			t.Fatal(err)
		}
		if got == specSignature {
			t.Errorf("a changed %s signs the same", name)
		}
	}
}

func TestSignWithTwoSecretsWhileRotating(t *testing.T) {
	other := "whsec_" + strings.Repeat("QUJD", 8)
	got, err := Sign([]string{other, specSecret}, specID, specTimestamp, []byte(specBody))
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(got, " ")
	if len(parts) != 2 || parts[1] != specSignature || parts[0] == specSignature || !strings.HasPrefix(parts[0], "v1,") {
		t.Fatalf("Sign with two secrets = %q, want two v1 signatures, the second the specification's", got)
	}
}

func TestSignRefusesBadSecrets(t *testing.T) {
	for _, s := range []string{"", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_not base64!", "whsec_QUJD"} {
		if _, err := Sign([]string{s}, specID, specTimestamp, []byte(specBody)); err == nil {
			t.Errorf("Sign with secret %q: no error", s)
		}
	}
	if _, err := Sign(nil, specID, specTimestamp, []byte(specBody)); err == nil {
		t.Error("Sign with no secret: no error")
	}
}

func TestFingerprintHidesTheSecret(t *testing.T) {
	fp := Fingerprint(specSecret)
	if len(fp) != 16 || strings.Contains(specSecret, fp) || fp == Fingerprint(specSecret+"x") {
		t.Fatalf("Fingerprint = %q", fp)
	}
}
