// Package step takes the steps of one run (docs/design.md §3): budget,
// context, model call, parse, route. A Stepper holds the run while a
// driver owns it: its state, the transcript the model reads, the model
// and the granted tools' input schemas. It changes the run only through
// its Host, the engine that drives it (internal/engine), which commits
// each step's events through its one commit path; the step never reads or
// writes the store itself, and imports nothing of the engine's.
//
// The contract's rules (its validation, bounds and defaults) are
// internal/taskcontract's; the package holds what the step loop adds: the
// completion checks' workspace (CheckWorkspace) and the bounds on what a
// step records inline (docs/design.md §4).
package step

import (
	"context"
	"log/slog"
	"time"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/policy"
	"github.com/reinhq/rein/internal/pricing"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/secret"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/tools"
)

// Host is what a Stepper needs of the engine that drives it.
type Host interface {
	// Commit appends evs to the run st is the state of, through the
	// engine's one commit path (stamped, fenced by the engine's lease on
	// the run, published), and returns the state the store folded them
	// into. An append the store's fold rejects is an error for which
	// runstate.Rejected is true; a run that moved since st is
	// store.ErrConflict.
	Commit(ctx context.Context, st runstate.State, evs []*reinv1.Event, opts ...store.AppendOption) (runstate.State, error)
	// Load is the run's stored state.
	Load(ctx context.Context, runID string) (runstate.State, error)
	// Events is a page of the run's log: its events after sequence after,
	// in order; none past its end.
	Events(ctx context.Context, runID string, after uint64) ([]*reinv1.Event, error)
	// Clock is the engine's clock, read once per step.
	Clock() time.Time
	// NewID makes a run or proposal ID (prefix "run_" or "prop_") at now.
	NewID(prefix string, now time.Time) string
	// Tools is the executor of the run's granted tools.
	Tools() tools.Executor
	// CheckModel says why the engine could not run c's model (it cannot be
	// built, or c has a cost limit and the model no price), or nil: a
	// delegation's child contract is checked before anything is stored.
	CheckModel(c *reinv1.TaskContract) error
	// StartChildren creates the children a delegation_started of parent,
	// stored at sequence seq, names: idempotently, by their request IDs, so
	// a resumed parent never starts a child twice.
	StartChildren(ctx context.Context, parent runstate.State, seq uint64, children []*reinv1.DelegatedChild) error
	// EndedChildren creates parent's open children that a crash left
	// uncreated, and returns a delegation_returned for each open child that
	// has ended, in the order they ended.
	EndedChildren(ctx context.Context, parent runstate.State) ([]*reinv1.Event, error)
	// PausedChild is an open child of parent paused on the budget lent to
	// it, if one is (ok): once any raise parent lent it since was given
	// to it (a crash between the two), which carries it on instead.
	PausedChild(ctx context.Context, parent runstate.State) (child runstate.State, ok bool, err error)
	// Logger receives what a step cannot return: a flush that failed, a
	// tool's schema that does not compile.
	Logger() *slog.Logger
}

// Config is the engine's settings that its steps read. A Stepper shares
// the engine's and never changes it.
type Config struct {
	// ToolTimeout bounds one tool call.
	ToolTimeout time.Duration
	// Sync says the engine steps runs on its caller's goroutine (a
	// synchronous engine): a tool call runs there too (Await).
	Sync bool
	// Prices turn each model call's tokens into dollars.
	Prices *pricing.Table
	// Wait sleeps before a model call's one retry. RetryWait is the wait
	// when the provider names none; MaxRetryWait the longest wait rein
	// accepts.
	Wait                    func(ctx context.Context, d time.Duration) error
	RetryWait, MaxRetryWait time.Duration
	// Workspace is the root the completion checks run in; "" means none.
	Workspace string
	// NoProgressSteps is how many identical failing completion-check
	// results in a row, with no committed write between them, end a run as
	// budget_exhausted (no_progress).
	NoProgressSteps int
	// Secrets are redacted from the completion checks' output; nil
	// redacts nothing.
	Secrets *secret.Redactor
	// Rates are the model-rate limits every run shares; nil for none.
	Rates Rates
	// Policy decides tool calls by the server's rules and policy services
	// with the contract's rules; nil has only the contract's.
	Policy *policy.Checker
	// Output, when set, is given the text of each model call as the model
	// writes it (the call streams); nil means calls do not stream.
	Output Output
	// OnToolChange is what a step does when a granted tool's definition
	// differs from the one the run holds (tooldef.go).
	OnToolChange ToolChangeAction
}
