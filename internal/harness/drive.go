package harness

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/types/known/structpb"

	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/pricing"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
)

// eventPage is how many events a driver reads at once when it loads a run.
const eventPage = 4096

// runner holds one run while a driver owns it: its state (folded by
// runstate, the one fold), the transcript the model sees, and the events of
// the last action that wait to share a commit with the next
// model_requested.
type runner struct {
	e          *Engine
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
}

// drive steps a run until it leaves running or ctx is cancelled.
func (e *Engine) drive(ctx context.Context, runID string) error {
	if e.isHalted(runID) {
		return nil
	}
	st, err := e.cfg.Store.Load(ctx, runID)
	if err != nil || st.Status != reinv1.RunStatus_RUN_STATUS_RUNNING {
		return err
	}
	// The driver holds the run's lease before it does anything, so an owner
	// it takes the run over from is fenced at once. A run another server
	// drives (a store shared by servers) is left to it.
	e.mu.Lock()
	_, held := e.leases[runID]
	full := e.cfg.MaxDriven > 0 && len(e.active) > e.cfg.MaxDriven // this driver is one of them
	e.mu.Unlock()
	if !held && full {
		e.cfg.Logger.Debug("driving as many runs as --max-runs allows: the run is left to another server", "run_id", runID)
		return nil
	}
	epoch, err := e.lease(ctx, runID)
	if err != nil {
		if errors.Is(err, store.ErrOwned) {
			return nil
		}
		return err
	}
	taken := !held && st.Version > 1
	if taken {
		e.cfg.Logger.Info("resumed run", "run_id", st.RunID, "trace_id", st.TraceID, "tenant", st.Tenant, "principal", st.Principal, "version", st.Version, "epoch", epoch)
		if e.cfg.TookOver != nil {
			e.cfg.TookOver(st, epoch)
		}
	}
	r, err := e.load(ctx, st)
	if err != nil {
		return err
	}
	if taken {
		// Recorded with the driver's first commit: who carries the run on
		// from here, and the trace the work goes on in.
		r.pending = append(r.pending, &reinv1.Event{Actor: "harness", Payload: &reinv1.Event_RunTaken{RunTaken: &reinv1.RunTaken{
			Owner: e.cfg.Owner, Epoch: epoch, TraceId: r.st.TraceID,
		}}})
	}
	defer r.flush()
	if r.model, err = e.cfg.Models(r.st.Contract.GetModel()); err != nil {
		return r.fail(fmt.Sprintf("the run's model cannot be built: %v", err))
	}
	r.inputSchemas = r.schemas(ctx)
	r.shownTools = r.modelTools()
	if call := r.st.OpenCall; call != nil {
		// The process stopped after the call was requested and before its
		// outcome was stored: run it again (a read, or a write's proposal,
		// has no side effects) before the model is called again.
		r.now = timestamppb.New(e.cfg.Clock())
		if err := r.runCall(ctx, call, r.st.OpenCallTier); err != nil {
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
		case errors.Is(err, errStopped), errors.Is(err, errWaiting):
			return nil
		case errors.Is(err, errDefect):
			return r.fail(err.Error())
		default:
			return err
		}
	}
	return nil
}

// load rebuilds a running run's transcript from its log.
func (e *Engine) load(ctx context.Context, st runstate.State) (*runner, error) {
	m := st.Contract.GetModel()
	r := &runner{e: e, st: st, toolHash: toolSetHash(st.Contract.GetTools()), modelName: m.GetProvider() + "/" + m.GetName(),
		toolTimedOut: fmt.Errorf("the tool did not answer within its timeout of %s", e.cfg.ToolTimeout)}
	r.tablePrice, r.inTable = e.cfg.Prices.Lookup(m.GetProvider(), m.GetName())
	r.transcript.init(st.Contract)
	for after := uint64(0); after < st.Version; {
		evs, err := e.cfg.Store.Events(ctx, st.RunID, after, eventPage)
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

// price is the price in force for the run's model calls: the server's
// price table's, else the one its log last recorded; ok says whether there
// is one.
func (r *runner) price() (p pricing.Price, ok bool) {
	if r.inTable {
		return r.tablePrice, true
	}
	if lp := r.st.Price; lp != nil {
		return pricing.Price{InputPerMTok: lp.GetInputPerMtok(), OutputPerMTok: lp.GetOutputPerMtok()}, true
	}
	return pricing.Price{}, false
}

var (
	// errStopped: the driver's context was cancelled mid-step; the run
	// stays as the log has it.
	errStopped = errors.New("driver stopped")
	// errDefect: the harness tried to append what the fold rejects.
	errDefect = errors.New("harness defect")
)

// commit appends the pending events and evs as one durable write, through
// the engine's one commit path, with the blobs of the model call's input
// when evs hold its model_requested.
func (r *runner) commit(ctx context.Context, evs ...*reinv1.Event) error {
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
	next, err := r.e.commit(ctx, r.st, "", all, opts...)
	if errors.Is(err, errFold) {
		r.pending, r.blobs = nil, nil
		return fmt.Errorf("%w: %v", errDefect, err)
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
