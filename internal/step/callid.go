package step

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"

	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// identify gives the tool call of d, the decision the model returned at
// step, its call ID before anything records it (docs/design.md §3): the
// model's own, unless it gave none or one an earlier call of the run went
// by (used), and then callID's. Every event of the call carries that ID,
// and a policy decision or a tool result is tied to the call by it. A
// decision whose ID changes is copied: d may be the model's own message (a
// script's reply, a recording's event).
func identify(d *reinv1.Decision, runID string, step uint32, used map[string]bool) *reinv1.Decision {
	tc := d.GetToolCall()
	if tc == nil || (tc.GetCallId() != "" && !used[tc.GetCallId()]) {
		return d
	}
	d = proto.CloneOf(d)
	d.GetToolCall().CallId = callID(runID, step, used)
	return d
}

// callID is the call ID rein gives the tool call a model made at step of
// run runID without an ID of its own, or with one the run used already:
// call_STEP_RUN, RUN being twelve hex digits of the run ID's SHA-256, so
// the same step of the same run (taken again, or replayed) gets the same
// ID, no two steps of a run share one, and it fits every provider's limit
// on a call ID's length and letters. Should the model have given that very
// ID to an earlier call (used), a suffix _2, _3, … sets it apart.
func callID(runID string, step uint32, used map[string]bool) string {
	sum := sha256.Sum256([]byte(runID))
	id := "call_" + strconv.FormatUint(uint64(step), 10) + "_" + hex.EncodeToString(sum[:6])
	base := id
	for n := 2; used[id]; n++ {
		id = base + "_" + strconv.Itoa(n)
	}
	return id
}
