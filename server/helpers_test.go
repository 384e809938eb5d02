package server

import (
	"github.com/reinhq/rein/internal/harness"
	"github.com/reinhq/rein/internal/model"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

func harnessStart(requestID string, replies ...*reinv1.ScriptedReply) harness.StartRequest {
	return harness.StartRequest{RequestID: requestID, Contract: contract(nil, replies...), Principal: "local", Tenant: "default"}
}

// scriptedModels builds every run's model from replies, whatever its
// contract says: a restarted node with a faster model.
func scriptedModels(replies ...*reinv1.ScriptedReply) func(*reinv1.ModelSpec) (model.Model, error) {
	return func(*reinv1.ModelSpec) (model.Model, error) { return model.NewScript(replies), nil }
}
