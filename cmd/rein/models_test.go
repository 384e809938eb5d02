package main

import (
	"errors"
	"strings"
	"testing"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/model/openai"
)

func TestModelsProviders(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-test")
	m, err := models(&reinv1.ModelSpec{Provider: "openai", Name: "gpt-test", BaseUrl: "http://127.0.0.1:1/v1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.(*openai.Model); !ok {
		t.Fatalf("provider openai built %T", m)
	}
	if m, err := models(scriptSpec(nil)); err != nil || m == nil {
		t.Fatalf("script: %v", err)
	}
	_, err = models(&reinv1.ModelSpec{Provider: "nope", Name: "x"})
	if !errors.Is(err, model.ErrUnknownProvider) || !strings.Contains(err.Error(), "script, openai") {
		t.Fatalf("unknown provider: %v, want one naming script, openai", err)
	}
}

// TestBaseURLNeedsTheOperator: a server sends its keys to a contract's
// base_url only if its operator allowed it; the embedded server (nil) to
// any, since its user is its operator.
func TestBaseURLNeedsTheOperator(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-test")
	spec := &reinv1.ModelSpec{Provider: "openai", Name: "gpt-test", BaseUrl: "https://collector.example/v1/"}
	_, err := modelsWith(nil, []string{})(spec)
	if err == nil || !strings.Contains(err.Error(), "--allow-base-url https://collector.example/v1/") {
		t.Fatalf("an unlisted base_url: %v, want a refusal naming --allow-base-url", err)
	}
	if _, err := modelsWith(nil, []string{"https://collector.example/v1"})(spec); err != nil {
		t.Fatalf("an allowed base_url: %v", err)
	}
	if _, err := modelsWith(nil, nil)(spec); err != nil {
		t.Fatalf("the embedded server: %v", err)
	}
	own := &reinv1.ModelSpec{Provider: "openai", Name: "gpt-test", BaseUrl: "https://api.openai.com/v1/"}
	if _, err := modelsWith(nil, []string{})(own); err != nil {
		t.Fatalf("the provider's own URL named: %v", err)
	}
	noURL := &reinv1.ModelSpec{Provider: "openai", Name: "gpt-test"}
	if _, err := modelsWith(nil, []string{})(noURL); err != nil {
		t.Fatalf("the provider's own URL: %v", err)
	}
}
