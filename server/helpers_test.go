package server

import (
	"path/filepath"
	"testing"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/engine"
	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/store/bolt"
)

func harnessStart(requestID string, replies ...*reinv1.ScriptedReply) engine.StartRequest {
	return engine.StartRequest{RequestID: requestID, Contract: contract(nil, replies...), Principal: "local", Tenant: "default"}
}

// scriptedModels builds every run's model from replies, whatever its
// contract says: a restarted node with a faster model.
func scriptedModels(replies ...*reinv1.ScriptedReply) func(*reinv1.ModelSpec) (model.Model, error) {
	return func(*reinv1.ModelSpec) (model.Model, error) { return model.NewScript(replies), nil }
}

// boltAt opens the bbolt store at path for a node to take over (the node
// closes it).
func boltAt(t testing.TB, path string) store.Store {
	t.Helper()
	st, err := bolt.Open(path, bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// tempBolt is boltAt a file in the test's temporary directory.
func tempBolt(t testing.TB) store.Store {
	return boltAt(t, filepath.Join(t.TempDir(), "rein.db"))
}
