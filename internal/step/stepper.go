package step

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/policy"
	"github.com/reinhq/rein/internal/pricing"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
)

// Stepper holds one run while a driver owns it: its state (folded by
// runstate, the one fold), the transcript the model sees, and the events of
// the last action that wait to share a commit with the next
// model_requested.
type Stepper struct {
	h          Host
	cfg        *Config
	st         runstate.State
	model      model.Model
	transcript transcript
	pending    []*reinv1.Event
	// blobs are stored with the next commit (a large proposal's preview
	// or arguments), then forgotten.
	blobs    map[string][]byte
	toolHash string
	// inputSchemas are the granted tools' compiled input schemas, by tool
	// name, compiled once when the driver starts (see schemas).
	inputSchemas map[string]*inputSchema
	// listedSchemas are the schemas tools listed for grants that give none
	// (shown to the model with the grant: modelTools).
	listedSchemas map[string]*structpb.Struct
	// shownTools are the grants as every call of this driver shows them
	// to the model (modelTools), and modelName the model as every
	// model_requested names it: made once, as the contract and the listed
	// schemas do not change while the driver runs.
	shownTools []*reinv1.ToolGrant
	modelName  string
	// toolTimedOut is the cause of a read cut by the tool timeout, made
	// once: the timeout is the engine's.
	toolTimedOut error
	// tablePrice is the run's model's price in the server's price table;
	// inTable says whether it has one (else the log's price is in force).
	tablePrice pricing.Price
	inTable    bool
	// now is the step's one clock reading, the recorded_at of its events.
	now *timestamppb.Timestamp
	// rules are the grants' compiled policy rules, by tool name, and
	// badRules the grants whose rules no longer compile (compileRules).
	rules    map[string]policy.Rules
	badRules map[string]error
	// call is the model call the step sends, once its model_requested is
	// committed (its text goes to Config.Output).
	call OutputCall
	// digests are the granted tools' definitions as last listed (served).
	digests map[string]keptDigest
}

var (
	// ErrStopped is returned when the driver's context was cancelled
	// mid-step; the run stays as the log has it.
	ErrStopped = errors.New("driver stopped")
	// ErrWaiting is returned when the run waits for its children: its
	// driver leaves, and a child's end has the engine drive it again.
	ErrWaiting = errors.New("the run waits for its children")
	// ErrDefect is returned when the harness tried to append what the fold
	// rejects; the driver ends the run with Fail.
	ErrDefect = errors.New("harness defect")
)

// New returns a Stepper holding st, a running run, with its transcript
// rebuilt from the run's log (read through h.Events).
func New(ctx context.Context, h Host, cfg *Config, st runstate.State) (*Stepper, error) {
	m := st.Contract.GetModel()
	r := &Stepper{h: h, cfg: cfg, st: st, toolHash: toolSetHash(st.Contract.GetTools()), modelName: m.GetProvider() + "/" + m.GetName(),
		toolTimedOut: fmt.Errorf("the tool did not answer within its timeout of %s", cfg.ToolTimeout)}
	r.tablePrice, r.inTable = cfg.Prices.Lookup(m.GetProvider(), m.GetName())
	r.rules, r.badRules = compileRules(st.Contract.GetTools())
	r.transcript.init(st.Contract)
	for after := uint64(0); after < st.Version; {
		evs, err := h.Events(ctx, st.RunID, after)
		if err != nil {
			return nil, err
		}
		if len(evs) == 0 {
			break
		}
		for _, ev := range evs {
			if ev.GetSequence() > st.Version {
				break
			}
			r.transcript.observe(ev, ev.GetSequence())
		}
		after = evs[len(evs)-1].GetSequence()
	}
	r.transcript.loaded()
	return r, nil
}

// Carry keeps ev, an event of the driver's own (a run_taken), to be
// recorded with the next commit.
func (r *Stepper) Carry(ev *reinv1.Event) {
	r.pending = append(r.pending, ev)
}

// Begin gives the Stepper the run's model m and compiles the granted
// tools' input schemas, once for the driver's life; then, if the process
// stopped after a tool call was requested and before its outcome was
// stored, it runs the call again (a read, or a write's proposal, has no
// side effects) before the model is called again. It returns ErrStopped if
// the driver stopped meanwhile.
func (r *Stepper) Begin(ctx context.Context, m model.Model) error {
	r.model = m
	r.inputSchemas = r.schemas(ctx)
	r.shownTools = r.modelTools()
	call := r.st.OpenCall
	if call == nil {
		return nil
	}
	r.now = timestamppb.New(r.h.Clock())
	return r.runCall(ctx, call, r.st.OpenCallTier)
}

// State is the run's state as the last commit left it.
func (r *Stepper) State() runstate.State { return r.st }

// Running reports whether the run is still running, as the last commit
// left it.
func (r *Stepper) Running() bool {
	return r.st.Status == reinv1.RunStatus_RUN_STATUS_RUNNING
}

// price is the price in force for the run's model calls: the server's
// price table's, else the one its log last recorded; ok says whether there
// is one.
func (r *Stepper) price() (p pricing.Price, ok bool) {
	if r.inTable {
		return r.tablePrice, true
	}
	if lp := r.st.Price; lp != nil {
		return pricing.Price{InputPerMTok: lp.GetInputPerMtok(), OutputPerMTok: lp.GetOutputPerMtok(),
			CacheWritePerMTok: lp.GetCacheWritePerMtok(), CacheReadPerMTok: lp.GetCacheReadPerMtok()}, true
	}
	return pricing.Price{}, false
}

// commit appends the pending events and evs as one durable write, through
// the engine's one commit path (Host.Commit), with the blobs of the model
// call's input when evs hold its model_requested.
func (r *Stepper) commit(ctx context.Context, evs ...*reinv1.Event) error {
	all := append(r.pending, evs...)
	// The pending events were observed when they were kept.
	fresh := len(r.pending)
	for _, ev := range all {
		if ev.RecordedAt == nil {
			ev.RecordedAt = r.now
		}
	}
	var opts []store.AppendOption
	if r.blobs != nil {
		opts = append(opts, store.WithBlobs(r.blobs))
	}
	for _, ev := range evs {
		if ev.GetModelRequested() != nil {
			if b := r.transcript.takeBlobs(); b != nil {
				opts = append(opts, store.WithBlobs(b))
			}
			break
		}
	}
	// Only a person's message is appended to a running run by anyone but
	// its driver (SteerRun): on a conflict, the messages are taken in
	// (rebase) and the events committed again after them. Anything else
	// appended is no race the driver can win: its conflict is returned.
	var next runstate.State
	var lost error
	err := store.RetryOnConflict(ctx, r.st.RunID, "commit a step of", func() error {
		var err error
		next, err = r.h.Commit(ctx, r.st, all, opts...)
		if !errors.Is(err, store.ErrConflict) {
			return err
		}
		steered, rerr := r.rebase(ctx)
		switch {
		case rerr != nil:
			return rerr
		case !steered:
			lost = err // returned as it is, not tried again
			return nil
		case slices.ContainsFunc(evs, isRequest):
			// The call's context was built without the message: build it
			// again (Step starts over), so the call reads it.
			return errRestep
		}
		return err // committed again after the messages
	})
	if lost != nil {
		return lost
	}
	if runstate.Rejected(err) {
		r.pending, r.blobs = nil, nil
		return fmt.Errorf("%w: %v", ErrDefect, err)
	}
	if err != nil {
		return err
	}
	r.pending, r.blobs = nil, nil
	r.st = next
	for _, ev := range all[fresh:] {
		r.transcript.observe(ev, ev.GetSequence())
	}
	return nil
}

// MaxSteers is the most messages one run takes (engine's Steer refuses
// the next): each is kept in its log, and its request ID in its state.
// It is below store.ConflictRetries: a step's commit is taken again after
// each message that came in (rebase), so the run's messages never make
// its driver give it up.
const MaxSteers = 1000

// errRestep: messages came in while the step built a model call's
// context, and the call was not recorded; the step starts over.
var errRestep = errors.New("messages came in: the step starts over")

func isRequest(ev *reinv1.Event) bool { return ev.GetModelRequested() != nil }

// rebase takes in what was appended to the run since the Stepper's state,
// if it is only people's messages (run_steered): the state is the stored
// one, the transcript is rebuilt from the log with the messages held for
// the next model call, and the events that wait for a commit are observed
// again at their new sequences. It reports false, changing nothing, when
// anything else was appended.
func (r *Stepper) rebase(ctx context.Context) (bool, error) {
	st, err := r.h.Load(ctx, r.st.RunID)
	if err != nil {
		return false, err
	}
	for after := r.st.Version; after < st.Version; {
		evs, err := r.h.Events(ctx, r.st.RunID, after)
		if err != nil {
			return false, err
		}
		if len(evs) == 0 {
			break
		}
		for _, ev := range evs {
			if ev.GetSequence() <= st.Version && ev.GetRunSteered() == nil {
				return false, nil
			}
		}
		after = evs[len(evs)-1].GetSequence()
	}
	fresh, err := New(ctx, r.h, r.cfg, st)
	if err != nil {
		return false, err
	}
	r.st, r.transcript = st, fresh.transcript
	for i, ev := range r.pending {
		r.transcript.observe(ev, st.Version+uint64(i)+1)
	}
	return true, nil
}

// Flush commits events still pending when the driver stops, so a tool's
// result that was paid for is not lost.
func (r *Stepper) Flush() {
	if len(r.pending) == 0 || r.st.Status != reinv1.RunStatus_RUN_STATUS_RUNNING {
		return
	}
	if err := r.commit(context.Background()); err != nil {
		r.h.Logger().Error("flush pending events", "run_id", r.st.RunID, "error", err)
	}
}

// Fail ends the run as failed (harness_defect) with msg, dropping the
// events that wait for a commit.
func (r *Stepper) Fail(msg string) error {
	r.pending = nil
	st, err := r.h.Load(context.Background(), r.st.RunID)
	if err != nil {
		return err
	}
	r.st = st
	if st.Status != reinv1.RunStatus_RUN_STATUS_RUNNING {
		return nil
	}
	r.now = timestamppb.New(r.h.Clock())
	return r.commit(context.Background(), &reinv1.Event{Actor: "harness", Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{
		From: st.Status, To: reinv1.RunStatus_RUN_STATUS_FAILED, Reason: "harness_defect", Error: msg,
	}}})
}
