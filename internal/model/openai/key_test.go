package openai_test

import (
	"strings"
	"testing"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model/openai"
)

// TestNewNeedsAKey: a model without its API key is refused when it is
// built (a run's start), naming the key and how to give it; today it was
// built and failed at its first call. The twin, with a key, is built.
func TestNewNeedsAKey(t *testing.T) {
	spec := &reinv1.ModelSpec{Provider: openai.Provider, Name: "gpt-test"}
	_, err := openai.New(spec, "")
	if err == nil {
		t.Fatal("a model without a key was built")
	}
	for _, w := range []string{"OPENAI_API_KEY", "environment", "--secrets"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("err %q does not say %q", err, w)
		}
	}
	if _, err := openai.New(spec, testKey); err != nil {
		t.Fatalf("a model with a key: %v", err)
	}
}
