package main

import (
	"os"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/model/openai"
)

// models builds a run's model: provider "openai" with the API key from the
// server's environment (OPENAI_API_KEY, never from the contract), anything
// else through model.New.
func models(spec *reinv1.ModelSpec) (model.Model, error) {
	if spec.GetProvider() == openai.Provider {
		return openai.New(spec, os.Getenv("OPENAI_API_KEY"))
	}
	return model.New(spec)
}
