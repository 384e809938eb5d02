package harness

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model"
)

// promptVersion names the way rein lays a run out for a model; it changes
// when that layout does, and is recorded in every model_requested.
const promptVersion = "rein-prompt-1"

// transcript is what the model sees of a run: the turns so far, with a
// running hash and size so that each call's input hash and token estimate
// cost O(1), not O(length of the run).
type transcript struct {
	turns []model.Turn
	h     hash.Hash
	bytes int
}

func (t *transcript) init(c *reinv1.TaskContract) {
	t.h = sha256.New()
	head, _ := proto.MarshalOptions{Deterministic: true}.Marshal(&reinv1.TaskContract{
		Goal: c.GetGoal(), Inputs: c.GetInputs(), Tools: c.GetTools(),
	})
	t.h.Write([]byte(promptVersion))
	t.h.Write(head)
	t.bytes = len(head)
}

func (t *transcript) add(turn model.Turn) {
	var b []byte
	if turn.Decision != nil {
		b, _ = proto.MarshalOptions{Deterministic: true}.Marshal(turn.Decision)
	} else {
		o := turn.Observation
		b = []byte(o.Source + "\x00" + o.CallID + "\x00" + o.Text)
	}
	t.h.Write(b)
	t.bytes += len(b)
	t.turns = append(t.turns, turn)
}

// inputHash is the SHA-256 of everything the next call sends.
func (t *transcript) inputHash() string {
	return hex.EncodeToString(t.h.Sum(nil))
}

// estimateTokens is a rough count (4 bytes a token) for models that cannot
// count.
func (t *transcript) estimateTokens() uint64 { return uint64(t.bytes+3) / 4 }

// observe updates the runner's view of the run with one committed event:
// the transcript and the per-tool call counts.
func (r *runner) observe(ev *reinv1.Event) {
	obs := func(source, callID, text string) {
		r.tx.add(model.Turn{Observation: &model.Observation{Source: source, CallID: callID, Text: text}})
	}
	switch p := ev.GetPayload().(type) {
	case *reinv1.Event_ModelReturned:
		if d := p.ModelReturned.GetDecision(); d != nil && d.GetAction() != nil {
			r.tx.add(model.Turn{Decision: d})
		}
	case *reinv1.Event_DecisionRejected:
		obs("harness", "", "Your reply was not a valid decision and nothing ran: "+p.DecisionRejected.GetError()+
			". Reply with exactly one tool call, a final answer, or a question for a person.")
	case *reinv1.Event_ToolRefused:
		obs("harness", p.ToolRefused.GetCallId(), p.ToolRefused.GetReason())
	case *reinv1.Event_ToolRequested:
		r.toolIndex[p.ToolRequested.GetTool()]++
		r.openCall = p.ToolRequested
	case *reinv1.Event_ApprovalRequested:
		r.openCall = nil
	case *reinv1.Event_ToolReturned:
		r.openCall = nil
		tr := p.ToolReturned
		text := tr.GetError()
		if text != "" {
			text = "error: " + text
		} else {
			text = valueText(tr.GetOutput())
		}
		if tr.GetTruncated() {
			text += fmt.Sprintf("\n[output cut: %d bytes of %d shown; ask for less, such as a narrower query or a range, to see the rest]",
				len(valueText(tr.GetOutput())), tr.GetOutputBytes())
		}
		obs("tool:"+tr.GetTool(), tr.GetCallId(), text)
	case *reinv1.Event_InputProvided:
		obs("person", "", p.InputProvided.GetText())
	case *reinv1.Event_ApprovalDecided:
		if !p.ApprovalDecided.GetApproved() {
			obs("person", "", "The proposed write was rejected and did not happen. Reason: "+p.ApprovalDecided.GetReason())
		}
	case *reinv1.Event_ChecksCompleted:
		key := checksKey(p.ChecksCompleted)
		switch {
		case key == "":
			r.lastChecks, r.sameChecks = "", 0
		case key == r.lastChecks:
			r.sameChecks++
		default:
			r.lastChecks, r.sameChecks = key, 1
		}
		if key != "" {
			obs("harness", "", checksText(p.ChecksCompleted))
		}
	case *reinv1.Event_WriteCommitted:
		r.lastChecks, r.sameChecks = "", 0
		obs("harness", "", "The approved write was committed. Receipt: "+valueText(p.WriteCommitted.GetReceipt()))
	}
}

// valueText is a result as the model reads it: a string as itself, anything
// else as JSON.
func valueText(v *structpb.Value) string {
	if v == nil {
		return "null"
	}
	if s, ok := v.GetKind().(*structpb.Value_StringValue); ok {
		return s.StringValue
	}
	b, err := json.Marshal(v.AsInterface())
	if err != nil {
		return fmt.Sprintf("(unprintable result: %v)", err)
	}
	return string(b)
}

// toolSetHash is the SHA-256 of the tools a run was granted.
func toolSetHash(grants []*reinv1.ToolGrant) string {
	h := sha256.New()
	for _, g := range grants {
		b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(g)
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}
