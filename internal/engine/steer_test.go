package engine

// Tests of people's messages to a running run (SteerRun): each is
// recorded with its sender, and the model reads it with its next call,
// never with one in flight.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/tools"
)

// steersIn are the people's messages a request's transcript carries, in
// order.
func steersIn(req model.Request) []string {
	var out []string
	for _, turn := range req.Transcript {
		if o := turn.Observation; o != nil && o.Source == "person" && strings.HasPrefix(o.Text, "Message from ") {
			out = append(out, o.Text)
		}
	}
	return out
}

// steerOnce sends msg to the run the first time it is called.
func steerOnce(t *testing.T, e *Engine, msgs ...string) func(runID string) {
	var once sync.Once
	return func(runID string) {
		once.Do(func() {
			for i, m := range msgs {
				if _, created, err := e.Steer(context.Background(), runID, m, "steer-"+m, "bob"); err != nil || !created {
					t.Errorf("Steer %d: created %v, %v", i, created, err)
				}
			}
		})
	}
}

// Two messages sent while the first model call is out are recorded at once
// and read together, in order, by the second call, with who sent them; the
// first call never sees them. The driver, whose next commit found the run
// moved, takes them in and carries on: nothing is lost or repeated.
func TestSteerReachesTheNextCall(t *testing.T) {
	spy := &modelSpy{}
	e, s := setup(t, Config{Tools: searchTools(t), Models: spy.models(nil)})
	c := testContract(callReply("search", "c1", nil), finalReply("done"))
	var runID string
	var mu sync.Mutex
	send := steerOnce(t, e, "use the EUR ledger", "and skip drafts")
	spy.before = func(context.Context, *model.Request) {
		mu.Lock()
		id := runID
		mu.Unlock()
		if id != "" {
			send(id)
		}
	}
	mu.Lock()
	st := startRun(t, e, c)
	runID = st.RunID
	mu.Unlock()
	waitRun(t, e, st.RunID)
	st, evs := stored(t, s, st.RunID)
	wantStatus(t, st, evs, reinv1.RunStatus_RUN_STATUS_COMPLETED, "final_answer")
	wantCount(t, evs, "run_steered", 2)
	wantCount(t, evs, "model_requested", 2)
	reqs := spy.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model calls, want 2", len(reqs))
	}
	if got := steersIn(reqs[0]); len(got) != 0 {
		t.Errorf("the first call read %q, sent before the messages", got)
	}
	got := steersIn(reqs[1])
	if len(got) != 2 || !strings.Contains(got[0], "from bob at ") || !strings.HasSuffix(got[0], "use the EUR ledger") || !strings.HasSuffix(got[1], "and skip drafts") {
		t.Errorf("the second call read %q, want both messages from bob, in order", got)
	}
	if last := lastObservation(t, reqs[1]); !strings.HasSuffix(last.Text, "and skip drafts") {
		t.Errorf("the messages are not the last the second call reads: %q", last.Text)
	}
	if st.SteersWaiting != 0 || !st.HasSteer("steer-use the EUR ledger") {
		t.Errorf("state: %d waiting, ids %v", st.SteersWaiting, st.Steers)
	}
	checkInputHashes(t, evs)
}

// A message that comes in while a tool runs, after the step built nothing
// yet, finds the driver's next commit (the tool's result with the next
// model_requested) refused as stale: the step builds its context again,
// and the call it records reads the message.
func TestSteerDuringAToolCallRebuildsTheContext(t *testing.T) {
	spy := &modelSpy{}
	ex := searchTools(t)
	e, s := setup(t, Config{Tools: ex, Models: spy.models(nil)})
	var runID string
	var mu sync.Mutex
	send := steerOnce(t, e, "the invoice is in March")
	ex.beforeRead = func(context.Context, tools.Call) {
		mu.Lock()
		defer mu.Unlock()
		send(runID)
	}
	mu.Lock()
	st := startRun(t, e, testContract(callReply("search", "c1", nil), finalReply("done")))
	runID = st.RunID
	mu.Unlock()
	waitRun(t, e, st.RunID)
	st, evs := stored(t, s, st.RunID)
	wantStatus(t, st, evs, reinv1.RunStatus_RUN_STATUS_COMPLETED, "final_answer")
	ex.wantCalls(t, 1, 0, 0)
	reqs := spy.requests()
	if len(reqs) != 2 || len(steersIn(reqs[1])) != 1 {
		t.Fatalf("%d calls; the second read %v, want the message", len(reqs), steersIn(reqs[len(reqs)-1]))
	}
	if got := payloads(evs); !strings.Contains(strings.Join(got, ","), "run_steered,tool_returned,model_requested") {
		t.Errorf("log %v: want the message before the tool's result and the call that reads it", got)
	}
	checkInputHashes(t, evs)
}

// A message is refused, and nothing is stored, when the run is paused
// (the error names the command that answers it) or ended; a second
// message with one request ID records nothing and says so.
func TestSteerRefusedAndIdempotent(t *testing.T) {
	e, s := setup(t, Config{Tools: searchTools(t)})
	ctx := testCtx(t)
	for _, tc := range []struct {
		name string
		c    *reinv1.TaskContract
		want string
	}{
		{"needs_input", testContract(askReply("Which quarter?")), "rein input"},
		{"needs_approval", testContract(callReply("send_email", "c1", nil)), "rein approve"},
		{"completed", testContract(finalReply("done")), "ended"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, _ := runToRest(t, e, s, tc.c)
			_, created, err := e.Steer(ctx, st.RunID, "hello", "r-"+tc.name, "bob")
			if !errors.Is(err, ErrNotWaiting) || !strings.Contains(err.Error(), tc.want) || created {
				t.Errorf("Steer = created %v, %v; want ErrNotWaiting naming %q", created, err, tc.want)
			}
			if after, _ := stored(t, s, st.RunID); after.Version != st.Version {
				t.Errorf("a refused message stored something: version %d → %d", st.Version, after.Version)
			}
		})
	}
	if _, _, err := e.Steer(ctx, "run_missing", "hello", "r-x", "bob"); err == nil {
		t.Error("a message to a run that does not exist was accepted")
	}

	// The same request ID twice, while the run's one model call is out:
	// recorded once.
	gate := make(chan struct{})
	spy := &modelSpy{before: func(ctx context.Context, _ *model.Request) {
		select {
		case <-gate:
		case <-ctx.Done():
		}
	}}
	e2, s2 := setup(t, Config{Tools: searchTools(t), Models: spy.models(nil)})
	st := startRun(t, e2, testContract(finalReply("done")))
	first, created, err := e2.Steer(ctx, st.RunID, "hello", "same", "bob")
	if err != nil || !created {
		t.Fatalf("first Steer: created %v, %v", created, err)
	}
	again, created, err := e2.Steer(ctx, st.RunID, "hello", "same", "bob")
	if err != nil || created || again.Version < first.Version {
		t.Errorf("second Steer with the same request ID: created %v, version %d (first %d), %v", created, again.Version, first.Version, err)
	}
	close(gate)
	waitRun(t, e2, st.RunID)
	_, evs := stored(t, s2, st.RunID)
	wantCount(t, evs, "run_steered", 1)
	if runstate.PayloadName(evs[len(evs)-1]) != "status_changed" {
		t.Errorf("the run did not end after its message: %v", payloads(evs))
	}
}

// A run takes at most MaxSteers messages: the next is refused, and
// nothing is stored.
func TestSteerLimit(t *testing.T) {
	gate := make(chan struct{})
	spy := &modelSpy{before: func(ctx context.Context, _ *model.Request) {
		select {
		case <-gate:
		case <-ctx.Done():
		}
	}}
	e, s := setup(t, Config{Tools: searchTools(t), Models: spy.models(nil)})
	defer close(gate)
	st := startRun(t, e, testContract(finalReply("done")))
	ctx := testCtx(t)
	for i := range MaxSteers {
		if _, _, err := e.Steer(ctx, st.RunID, "hello", fmt.Sprint("r-", i), "bob"); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	before, _ := s.Load(ctx, st.RunID)
	_, created, err := e.Steer(ctx, st.RunID, "one more", "r-last", "bob")
	if !errors.Is(err, ErrNotWaiting) || created || !strings.Contains(err.Error(), "fork") {
		t.Fatalf("message %d: created %v, %v; want ErrNotWaiting saying to fork", MaxSteers+1, created, err)
	}
	if after, _ := s.Load(ctx, st.RunID); after.Version != before.Version {
		t.Errorf("a refused message stored something: version %d → %d", before.Version, after.Version)
	}
}
