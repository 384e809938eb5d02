// Package engine drives runs: it starts, forks, resumes and cancels them,
// holds each running run's lease in one driver goroutine at a time (the
// number that step at once is bounded), and loops the run's steps
// (internal/step, docs/design.md §3) until it leaves running. People's
// decisions, a paused run's timers and a delegation's children are the
// engine's too. Every change goes to the store as events through the one
// commit path (commit), which the store's fold validates before it writes
// them and whose resulting state it returns; the engine never changes a
// run any other way. The step package imports nothing of the engine's: a
// step reaches the engine through step.Host.
package engine

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oklog/ulid/v2"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/policy"
	"github.com/reinhq/rein/internal/pricing"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/secret"
	"github.com/reinhq/rein/internal/step"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/storeformat"
	"github.com/reinhq/rein/internal/taskcontract"
	"github.com/reinhq/rein/internal/tools"
)

// Store is what the engine needs of an event store (see internal/store).
type Store interface {
	Create(ctx context.Context, started *reinv1.Event) (runstate.State, bool, error)
	// Append returns the state the store folded the events into and
	// stored (store.Store's Append): the engine folds nothing itself.
	Append(ctx context.Context, runID string, expected uint64, events []*reinv1.Event, opts ...store.AppendOption) (runstate.State, error)
	Acquire(ctx context.Context, runID, owner string) (uint64, error)
	Load(ctx context.Context, runID string) (runstate.State, error)
	Events(ctx context.Context, runID string, after uint64, limit int) ([]*reinv1.Event, error)
	List(ctx context.Context, f store.Filter) (store.Page, error)
	Import(ctx context.Context, events []*reinv1.Event, blobs map[string][]byte) (runstate.State, error)
	// Blobs are blobs a run's appends stored WithBlobs (store.Store's
	// Blobs): a proposal's preview or arguments stored apart are read back
	// to commit the write.
	Blobs(ctx context.Context, runID string, hashes []string) (map[string][]byte, error)
}

// Config configures an Engine. Store is required.
type Config struct {
	Store Store
	// Models builds a run's model from its contract; nil means model.New.
	Models func(*reinv1.ModelSpec) (model.Model, error)
	// Tools runs granted tools; nil means no tool is available.
	Tools tools.Executor
	// Clock is read once per step; nil means time.Now.
	Clock func() time.Time
	// Workers bounds how many runs step at once; 0 means 64.
	Workers int
	// ToolTimeout bounds one tool call; 0 means 60s.
	ToolTimeout time.Duration
	// Published, when set, is given the events of each durable append of a
	// run, in commit order, through Engine.publish (commit.go), with the
	// run's state after them (the watch hub keeps the last events and wakes
	// the run's watchers; metrics and the run's lifecycle log read them).
	// It must not block, nor modify the events or the state.
	Published func(st runstate.State, events []*reinv1.Event)
	// Output, when set, is given the text of each model call as the model
	// writes it, and the calls stream (the watch hub streams it to the
	// runs' watchers); nil means calls do not stream. Like Published, it
	// must not block.
	Output step.Output
	// Rates are the model-rate limits every run shares (internal/
	// ratelimit); nil for none.
	Rates step.Rates
	// Policy decides tool calls by the server's rules and policy services,
	// with each contract's rules; nil has only the contracts'.
	Policy *policy.Checker
	// Logger receives what the engine cannot return to a caller.
	Logger *slog.Logger
	// Owner names this engine in the runs' leases; "" means a random name.
	Owner string
	// Replica says the store is shared with other servers, each holding
	// its runs under a live lease that the store checks (the etcd store
	// with an etcd lease): a person's decision that was fenced because
	// another server took the paused run is tried again, taking the run
	// (see againIfFenced).
	Replica bool
	// MaxDriven, when not 0, is how many runs this engine drives at once
	// before it leaves a running run it holds no lease on to other servers
	// (a replica: their look over the runs takes it); 0 means no cap.
	MaxDriven int
	// TookOver, when set, is told of each run a driver carries on that this
	// engine held no lease on, past its start: one found at start-up, or
	// one taken over from a server whose lease ended.
	TookOver func(st runstate.State, epoch uint64)
	// NewID makes a run or proposal ID (prefix "run_" or "prop_") at now; nil
	// means a ULID. Replay gives back the recorded IDs.
	NewID func(prefix string, now time.Time) string
	// NoTimers leaves paused runs' deadlines to Expire calls (replay fires
	// them where the recording did).
	NoTimers bool
	// ApprovalsNeedTwo forbids a person to approve a proposal they revised
	// (rein serve --approvals-need-two): another approver must.
	ApprovalsNeedTwo bool
	// Workspace is the root the completion checks run in; "" means none,
	// and a contract with checks is refused.
	Workspace string
	// NoProgressSteps ends a run as budget_exhausted (no_progress) when this
	// many completion-check results in a row are identical failures with no
	// committed write between them; 0 means 3.
	NoProgressSteps int
	// Prices turn each model call's tokens into dollars (model_returned's
	// cost_usd, the run's cost, budget.max_cost_usd); nil means
	// pricing.Default().
	Prices *pricing.Table
	// Wait sleeps before a model call's one retry; nil means a timer that
	// ctx cuts. Replay waits for nothing.
	Wait func(ctx context.Context, d time.Duration) error
	// RetryWait is the wait before a retry when the provider names none; 0
	// means 1s. MaxRetryWait is the longest wait rein accepts; a provider
	// that asks for more fails the call. 0 means 60s.
	RetryWait, MaxRetryWait time.Duration
	// OnToolChange is what the engine does when a granted tool's definition
	// differs from the one a run holds (rein serve --on-tool-change; the
	// zero value pauses the run).
	OnToolChange step.ToolChangeAction
	// Formats says which store formats the engine may write now
	// (internal/storeformat): a run records its tools' digests only when
	// the store's active format has them (toolchange.go). Nil writes every
	// format this build knows.
	Formats *storeformat.Gate
	// Secrets are the server's secrets, redacted from the outside text the
	// engine records (secrets.go): what its models and tools answer (New
	// wraps Models and Tools) and the completion checks' output. Nil
	// redacts nothing.
	Secrets *secret.Redactor
}

// Engine starts, drives and cancels runs.
type Engine struct {
	cfg Config
	sem chan struct{}
	// base is cancelled by Close.
	base     context.Context
	shutdown context.CancelCauseFunc
	wg       sync.WaitGroup
	// leases are the runs' leases this engine holds (lease.go).
	leases leases

	// mu guards active, timers, retries and closed.
	mu     sync.Mutex
	active map[string]*driver
	timers map[string]*time.Timer
	// retries counts, for each run whose driver stopped on an error, the
	// failures in a row (retryStopped).
	retries map[string]int
	closed  bool
	// halted are runs no driver may step (a cancel cascading to their
	// children first), with how many cancels hold each.
	halted map[string]int

	idMu sync.Mutex
	ids  *ulid.MonotonicEntropy

	// draining makes drivers stop at the next step boundary (Shutdown).
	draining atomic.Bool
	// stepped: the caller steps runs with StepWhileRunning (sync.go);
	// schedule starts no driver.
	stepped bool
	// steps is what the runs' steps read of cfg (step.New).
	steps step.Config
}

var (
	errShutdown  = errors.New("engine shutting down")
	errCancelled = errors.New("run cancelled")
)

// New returns an engine. Call Close to stop it.
func New(cfg Config) *Engine {
	if cfg.Models == nil {
		cfg.Models = model.New
	}
	cfg.Models, cfg.Tools = redactModels(cfg.Models, cfg.Secrets), redactTools(cfg.Tools, cfg.Secrets)
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 64
	}
	if cfg.ToolTimeout <= 0 {
		cfg.ToolTimeout = 60 * time.Second
	}
	if cfg.NoProgressSteps <= 0 {
		cfg.NoProgressSteps = 3
	}
	if cfg.Prices == nil {
		cfg.Prices = pricing.Default()
	}
	if cfg.Wait == nil {
		cfg.Wait = sleep
	}
	if cfg.RetryWait <= 0 {
		cfg.RetryWait = time.Second
	}
	if cfg.MaxRetryWait <= 0 {
		cfg.MaxRetryWait = time.Minute
	}
	if cfg.Published == nil {
		cfg.Published = func(runstate.State, []*reinv1.Event) {}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Owner == "" {
		cfg.Owner = "engine-" + ulid.Make().String()
	}
	base, cancel := context.WithCancelCause(context.Background())
	e := &Engine{
		cfg:      cfg,
		sem:      make(chan struct{}, cfg.Workers),
		base:     base,
		shutdown: cancel,
		active:   map[string]*driver{},
		timers:   map[string]*time.Timer{},
		retries:  map[string]int{},
		ids:      ulid.Monotonic(rand.Reader, 0),
	}
	e.steps = step.Config{
		ToolTimeout: cfg.ToolTimeout, Prices: cfg.Prices,
		Wait: cfg.Wait, RetryWait: cfg.RetryWait, MaxRetryWait: cfg.MaxRetryWait,
		Workspace: cfg.Workspace, NoProgressSteps: cfg.NoProgressSteps, Secrets: cfg.Secrets,
		Output: cfg.Output, Policy: cfg.Policy, Rates: cfg.Rates, OnToolChange: cfg.OnToolChange,
	}
	return e
}

// StartRequest starts a run.
type StartRequest struct {
	RequestID string
	Contract  *reinv1.TaskContract
	Principal string
	Tenant    string
	// TraceID and TraceParent are the run's trace and the caller's span it
	// hangs from (run_started.trace_id and trace_parent_span_id), in W3C
	// hex; either may be empty.
	TraceID, TraceParent string
	// DelegatedBy and Deadline start a run as a delegation's child: its
	// origin, and the deadline (its parent's) it may not pass whatever its
	// timeout. A replay of a child sets them as recorded; zero: a root.
	DelegatedBy *reinv1.DelegatedBy
	Deadline    time.Time
	// Queued creates the run queued: it waits for Admit (a root run only;
	// a child runs in its parent's slot).
	Queued bool
}

// Start validates the contract, stores the run and schedules it. A request ID
// the tenant used before returns that run with created=false.
func (e *Engine) Start(ctx context.Context, req StartRequest) (runstate.State, bool, error) {
	if req.RequestID == "" {
		return runstate.State{}, false, &taskcontract.FieldError{Field: "request_id", Description: "required: an idempotency key; the same key returns the same run"}
	}
	started := &reinv1.RunStarted{Principal: req.Principal, Tenant: req.Tenant, RequestId: req.RequestID,
		TraceId: req.TraceID, TraceParentSpanId: req.TraceParent, DelegatedBy: req.DelegatedBy}
	if !req.Deadline.IsZero() {
		started.Deadline = timestamppb.New(req.Deadline)
	}
	started.Queued = req.Queued && req.DelegatedBy == nil
	return e.create(ctx, req.Contract, started, nil, nil)
}

// Resume schedules a stored run that is running but has no driver, such as
// one found at start-up.
func (e *Engine) Resume(ctx context.Context, runID string) error {
	st, err := e.cfg.Store.Load(ctx, runID)
	if err != nil {
		return err
	}
	if st.Status == reinv1.RunStatus_RUN_STATUS_RUNNING {
		e.schedule(runID)
	}
	return nil
}

// Cancel cancels a running or paused run: it stops the run's driver, whose
// in-flight model call and tool see their contexts cancelled, then records
// cancelled. A run waiting for children has them cancelled first, each
// recorded in its own log. A terminal run is refused with
// runstate.ErrTerminal.
func (e *Engine) Cancel(ctx context.Context, runID, reason, actor string) (runstate.State, error) {
	// A parent waiting for children has them cancelled first; it is kept
	// from stepping meanwhile, so a child's end does not carry it on.
	defer e.halt(runID)()
	if err := e.stop(ctx, runID); err != nil {
		return runstate.State{}, err
	}
	if err := e.cancelChildren(ctx, runID, actor); err != nil {
		return runstate.State{}, err
	}
	if reason == "" {
		reason = "cancelled by " + actor
	}
	// Someone may append between the load and the append (a driver that
	// was just scheduled, a timer): the run is stopped again and loaded
	// again. On a replica, another server may have taken the run from
	// this engine (commit forgot the lease): the second try takes it back.
	return e.againIfFenced(func() (st runstate.State, err error) {
		err = store.RetryOnConflict(ctx, runID, "cancel", func() error {
			st = runstate.State{}
			if err := e.stop(ctx, runID); err != nil {
				return err
			}
			loaded, err := e.cfg.Store.Load(ctx, runID)
			if err != nil {
				return err
			}
			st = loaded
			if runstate.Terminal(st.Status) {
				return fmt.Errorf("cancel run %s: %w", runID, &StatusError{Status: st.Status})
			}
			next, err := e.commit(ctx, st, actor, []*reinv1.Event{{Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{
				From: st.Status, To: reinv1.RunStatus_RUN_STATUS_CANCELLED, Reason: reason,
			}}}})
			if err != nil {
				return err
			}
			st = next
			e.disarm(runID)
			return nil
		})
		return st, err
	})
}

// StatusError refuses an operation because of a run's status.
type StatusError struct {
	Status reinv1.RunStatus
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("the run is %s: %v", runstate.StatusName(e.Status), runstate.ErrTerminal)
}

func (e *StatusError) Unwrap() error { return runstate.ErrTerminal }

// Shutdown stops the engine gracefully: no new run starts, and each driver
// stops after the step it is in commits. Drivers still stepping when ctx ends
// are cancelled, as Close does.
func (e *Engine) Shutdown(ctx context.Context) {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	e.stopTimers()
	e.draining.Store(true)
	done := make(chan struct{})
	go func() {
		e.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		e.Close()
	}
}

// Close stops every driver and waits for them. Runs that were stepping stay
// running in the store; Resume carries them on.
func (e *Engine) Close() {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	e.stopTimers()
	e.shutdown(errShutdown)
	e.wg.Wait()
}

func (e *Engine) newID(prefix string, now time.Time) string {
	if e.cfg.NewID != nil {
		return e.cfg.NewID(prefix, now)
	}
	e.idMu.Lock()
	defer e.idMu.Unlock()
	return prefix + ulid.MustNew(ulid.Timestamp(now), e.ids).String()
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
