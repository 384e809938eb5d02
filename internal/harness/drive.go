package harness

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/pricing"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
)

// eventPage is how many events a driver reads at once when it loads a run.
const eventPage = 4096

// runner holds one run while a driver owns it: its state, the transcript the
// model sees, and the events of the last action that wait to share a commit
// with the next model_requested.
type runner struct {
	e       *Engine
	st      runstate.State
	model   model.Model
	tx      transcript
	pending []*reinv1.Event
	// toolIndex counts the calls made to each tool, for Call.Index.
	toolIndex map[string]int
	toolHash  string
	// price is the run's model's price: the server's price table's, else
	// the one its log last recorded; priced says whether there is one.
	price  pricing.Price
	priced bool
	// priceFromLog: the price is the log's, not the table's.
	priceFromLog bool
	// now is the step's one clock reading, the recorded_at of its events.
	now *timestamppb.Timestamp
	// epoch is the driver's lease on the run: its appends are fenced with
	// it, so a driver whose lease was taken over cannot write.
	epoch uint64
	// openCall is a tool call whose tool_requested is stored with no
	// outcome yet (tool_returned, or approval_requested for a write).
	openCall *reinv1.ToolRequested
	// lastChecks is the last failing checks_completed (as checksKey) since
	// the last committed write, and sameChecks how many in a row were it.
	lastChecks string
	sameChecks int
}

// drive steps a run until it leaves running or ctx is cancelled.
func (e *Engine) drive(ctx context.Context, runID string) error {
	r, err := e.load(ctx, runID)
	if err != nil {
		return err
	}
	defer r.flush()
	if r.st.Status != reinv1.RunStatus_RUN_STATUS_RUNNING {
		return nil
	}
	if r.epoch, err = e.cfg.Store.Acquire(ctx, runID, e.cfg.Owner); err != nil {
		return err
	}
	if r.model, err = e.cfg.Models(r.st.Contract.GetModel()); err != nil {
		return r.fail(fmt.Sprintf("the run's model cannot be built: %v", err))
	}
	if c := r.openCall; c != nil {
		// The process stopped after the call was requested and before its
		// outcome was stored: run it again (a read, or a write's proposal,
		// has no side effects) before the model is called again.
		r.now = timestamppb.New(e.cfg.Clock())
		call := &reinv1.ToolCall{Tool: c.GetTool(), Arguments: c.GetArguments(), CallId: c.GetCallId()}
		if err := r.runCall(ctx, call, c.GetTier()); err != nil {
			if errors.Is(err, errStopped) {
				return nil
			}
			return err
		}
	}
	for r.st.Status == reinv1.RunStatus_RUN_STATUS_RUNNING {
		if ctx.Err() != nil || e.draining.Load() {
			return nil
		}
		err := r.step(ctx)
		switch {
		case err == nil:
		case errors.Is(err, errStopped):
			return nil
		case errors.Is(err, errDefect):
			return r.fail(err.Error())
		default:
			return err
		}
	}
	return nil
}

// load reads a run's state and rebuilds its transcript from the log.
func (e *Engine) load(ctx context.Context, runID string) (*runner, error) {
	st, err := e.cfg.Store.Load(ctx, runID)
	if err != nil {
		return nil, err
	}
	r := &runner{e: e, toolIndex: map[string]int{}, toolHash: toolSetHash(st.Contract.GetTools())}
	m := st.Contract.GetModel()
	r.price, r.priced = e.cfg.Prices.Lookup(m.GetProvider(), m.GetName())
	r.tx.init(st.Contract)
	for after := uint64(0); ; {
		evs, err := e.cfg.Store.Events(ctx, runID, after, eventPage)
		if err != nil {
			return nil, err
		}
		for _, ev := range evs {
			r.observe(ev)
		}
		if len(evs) < eventPage {
			break
		}
		after = evs[len(evs)-1].GetSequence()
	}
	r.tx.loaded()
	r.st = st
	return r, nil
}

var (
	// errStopped: the driver's context was cancelled mid-step; the run
	// stays as the log has it.
	errStopped = errors.New("driver stopped")
	// errDefect: the harness tried to append what the fold rejects.
	errDefect = errors.New("harness defect")
)

// commit appends the pending events and evs as one durable write.
func (r *runner) commit(ctx context.Context, evs ...*reinv1.Event) error {
	all := append(r.pending, evs...)
	// The pending events were observed when they were kept.
	fresh := len(r.pending)
	for i, ev := range all {
		ev.RunId = r.st.RunID
		ev.Sequence = r.st.Version + uint64(i) + 1
		if ev.RecordedAt == nil {
			ev.RecordedAt = r.now
		}
	}
	next, err := runstate.ApplyAll(r.st, all)
	if err != nil {
		r.pending = nil
		return fmt.Errorf("%w: %v", errDefect, err)
	}
	// A write that started must finish: a cancelled caller still needs to
	// know whether the step committed.
	opts := []store.AppendOption{store.WithEpoch(r.epoch)}
	// A model call's input parts are stored with the event that
	// references them (model_requested's input_blobs).
	for _, ev := range all {
		if ev.GetModelRequested() != nil {
			if b := r.tx.takeBlobs(); b != nil {
				opts = append(opts, store.WithBlobs(b))
			}
			break
		}
	}
	if err := r.e.cfg.Store.Append(context.WithoutCancel(ctx), r.st.RunID, r.st.Version, all, opts...); err != nil {
		return err
	}
	r.pending = nil
	r.st = next
	for _, ev := range all[fresh:] {
		r.observe(ev)
	}
	r.e.cfg.Keep(r.st.RunID, all)
	r.e.cfg.Notify(r.st.RunID, r.st.Version)
	return nil
}

// flush commits events still pending when the driver stops, so a tool's
// result that was paid for is not lost.
func (r *runner) flush() {
	if len(r.pending) == 0 || r.st.Status != reinv1.RunStatus_RUN_STATUS_RUNNING {
		return
	}
	if err := r.commit(context.Background()); err != nil {
		r.e.cfg.Logger.Error("flush pending events", "run_id", r.st.RunID, "error", err)
	}
}

// fail ends the run as failed with msg.
func (r *runner) fail(msg string) error {
	r.pending = nil
	st, err := r.e.cfg.Store.Load(context.Background(), r.st.RunID)
	if err != nil {
		return err
	}
	r.st = st
	if st.Status != reinv1.RunStatus_RUN_STATUS_RUNNING {
		return nil
	}
	r.now = timestamppb.New(r.e.cfg.Clock())
	return r.commit(context.Background(), &reinv1.Event{Actor: "harness", Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{
		From: st.Status, To: reinv1.RunStatus_RUN_STATUS_FAILED, Reason: "harness_defect", Error: msg,
	}}})
}
