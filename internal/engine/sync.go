package engine

import (
	"context"
	"errors"
)

// A synchronous engine runs the same step code as any other, but starts no
// driver goroutine: Start, ProvideInput, DecideApproval and the rest leave a
// running run as the log has it, and the caller steps it with
// StepWhileRunning on its own goroutine. There is no scheduler, no worker
// bound and no hand-off between goroutines. Test replay (internal/replay)
// uses it, so that the engine it checks is the engine that runs, at the
// cost of the steps alone.
//
// A synchronous engine is for one goroutine: it is not safe to call it from
// several at once, and nothing steps a run unless StepWhileRunning is
// called. It has no timers either (Config.NoTimers is implied): a paused
// run's deadlines are kept by calling Expire.

// errNotSync refuses StepWhileRunning on an engine that has drivers of its
// own.
var errNotSync = errors.New("StepWhileRunning needs an engine made by NewSync: this one starts its own drivers")

// NewSync returns an engine whose runs are stepped only by
// StepWhileRunning. Call Close to stop it.
func NewSync(cfg Config) *Engine {
	cfg.NoTimers = true
	e := New(cfg)
	e.stepped = true
	e.steps.Sync = true
	return e
}

// StepWhileRunning steps the run on the caller's goroutine until it leaves
// running (it paused or ended) or ctx is cancelled: the loop a driver
// goroutine runs, with the same step code. It returns the error a driver goroutine
// would have logged, such as the store's. A run that is not running is left
// as it is.
func (e *Engine) StepWhileRunning(ctx context.Context, runID string) error {
	if !e.stepped {
		return errNotSync
	}
	return e.drive(ctx, runID)
}
