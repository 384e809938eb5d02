package engine

import (
	"context"
	"errors"

	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
)

// The registry of driven runs: a run that anything of the engine is working
// on (stepping it, committing a person's approved write) has one driver, a
// goroutine registered in Engine.active until it leaves. Cancel stops a
// run's driver and waits for it; Shutdown and Close wait for all of them.
// So no work on a run happens outside the registry, where a cancel, a
// shutdown or another owner's takeover would not see it.

type driver struct {
	cancel context.CancelCauseFunc
	done   chan struct{}
	// again is set when the run is scheduled while this driver is
	// finishing: it drives once more before it leaves (guarded by
	// Engine.mu), so a run resumed by a person just as its driver paused is
	// never left running with no driver.
	again bool
	// ended is set (guarded by Engine.mu) once the engine published the
	// run in a terminal status (publish): the driver then reads nothing
	// more of it, since no timer is armed for an ended run.
	ended bool
}

// ErrShuttingDown refuses work on an engine that is shutting down. The
// server answers it with Unavailable.
var ErrShuttingDown = errors.New("the server is shutting down")

// schedule makes sure a running run is driven: it starts a driver, or has
// the one the run has drive once more.
func (e *Engine) schedule(runID string) {
	_, _ = e.launch(runID, nil)
}

// launch starts a driver for runID that calls first (if not nil) and then
// steps the run while it is running. When the run has a driver already,
// launch returns it and starts none: without first, that driver drives once
// more; with first, the caller waits for it to leave and tries again.
func (e *Engine) launch(runID string, first func(context.Context)) (*driver, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, ErrShuttingDown
	}
	if d := e.active[runID]; d != nil {
		if first == nil {
			d.again = true
		}
		return d, nil
	}
	if e.stepped {
		// StepWhileRunning steps the run; there is no driver to start.
		return nil, nil
	}
	ctx, cancel := context.WithCancelCause(e.base)
	d := &driver{cancel: cancel, done: make(chan struct{})}
	e.active[runID] = d
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		defer func() {
			cancel(nil)
			close(d.done)
		}()
		if first != nil {
			first(ctx)
		}
		for {
			e.driveSlot(ctx, runID)
			e.mu.Lock()
			ended := d.ended
			e.mu.Unlock()
			if !ended {
				if st, err := e.cfg.Store.Load(e.base, runID); err == nil {
					e.Arm(st) // a run that paused keeps its deadlines
				}
			}
			e.mu.Lock()
			if !d.again || ctx.Err() != nil {
				delete(e.active, runID)
				e.mu.Unlock()
				return
			}
			d.again = false
			e.mu.Unlock()
		}
	}()
	return nil, nil
}

// driveSlot drives the run in one of the engine's Workers slots.
func (e *Engine) driveSlot(ctx context.Context, runID string) {
	select {
	case e.sem <- struct{}{}:
	case <-ctx.Done():
		return
	}
	defer func() { <-e.sem }()
	switch err := e.drive(ctx, runID); {
	case err == nil:
		e.mu.Lock()
		delete(e.retries, runID)
		e.mu.Unlock()
	case errors.Is(err, store.ErrFenced):
		e.cfg.Logger.Warn("this server no longer holds the run's lease, so it stopped driving it; the server that took it carries it on", "run_id", runID, "error", err)
	case ctx.Err() != nil:
		// Cancelled, stopped or shut down: whoever did it says what follows.
	default:
		e.retryStopped(runID, err)
	}
}

// asDriver runs job as the run's driver, registered like any other (a
// cancel waits for it, a shutdown too), and then steps the run if job left
// it running. It returns job's result. When the run has a driver already,
// asDriver waits for it to leave and tries again; check, when not nil, is
// asked after each wait, and its error is returned at once (the run is no
// longer waiting for job). A synchronous engine runs job on the caller's
// goroutine.
func (e *Engine) asDriver(ctx context.Context, runID string, check func(context.Context) error, job func(context.Context) (runstate.State, error)) (runstate.State, error) {
	if e.stepped {
		return job(ctx)
	}
	type result struct {
		st  runstate.State
		err error
	}
	res := make(chan result, 1)
	first := func(ctx context.Context) {
		st, err := job(ctx)
		res <- result{st, err}
	}
	for {
		d, err := e.launch(runID, first)
		if err != nil {
			return runstate.State{}, err
		}
		if d == nil {
			break
		}
		// The run's driver is leaving (the run paused): wait for it.
		select {
		case <-d.done:
		case <-ctx.Done():
			return runstate.State{}, ctx.Err()
		}
		if check != nil {
			if err := check(ctx); err != nil {
				return runstate.State{}, err
			}
		}
	}
	select {
	case r := <-res:
		return r.st, r.err
	case <-ctx.Done():
		// The job goes on as the run's driver; its outcome is in the log.
		return runstate.State{}, ctx.Err()
	}
}

// stop cancels the run's driver, if any, and waits for it to exit.
func (e *Engine) stop(ctx context.Context, runID string) error {
	e.mu.Lock()
	d := e.active[runID]
	e.mu.Unlock()
	if d == nil {
		return nil
	}
	d.cancel(errCancelled)
	select {
	case <-d.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Wait blocks until the run has no driver: it paused, ended, or was stopped.
func (e *Engine) Wait(ctx context.Context, runID string) error {
	e.mu.Lock()
	d := e.active[runID]
	e.mu.Unlock()
	if d == nil {
		return nil
	}
	select {
	case <-d.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// errAbandoned stops the drivers of an engine whose leases ended.
var errAbandoned = errors.New("this server's leases on its runs ended")

// Abandon stops driving every run at once, writing nothing: this server's
// leases on its runs are gone (a replica whose etcd lease ended), so what
// its drivers would still append would be refused, and other servers take
// the runs. It cancels every driver and waits for them (or ctx), disarms
// every timer and forgets every lease. The engine goes on serving calls,
// and drives runs again when asked to (ResumeAll, Takeover): it acquires
// each anew.
func (e *Engine) Abandon(ctx context.Context) {
	e.mu.Lock()
	drivers := make([]*driver, 0, len(e.active))
	for _, d := range e.active {
		d.cancel(errAbandoned)
		drivers = append(drivers, d)
	}
	for id, t := range e.timers {
		t.Stop()
		delete(e.timers, id)
	}
	e.leases.clear()
	clear(e.retries)
	e.mu.Unlock()
	for _, d := range drivers {
		select {
		case <-d.done:
		case <-ctx.Done():
		}
	}
	e.leases.clear() // any a driver noted on its way out
}

// Driving is how many runs this engine holds a lease on now.
func (e *Engine) Driving() int {
	return e.leases.count()
}

// Tending reports whether this engine drives run runID now, or keeps its
// deadlines (a paused run's timer is armed).
func (e *Engine) Tending(runID string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.active[runID] != nil || e.timers[runID] != nil
}

// Occupancy is how many runs this engine drives now, and the most it
// drives at once (Config.MaxDriven; 0: no cap). A replica takes orphaned
// runs the slower the more occupied it is (internal/replica).
func (e *Engine) Occupancy() (driving, limit int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.active), e.cfg.MaxDriven
}

// retryStopped hands a run whose driver stopped on an error (the store
// unavailable or full, a tool server down while a parent created its
// children) back to the resume path, as a restart would, after a wait
// that doubles with each failure in a row, from RetryWait up to
// MaxRetryWait: a run is never left running with nothing driving it. The
// retry reads the run again and resumes it as ResumeAll does (a running
// run is driven, a dispatched write settled, a paused run's deadlines
// armed); one that ended meanwhile is left alone. A run whose stored
// record is damaged or gone is not retried: waiting mends neither. The
// wait runs in the engine's wait group (later), and Abandon forgets it.
func (e *Engine) retryStopped(runID string, err error) {
	if errors.Is(err, store.ErrDataLoss) || errors.Is(err, store.ErrNotFound) {
		e.cfg.Logger.Error("run stopped; it is not retried, as what is stored of it is damaged or gone (rein check lists the damage)", "run_id", runID, "error", err)
		e.mu.Lock()
		delete(e.retries, runID)
		e.mu.Unlock()
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	n := e.retries[runID]
	e.retries[runID] = n + 1
	wait := e.cfg.MaxRetryWait
	if n < 16 {
		wait = min(e.cfg.RetryWait<<n, wait)
	}
	e.cfg.Logger.Error("run stopped; it is resumed after a wait", "run_id", runID, "error", err, "wait", wait, "attempt", n+1)
	e.later(wait, func() {
		e.mu.Lock()
		_, due := e.retries[runID]
		e.mu.Unlock()
		if !due {
			return // Abandon forgot it
		}
		st, err := e.cfg.Store.Load(e.base, runID)
		if err != nil {
			e.retryStopped(runID, err)
			return
		}
		if runstate.Terminal(st.Status) || runstate.Paused(st.Status) && !st.WriteInFlight() {
			// Nothing is left to drive (it ended, or waits for a person):
			// the failures in a row end here.
			e.mu.Lock()
			delete(e.retries, runID)
			e.mu.Unlock()
		}
		if !runstate.Terminal(st.Status) {
			e.resumeOne(e.base, st)
		}
	})
}
