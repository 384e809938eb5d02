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
