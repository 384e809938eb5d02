package server

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
)

// TestLifecycleTakenOver: a run_taken event logs "run taken over" with the
// run's ID, trace ID, tenant and principal, the new owner and its epoch.
// The twin: a logger above info writes nothing.
func TestLifecycleTakenOver(t *testing.T) {
	st := runstate.State{RunID: "run_1", TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", Tenant: "acme", Principal: "alice"}
	evs := []*reinv1.Event{{Sequence: 7, Payload: &reinv1.Event_RunTaken{RunTaken: &reinv1.RunTaken{Owner: "replica-b", Epoch: 3, TraceId: st.TraceID}}}}
	var buf bytes.Buffer
	logLifecycle(slog.New(slog.NewJSONHandler(&buf, nil)), st, evs)
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("%v: %q", err, buf.String())
	}
	for k, want := range map[string]any{"msg": "run taken over", "run_id": "run_1", "trace_id": st.TraceID, "tenant": "acme",
		"principal": "alice", "owner": "replica-b", "epoch": float64(3)} {
		if line[k] != want {
			t.Errorf("%s = %v, want %v (%s)", k, line[k], want, strings.TrimSpace(buf.String()))
		}
	}
	buf.Reset()
	logLifecycle(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn})), st, evs)
	if buf.Len() != 0 {
		t.Errorf("at level warn: %q", buf.String())
	}
}
