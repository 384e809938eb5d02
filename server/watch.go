package server

import (
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
	st, err := s.load(ctx, req.GetRunId())
	if err != nil {
		return toStatus(s.log, "WatchRun", err)
	}
	cursor := req.GetAfterSequence()
	if cursor > st.Version {
		return status.Errorf(codes.OutOfRange, "after_sequence %d is beyond the run's last event %d; watch from %d or less", cursor, st.Version, st.Version)
	}
	// A terminal status_changed is always a run's last event: the stream
	// ends once it was sent (or, for a terminal run, once the cursor is at
	// the head).
	if runstate.Terminal(st.Status) && cursor == st.Version {
		return nil
	}
	if req.GetModelOutput() && s.follows != nil {
		// The run may be driven by another server: follow its output
		// through the relay too.
		defer s.follows.join(req.GetRunId())()
	}
	out := outputs{sub: sub, stream: stream}
	fromStore := true // the first read is always from the store
	for {
		var evs []*reinv1.Event
		if !fromStore {
			evs, fromStore = s.hub.Tail(req.GetRunId(), cursor)
			if fromStore = !fromStore; fromStore {
				s.metrics.WatchLagged("run") // the tail no longer reaches back to its cursor
			}
		}
		if fromStore {
			if evs, err = s.store.Events(ctx, req.GetRunId(), cursor, defaultEventPage); err != nil {
				return toStatus(s.log, "WatchRun", err)
			}
		}
		for _, ev := range evs {
			// The rest of a call the watcher follows goes before the
			// events after its model_requested: a watcher behind sends
			// each call's text in its place.
			if err := out.flush(cursor); err != nil {
				return err
			}
			if err := stream.Send(&reinv1.WatchRunResponse{Event: ev}); err != nil {
				return err
			}
			cursor = ev.GetSequence()
			if sc := ev.GetStatusChanged(); sc != nil && runstate.Terminal(sc.GetTo()) {
				return nil
			}
		}
		if fromStore && len(evs) == defaultEventPage {
			continue // a full page: read on until caught up
		}
		// Caught up. Any commit after the read woke the subscription, which
		// was made before the first read: wait for it.
		fromStore = false
		if err := out.send(cursor); err != nil {
			return err
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
			return status.FromContextError(ctx.Err()).Err()
		case <-s.done:
			return status.Errorf(codes.Unavailable, "the server is shutting down; resume the watch with after_sequence=%d", cursor)
		}
	}
}

// outputs sends a watcher the text of the run's model calls in flight, at
// most one message per outputEvery.
type outputs struct {
	sub    *Subscription
	stream grpc.ServerStreamingServer[reinv1.WatchRunResponse]
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
		if err := o.stream.Send(&reinv1.WatchRunResponse{Output: m}); err != nil {
			return err
		}
		o.last = time.Now()
	}
}
