package aguiface

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
)

// stream serves run runID as AG-UI events from at. The run is looked up
// and its watch opened before the response starts, so that a refusal (no
// credentials, another tenant's run, a point beyond the run's last event)
// is an HTTP error; after that, the stream ends when the run has ended
// and every event was sent, when the client goes, or when a write to it
// blocks longer than WriteTimeout.
func (f *Face) stream(w http.ResponseWriter, r *http.Request, runID, threadID string, at point) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	run, err := f.opts.Runs.GetRun(out(ctx, r), &reinv1.GetRunRequest{RunId: runID})
	if err != nil {
		refuse(w, err)
		return
	}
	if v := run.GetRun().GetVersion(); at.after > v {
		http.Error(w, fmt.Sprintf("after %d is beyond the run's last event, %d: give the id of a message this run sent", at.after, v), http.StatusBadRequest)
		return
	}
	// From the first event: the state at the resume point is the fold of
	// the events up to it.
	watch, err := f.opts.Runs.WatchRun(out(ctx, r), &reinv1.WatchRunRequest{RunId: runID, ModelOutput: true})
	if err != nil {
		refuse(w, err)
		return
	}
	t := newTranslator(runID, threadID)
	for t.state.Version < at.after {
		msg, err := watch.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = status.Error(codes.Unavailable, "the run's watch ended before its event "+strconv.FormatUint(at.after, 10)+": try again")
			}
			refuse(w, err)
			return
		}
		if ev := msg.GetEvent(); ev != nil {
			if _, err := t.apply(ev); err != nil {
				refuse(w, status.Error(codes.DataLoss, err.Error()))
				return
			}
		}
	}

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	s := &sse{w: w, rc: http.NewResponseController(w), timeout: f.opts.WriteTimeout}
	for _, e := range t.opening() {
		s.add("", e)
	}
	if err := s.flush(); err != nil {
		return
	}
	if runstate.Terminal(t.state.Status) {
		return // ended there: the opening ended it again
	}

	msgs := make(chan *reinv1.WatchRunResponse)
	recvErr := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			msg, err := watch.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case msgs <- msg:
			case <-ctx.Done():
				recvErr <- ctx.Err()
				return
			}
		}
	}()
	defer func() { cancel(); <-done }()

	beat := time.NewTicker(f.opts.Heartbeat)
	defer beat.Stop()
	skip := at.skip
	for {
		select {
		case <-ctx.Done():
			return
		case <-beat.C:
			s.comment("keep-alive")
		case err := <-recvErr:
			if !errors.Is(err, io.EOF) && ctx.Err() == nil {
				// The server stops, or the run's history is damaged: the
				// client resumes from the last id it got.
				f.opts.Logger.Info("agui: a run's stream ended", "run_id", runID, "error", err)
			}
			return
		case msg := <-msgs:
			if o := msg.GetOutput(); o != nil {
				for _, e := range t.outputEvents(o) {
					s.add("", e)
				}
			}
			if ev := msg.GetEvent(); ev != nil {
				events, err := t.apply(ev)
				if err != nil {
					f.opts.Logger.Warn("agui: a run's event does not fold", "run_id", runID, "error", err)
					s.add("", event{"type": "RUN_ERROR", "message": err.Error(), "code": "data_loss"})
					_ = s.flush()
					return
				}
				seq := strconv.FormatUint(ev.GetSequence(), 10)
				for i, e := range events {
					if i < skip {
						continue
					}
					id := seq
					if i < len(events)-1 {
						id = seq + ":" + strconv.Itoa(i+1)
					}
					s.add(id, e)
				}
				skip = 0
			}
		}
		if err := s.flush(); err != nil {
			return
		}
	}
}

// sse is a response of server-sent events. Messages gather in buf and go
// out together on flush, under a write deadline: a client that does not
// read holds no more than what one flush writes.
type sse struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	buf     bytes.Buffer
}

func (s *sse) add(id string, e event) {
	b, err := json.Marshal(e)
	if err != nil {
		b, _ = json.Marshal(event{"type": "RUN_ERROR", "message": "an event could not be encoded: " + err.Error()})
	}
	if id != "" {
		s.buf.WriteString("id: " + id + "\n")
	}
	s.buf.WriteString("data: ")
	s.buf.Write(b)
	s.buf.WriteString("\n\n")
}

func (s *sse) comment(text string) { s.buf.WriteString(": " + text + "\n\n") }

func (s *sse) flush() error {
	if s.buf.Len() == 0 {
		return nil
	}
	// Not every writer has a deadline to set (a test's recorder); the
	// write then blocks as the writer does.
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
	_, err := s.w.Write(s.buf.Bytes())
	s.buf.Reset()
	if err == nil {
		err = s.rc.Flush()
	}
	return err
}
