package step

import (
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/eventkind"
	"github.com/reinhq/rein/internal/model"
)

// promptVersion names the way rein lays a run out for a model; it changes
// when that layout does, and is recorded in every model_requested.
const promptVersion = "rein-prompt-1"

// transcript is what the model sees of a run: a head (the goal, inputs and
// tools), a summary of compacted entries, and the entries since. Each part
// is a content-addressed blob, so a call's input is recorded as the list of
// its parts' hashes and each part is stored once (model_requested's
// input_blobs). A running hash and size keep each call's input hash and
// token estimate O(1) until a compaction rebuilds them.
type transcript struct {
	head    part
	summary []*reinv1.ContextItem
	// summaryPart is the summary as the model reads it; empty without one.
	summaryPart part
	entries     []entry
	// turns is what a model.Request carries: the summary (if any) as an
	// observation, then each entry's turn.
	turns []model.Turn
	// held are people's messages (run_steered) that wait for the next
	// model call: deliver adds them as turns, in order, just before it.
	held []entry
	h    hash.Hash
	size int
	// unstored holds the parts not yet given to the store.
	unstored map[string][]byte
	// parts is the next call's input, by part hash: the head, the summary
	// (if any), each entry. The first carried of them are the previous
	// call's input's first parts.
	parts   []string
	carried int
	// sizes are the parts' sizes, in order, and carriedBytes the size of
	// the first carried parts: the input the previous call's begins with
	// byte for byte (model_requested.prefix_bytes).
	sizes        []int
	carriedBytes int
	// stepPrefix is the prefix_bytes of the latest call that was not
	// resumed: a resumed call is sent the input of the call whose reply
	// was lost, and the provider may never have seen that call, so its
	// prefix is that call's, with the step before, not its whole input.
	stepPrefix int
	// lastCall is when the latest call was sent (its model_requested's
	// recorded_at): a provider's cache keeps its prefix for a TTL from it.
	lastCall time.Time
	// cached is the input tokens the provider said it held in its cache
	// after the latest call it answered: what it wrote and read.
	cached uint64
	// limit is the run's max_context_chars (0: never compact); the summary
	// shows at most a quarter of it.
	limit int
	// sent is the size of the latest call's input, and overcount how many
	// input tokens the provider reported for the latest call it answered
	// beyond rein's estimate of that input (0 when it reported no more).
	// Both come from the log (model_requested, model_returned), so a run
	// rebuilt from it estimates as it did live.
	sent      int
	overcount uint64
	// scratch holds a part's hash, or the running hash's sum, on its way
	// into a hash or out of one, so that neither allocates.
	scratch [sha256.Size * 2]byte
	// marshaled is the latest step's decision and its encoding, made once
	// for the step's size check and used again as the decision's part
	// (add), and next the summary text the latest compaction proposed,
	// used again when it is applied (compact). Each is for the one
	// message it names, by pointer, and ignored for any other.
	marshaled struct {
		d    *reinv1.Decision
		data []byte
	}
	next struct {
		cc   *reinv1.ContextCompacted
		text string
	}
	// callIDs are the call IDs of the run's tool calls so far, compacted
	// or not: a new call goes by one of its own (identify).
	callIDs map[string]bool
}

// part is one piece of a model call's input: its bytes and their SHA-256.
type part struct {
	data []byte
	blob string
}

func newPart(data []byte) part {
	sum := sha256.Sum256(data)
	return part{data: data, blob: hexSum(sum[:])}
}

// hexSum is a SHA-256 sum in hex, made in one allocation.
func hexSum(sum []byte) string {
	var name [sha256.Size * 2]byte
	hex.Encode(name[:], sum)
	return string(name[:])
}

// entry is one turn of the transcript and the event it came from.
type entry struct {
	turn model.Turn
	part part
	seq  uint64
}

func (t *transcript) init(c *reinv1.TaskContract) {
	t.limit = int(c.GetBudget().GetMaxContextChars())
	head, _ := proto.MarshalOptions{Deterministic: true}.Marshal(&reinv1.TaskContract{
		Goal: c.GetGoal(), Inputs: c.GetInputs(), Tools: c.GetTools(),
	})
	t.head = newPart(head)
	t.unstored = map[string][]byte{}
	t.keep(t.head)
	t.rehash()
}

// keep notes a part that the store has not been given.
func (t *transcript) keep(p part) {
	if t.unstored == nil {
		t.unstored = map[string][]byte{}
	}
	t.unstored[p.blob] = p.data
}

// write appends a part to the input. A new part is also kept for the store
// (keep); rehash writes parts again without keeping them again.
func (t *transcript) write(p part) {
	t.h.Write(append(t.scratch[:0], p.blob...))
	t.size += len(p.data)
	t.parts = append(t.parts, p.blob)
	t.sizes = append(t.sizes, len(p.data))
}

// rehash rebuilds the running hash and size from the parts.
func (t *transcript) rehash() {
	old := t.parts
	t.parts, t.sizes = nil, nil
	defer func() {
		// What the previous call was sent and still begins the input.
		k, n := 0, 0
		for k < t.carried && k < len(t.parts) && t.parts[k] == old[k] {
			n += t.sizes[k]
			k++
		}
		t.carried, t.carriedBytes = k, n
	}()
	t.h = sha256.New()
	t.h.Write([]byte(promptVersion))
	t.size = 0
	t.write(t.head)
	if len(t.summary) > 0 {
		t.write(t.summaryPart)
	}
	for _, e := range t.entries {
		t.write(e.part)
	}
}

func (t *transcript) add(turn model.Turn, seq uint64) {
	var b []byte
	if d := turn.Decision; d != nil && d == t.marshaled.d {
		b = t.marshaled.data
		t.marshaled.d, t.marshaled.data = nil, nil
	} else if d != nil {
		b, _ = proto.MarshalOptions{Deterministic: true}.Marshal(d)
	} else {
		o := turn.Observation
		b = []byte(o.Source + "\x00" + o.CallID + "\x00" + o.Text)
	}
	e := entry{turn: turn, part: newPart(b), seq: seq}
	t.write(e.part)
	t.keep(e.part)
	t.entries = append(t.entries, e)
	t.turns = append(t.turns, turn)
}

// inputHash is the SHA-256 of everything the next call sends: the prompt
// version and the hash of each part, in order.
func (t *transcript) inputHash() string {
	return hexSum(t.h.Sum(t.scratch[:0]))
}

// marshalDecision encodes a step's decision as its part will hold it, and
// returns the encoding's size: the step checks it, and the transcript adds
// the decision from the same bytes once the step records it. An encoding
// over max bytes (one rein will not record) is not kept, nor is a decision
// that cannot be encoded, whose size is proto.Size's.
func (t *transcript) marshalDecision(d *reinv1.Decision, max int) int {
	t.marshaled.d, t.marshaled.data = nil, nil
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(d)
	if err != nil {
		return proto.Size(d)
	}
	if len(b) <= max {
		t.marshaled.d, t.marshaled.data = d, b
	}
	return len(b)
}

// observe turns one event of the run, at sequence seq, into what the
// model reads of it, as its kind's declaration says (internal/eventkind): a
// turn (a decision, or an observation labelled with its source), a
// compaction, or nothing. Besides the turns it keeps only what describes
// the model's input (which parts the latest call was sent, what the
// provider counted of it); what else the step loop needs of the log is
// folded by runstate.
func (t *transcript) observe(ev *reinv1.Event, seq uint64) {
	tr := eventkind.Of(ev).Transcript
	switch tr.Role {
	case eventkind.Compaction:
		t.compact(ev.GetContextCompacted())
	case eventkind.Request:
		if !ev.GetModelRequested().GetResumed() {
			t.deliver()
		}
		t.requested(ev.GetRecordedAt().AsTime(), ev.GetModelRequested().GetResumed())
	case eventkind.Held:
		if o := tr.Observe(ev); o != nil {
			t.held = append(t.held, entry{turn: model.Turn{Observation: o}, seq: seq})
		}
	case eventkind.Reply:
		mr := ev.GetModelReturned()
		t.reported(mr.GetUsage().GetInputTokens() + mr.GetUsage().GetCacheWriteInputTokens() + mr.GetUsage().GetCacheReadInputTokens())
		t.cached = mr.GetUsage().GetCacheWriteInputTokens() + mr.GetUsage().GetCacheReadInputTokens()
		if d := mr.GetDecision(); d != nil && d.GetAction() != nil {
			t.add(model.Turn{Decision: d}, seq)
		}
		if id := mr.GetDecision().GetToolCall().GetCallId(); id != "" {
			if t.callIDs == nil {
				t.callIDs = map[string]bool{}
			}
			t.callIDs[id] = true
		}
	case eventkind.Observed:
		if o := tr.Observe(ev); o != nil {
			t.add(model.Turn{Observation: o}, seq)
		}
	}
}

// deliver adds the held messages as turns, in order: a call that is not
// resumed reads every message recorded before it (a resumed call is sent
// as it was, so the messages wait for the call after it).
func (t *transcript) deliver() {
	for _, e := range t.held {
		t.add(e.turn, e.seq)
	}
	t.held = nil
}

// valueText is a result as the model reads it: a string as itself, anything
// else as JSON.
func valueText(v *structpb.Value) string { return eventkind.ValueText(v) }

// toolSetHash is the SHA-256 of the tools a run was granted.
func toolSetHash(grants []*reinv1.ToolGrant) string {
	h := sha256.New()
	for _, g := range grants {
		b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(g)
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Prefixes are the prefix_bytes and prefix_tokens of each
// model_requested in log (a run's events from its run_started on, in
// order), by sequence, recomputed from the events before it as
// InputHashes recomputes the hashes: replay fills them into a recording
// made before model_requested had them.
func Prefixes(log []*reinv1.Event) map[uint64][2]uint64 {
	out := map[uint64][2]uint64{}
	if len(log) == 0 {
		return out
	}
	var t transcript
	t.init(log[0].GetRunStarted().GetContract())
	for _, ev := range log {
		if mr := ev.GetModelRequested(); mr != nil {
			if !mr.GetResumed() {
				t.deliver()
			}
			b, n := t.prefix(mr.GetResumed())
			out[ev.GetSequence()] = [2]uint64{b, n}
		}
		t.observe(ev, ev.GetSequence())
	}
	return out
}

// InputHashes are the input_hash of each model_requested in log (a run's
// events from its run_started on, in order), by sequence, recomputed from
// the events before it as a driver that loads the run rebuilds its
// transcript: what the log implies each model call was sent.
func InputHashes(log []*reinv1.Event) map[uint64]string {
	out := map[uint64]string{}
	if len(log) == 0 {
		return out
	}
	var t transcript
	t.init(log[0].GetRunStarted().GetContract())
	for _, ev := range log {
		if mr := ev.GetModelRequested(); mr != nil {
			if !mr.GetResumed() {
				t.deliver()
			}
			out[ev.GetSequence()] = t.inputHash()
		}
		t.observe(ev, ev.GetSequence())
	}
	return out
}
