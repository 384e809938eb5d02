package engine

// Tests that the model's next call is built from the log: the transcript it
// is sent ends with the last tool's result, and model_requested.input_hash is
// the hash of the transcript the log implies. checkInputHashes, the check, is
// used by other tests too.

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/step"
	"github.com/reinhq/rein/internal/tools"
)

// The model's next call is built from everything the log holds before its
// model_requested, including the last tool's result: the transcript it is
// sent ends with that observation, and model_requested.input_hash is the
// hash of the transcript the log implies (what a resumed driver rebuilds).
func TestNextCallSeesToolResult(t *testing.T) {
	for _, tc := range []struct {
		name   string
		call   *reinv1.ScriptedReply
		result tools.FixtureResult
		want   string
	}{
		{"read output", callReply("search", "call-1", nil), tools.FixtureResult{Output: &structpb.Value{Kind: &structpb.Value_StringValue{StringValue: "total 12"}}}, "total 12"},
		{"read error", callReply("search", "call-1", nil), tools.FixtureResult{Error: "index offline"}, "error: index offline"},
		{"proposal error", callReply("send_email", "call-1", nil), tools.FixtureResult{Error: "smtp relay unreachable"}, "smtp relay unreachable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ex := &countingTools{inner: tools.NewFixtures(map[string][]tools.FixtureResult{"search": {tc.result}, "send_email": {tc.result}})}
			spy := &modelSpy{}
			e, s := setup(t, Config{Tools: ex, Models: spy.models(nil)})
			st, evs := runToRest(t, e, s, testContract(tc.call, finalReply("done")))

			wantStatus(t, st, evs, statusCompleted, "final_answer")
			reqs := spy.requests()
			if len(reqs) != 2 {
				t.Fatalf("%d model calls, want 2", len(reqs))
			}
			if n := len(reqs[1].Transcript); n == 0 || reqs[1].Transcript[n-1].Observation == nil ||
				!strings.Contains(reqs[1].Transcript[n-1].Observation.Text, tc.want) {
				t.Errorf("call 2 was sent a transcript of %d turns that does not end with the tool's result %q", n, tc.want)
			}
			checkInputHashes(t, evs)
		})
	}
}

// checkInputHashes recomputes each model_requested's input_hash from the
// events before it, the way a driver that loads the run rebuilds its
// transcript (step.InputHashes), and compares.
func checkInputHashes(t *testing.T, evs []*reinv1.Event) {
	t.Helper()
	want := step.InputHashes(evs)
	for _, ev := range evs {
		if mr := ev.GetModelRequested(); mr != nil && mr.GetInputHash() != want[ev.GetSequence()] {
			t.Errorf("model_requested %d (step %d): input_hash %.12s…, but the log before it hashes to %.12s…",
				ev.GetSequence(), mr.GetStep(), mr.GetInputHash(), want[ev.GetSequence()])
		}
	}
}
