package step

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

func toolCall(id string) *reinv1.Decision {
	return &reinv1.Decision{Action: &reinv1.Decision_ToolCall{ToolCall: &reinv1.ToolCall{Tool: "search", CallId: id}}}
}

// TestIdentify: a tool call keeps the model's ID when no earlier call of
// the run went by it; one with none, or a used one, goes by the ID
// derived from the run and the step, set apart by a suffix when the model
// gave even that one to an earlier call; the model's decision is not
// changed, and a decision that is no tool call is left as it is.
func TestIdentify(t *testing.T) {
	const run = "run_01M6B5CKK81REFC06SC6RNN954"
	derived := callID(run, 3, nil)
	if sum := sha256.Sum256([]byte(run)); derived != "call_3_"+hex.EncodeToString(sum[:6]) {
		t.Fatalf("derived ID %q, want call_3_ and the first twelve hex digits of the run ID's SHA-256", derived)
	}
	if other := callID("run_other", 3, nil); other == derived {
		t.Fatalf("two runs' step 3 both derive %q", other)
	}
	for _, tc := range []struct {
		name, given string
		used        []string
		want        string
	}{
		{"the model's own", "c1", nil, "c1"},
		{"the model's own, others used", "c1", []string{"c2", derived}, "c1"},
		{"none", "", nil, derived},
		{"used before", "c1", []string{"c1"}, derived},
		{"used before, and the derived one too", "c1", []string{"c1", derived}, derived + "_2"},
		{"none, and the derived one and its second used", "", []string{derived, derived + "_2"}, derived + "_3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			used := map[string]bool{}
			for _, id := range tc.used {
				used[id] = true
			}
			d := toolCall(tc.given)
			before := proto.CloneOf(d)
			got := identify(d, run, 3, used)
			if id := got.GetToolCall().GetCallId(); id != tc.want {
				t.Errorf("call ID %q, want %q", id, tc.want)
			}
			if !proto.Equal(d, before) {
				t.Errorf("the model's decision was changed: %v", d)
			}
			if tc.want == tc.given && got != d {
				t.Error("a decision that keeps its ID was copied")
			}
		})
	}
	final := &reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: "done"}}}
	if got := identify(final, run, 3, nil); got != final {
		t.Errorf("a final answer became %v", got)
	}
	if got := identify(nil, run, 3, nil); got != nil {
		t.Errorf("no decision became %v", got)
	}
}
