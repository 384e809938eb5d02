package server

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
)

// outputEvery bounds how often a watcher is sent a run's model output: at
// most one ModelOutput per outputEvery, but for the rest of a call, sent
// at once before the events that follow it.
const outputEvery = 100 * time.Millisecond

// WatchRun streams history from the store, then live events as the hub says
// the log grew (subscribe first, then read, so no wake-up is lost), and,
// when asked, the text of the run's model call in flight (outputs). It ends
// OK once the run is terminal and every event was sent.
func (s *runService) WatchRun(req *reinv1.WatchRunRequest, stream grpc.ServerStreamingServer[reinv1.WatchRunResponse]) error {
	ctx := stream.Context()
	defer s.metrics.WatchOpened("run")()
	subscribe := s.hub.Subscribe
	if req.GetModelOutput() {
		subscribe = s.hub.SubscribeOutput
	}
	sub := subscribe(req.GetRunId())
	defer sub.Close()
	cursor, ended, err := s.watchFrom(ctx, req)
	if err != nil || ended {
		return err
	}
	if req.GetModelOutput() && s.follows != nil {
		// The run may be driven by another server: follow its output
		// through the relay too.
		defer s.follows.join(req.GetRunId())()
	}
	cursor, err = FollowRun(ctx, s.store, sub, cursor, s.done, stream.Send, func() {
		s.metrics.WatchLagged("run") // the tail no longer reaches back to its cursor
	})
	var read *readError
	switch {
	case errors.As(err, &read):
		return toStatus(s.log, "WatchRun", read.err)
	case errors.Is(err, errShutdown):
		return status.Errorf(codes.Unavailable, "the server is shutting down; resume the watch with after_sequence=%d", cursor)
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return status.FromContextError(ctx.Err()).Err()
	}
	return err
}

// watchFrom checks where a watch of the run starts: ended says the run
// ended and the cursor is at its last event, so there is nothing to send.
// (Apart from WatchRun, so that the run's state is off the stack of the
// stream's goroutine while it waits.)
func (s *runService) watchFrom(ctx context.Context, req *reinv1.WatchRunRequest) (cursor uint64, ended bool, err error) {
	st, err := s.load(ctx, req.GetRunId())
	if err != nil {
		return 0, false, toStatus(s.log, "WatchRun", err)
	}
	cursor = req.GetAfterSequence()
	if cursor > st.Version {
		return 0, false, status.Errorf(codes.OutOfRange, "after_sequence %d is beyond the run's last event %d; watch from %d or less", cursor, st.Version, st.Version)
	}
	// A terminal status_changed is always a run's last event: the stream
	// ends once it was sent (or, for a terminal run, once the cursor is at
	// the head).
	return cursor, runstate.Terminal(st.Status) && cursor == st.Version, nil
}

// RunEvents reads a page of a run's log (store.Store's Events).
type RunEvents interface {
	Events(ctx context.Context, runID string, after uint64, limit int) ([]*reinv1.Event, error)
}

// errShutdown is FollowRun's error when done closes.
var errShutdown = errors.New("the server is shutting down")

// readError is FollowRun's error when the store could not be read.
type readError struct{ err error }

func (e *readError) Error() string { return e.err.Error() }
func (e *readError) Unwrap() error { return e.err }

// FollowRun is WatchRun's loop: it hands send the events of sub's run
// after cursor, history from the store, then live ones as the hub says
// the log grew (from its tail, or the store again when the tail no longer
// reaches back to the cursor: lagged, if set, is told), and with an output
// subscription (SubscribeOutput) the text of the run's model call in
// flight: at most one message per outputEvery, and the rest of a call
// before the events after its model_requested. sub must have been made
// before the run was read, so that no wake-up is lost. It returns the last
// event's sequence handed over, and nil once it handed over the run's
// terminal event; else send's error, ctx's, errShutdown when done closes,
// or a *readError.
func FollowRun(ctx context.Context, store RunEvents, sub *Subscription, cursor uint64, done <-chan struct{},
	send func(*reinv1.WatchRunResponse) error, lagged func()) (uint64, error) {
	out := outputs{sub: sub, to: send}
	fromStore := true // the first read is always from the store
	for {
		var evs []*reinv1.Event
		if !fromStore {
			evs, fromStore = sub.hub.Tail(sub.runID, cursor)
			if fromStore = !fromStore; fromStore && lagged != nil {
				lagged()
			}
		}
		if fromStore {
			var err error
			if evs, err = store.Events(ctx, sub.runID, cursor, defaultEventPage); err != nil {
				return cursor, &readError{err}
			}
		}
		for _, ev := range evs {
			// The rest of a call the watcher follows goes before the
			// events after its model_requested: a watcher behind sends
			// each call's text in its place.
			if err := out.flush(cursor); err != nil {
				return cursor, err
			}
			if err := send(&reinv1.WatchRunResponse{Event: ev}); err != nil {
				return cursor, err
			}
			cursor = ev.GetSequence()
			if sc := ev.GetStatusChanged(); sc != nil && runstate.Terminal(sc.GetTo()) {
				return cursor, nil
			}
		}
		if fromStore && len(evs) == defaultEventPage {
			continue // a full page: read on until caught up
		}
		// Caught up. Any commit after the read woke the subscription, which
		// was made before the first read: wait for it.
		fromStore = false
		if err := out.send(cursor); err != nil {
			return cursor, err
		}
		woken := sub.O // nil unless the watcher asked for model output
		if out.due != nil {
			woken = nil // the output waits for due anyway
		}
		select {
		case <-sub.C:
		case <-woken:
		case <-out.due:
			out.due = nil
		case <-ctx.Done():
			return cursor, ctx.Err()
		case <-done:
			return cursor, errShutdown
		}
	}
}

// outputs sends a watcher the text of the run's model calls in flight, at
// most one message per outputEvery.
type outputs struct {
	sub *Subscription
	to  func(*reinv1.WatchRunResponse) error
	// last is when the last message was sent; due fires when the next may
	// be (nil when no send waits).
	last time.Time
	due  <-chan time.Time
}

// send sends what the watcher has of the model output, now if the bound
// allows, else once due fires.
func (o *outputs) send(cursor uint64) error {
	if o.sub.O == nil || o.due != nil {
		return nil
	}
	if wait := outputEvery - time.Since(o.last); wait > 0 {
		o.due = time.After(wait)
		return nil
	}
	return o.flush(cursor)
}

// flush sends what the watcher has of the model output, now.
func (o *outputs) flush(cursor uint64) error {
	if o.sub.O == nil {
		return nil
	}
	for {
		m := o.sub.Output(cursor)
		if m == nil {
			return nil
		}
		if err := o.to(&reinv1.WatchRunResponse{Output: m}); err != nil {
			return err
		}
		o.last = time.Now()
	}
}
