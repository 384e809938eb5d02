package anthropic_test

import (
	"strings"
	"testing"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model/anthropic"
)

// TestNewNeedsAKey: a model without its API key is refused when it is
// built (a run's start), naming the key and how to give it; today it was
// built and failed at its first call. The twin, with a key, is built.
func TestNewNeedsAKey(t *testing.T) {
	spec := &reinv1.ModelSpec{Provider: anthropic.Provider, Name: "claude-test"}
	_, err := anthropic.New(spec, "")
	if err == nil {
		t.Fatal("a model without a key was built")
	}
	for _, w := range []string{"ANTHROPIC_API_KEY", "environment", "--secrets"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("err %q does not say %q", err, w)
		}
	}
	if _, err := anthropic.New(spec, testKey); err != nil {
		t.Fatalf("a model with a key: %v", err)
	}
}
