package server

// Tests of people in the loop (docs/design.md §2, §7, §10): approvals, rejections,
// input, cancels of paused runs, and the timers of paused runs (proposal
// expiry, the run's deadline), through the generated client against a real
// node on a real bbolt file, with the scripted model and fixture tools.
//
// Every refusal is checked to change no stored byte: the run as GetRun
// shows it and its number of events are the same before and after. Nothing
// sleeps: the tests wait on watch streams, or poll with a deadline.
//
// A test that shows a bug not fixed yet calls knownPeopleBug when the bug
// shows, which skips it unless REIN_KNOWN_BUGS=1.

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/engine"
	"github.com/reinhq/rein/internal/runstate"
)

// TestPausedRunTimers: a paused run's timer ends it on time without any
// call: an expired proposal → expired; the run's deadline while it waits
// for input or approval → budget_exhausted. The twins are the decisions
// and input made in time (TestApproveCommitsThenRunGoesOn,
// TestProvideInputResumes).
func TestPausedRunTimers(t *testing.T) {
	for _, tc := range []struct {
		name     string
		contract *reinv1.TaskContract
		paused   reinv1.RunStatus
		want     string // payloads after the pause
		to       reinv1.RunStatus
		reason   string
	}{
		{"proposal expires", withTTL(writeContract(refundCall(), final("x")), 150*time.Millisecond), stNeedsApproval,
			"status_changed", stExpired, "proposal_expired"},
		{"deadline while waiting for input", withTimeout(contract(nil, ask("which account?"), final("x")), 400*time.Millisecond), stNeedsInput,
			"budget_reached,status_changed", stExhausted, "deadline"},
		{"deadline before the proposal expires", withTTL(withTimeout(writeContract(refundCall(), final("x")), 400*time.Millisecond), time.Hour), stNeedsApproval,
			"budget_reached,status_changed", stExhausted, "deadline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newPeopleServer(t, Config{})
			run := s.begin(t, tc.contract, tc.paused)
			evs := s.watchToEnd(t, run.GetRunId(), run.GetVersion())
			if got := payloadNames(evs); got != tc.want {
				t.Fatalf("after the pause: %s, want %s; log:\n%s", got, tc.want, logText(evs))
			}
			last := evs[len(evs)-1]
			wantChange(t, last, tc.paused, tc.to, tc.reason)
			for _, ev := range evs {
				if ev.GetActor() != "harness" {
					t.Errorf("event %d by %q, want the harness", ev.GetSequence(), ev.GetActor())
				}
			}
			due := run.GetDeadline()
			if tc.to == stExpired {
				due = run.GetPending().GetProposal().GetExpiresAt()
			}
			if last.GetRecordedAt().AsTime().Before(due.AsTime()) {
				t.Errorf("ended at %v, before it was due at %v", last.GetRecordedAt().AsTime(), due.AsTime())
			}
			if tc.to == stExhausted {
				if br := evs[0].GetBudgetReached(); br.GetLimit() != "deadline" {
					t.Errorf("budget_reached %v, want limit deadline", br)
				}
			}
			if n := len(s.models.requests(run.GetRunId())); n != 1 {
				t.Errorf("%d model calls, want only the one before the pause", n)
			}
			if n := len(s.tools.commitCounts()); n != 0 {
				t.Errorf("%d writes committed", n)
			}
		})
	}
}

// TestPausedRunTimersAfterRestart: a node opened with Resume arms the
// timers of the paused runs it finds; the run expires on time without any
// call. Its twin: a node opened without Resume leaves the run as it is, past
// its expiry, until a node that resumes finds it (and expires it at once).
func TestPausedRunTimersAfterRestart(t *testing.T) {
	pause := func(t *testing.T, path string, ttl time.Duration) runstate.State {
		t.Helper()
		node, err := Open(context.Background(), Config{Store: boltAt(t, path), Tools: newWriteTools(t)})
		if err != nil {
			t.Fatal(err)
		}
		defer node.Close()
		st, _, err := node.Engine.Start(context.Background(), engine.StartRequest{
			RequestID: "r", Contract: withTTL(writeContract(refundCall(), final("x")), ttl), Principal: "local", Tenant: "default",
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := node.Engine.Wait(context.Background(), st.RunID); err != nil {
			t.Fatal(err)
		}
		if st, err = node.Store.Load(context.Background(), st.RunID); err != nil || st.Status != stNeedsApproval {
			t.Fatalf("before the restart the run is %v (%v), want needs_approval", st.Status, err)
		}
		return st
	}
	// reopen opens the file again with a model log and write tools that
	// count what the new node calls.
	reopen := func(t *testing.T, path string, resume bool) (*Node, *modelLog, *writeTools) {
		t.Helper()
		w, m := newWriteTools(t), &modelLog{}
		node, err := Open(context.Background(), Config{Store: boltAt(t, path), Tools: w, Models: m.models, Resume: resume})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(node.Close)
		return node, m, w
	}
	// waitEnd waits, on the hub, for the run to end.
	waitEnd := func(t *testing.T, node *Node, runID string) runstate.State {
		t.Helper()
		sub := node.Hub.Subscribe(runID)
		defer sub.Close()
		bound := time.After(10 * time.Second)
		for {
			st, err := node.Store.Load(context.Background(), runID)
			if err != nil {
				t.Fatal(err)
			}
			if runstate.Terminal(st.Status) {
				return st
			}
			select {
			case <-sub.C:
			case <-bound:
				t.Fatalf("run %s is still %v after 10s", runID, st.Status)
			}
		}
	}
	wantExpired := func(t *testing.T, node *Node, paused runstate.State, m *modelLog, w *writeTools) {
		t.Helper()
		got := waitEnd(t, node, paused.RunID)
		evs := watchLog(t, node.Store, paused.RunID)
		if got.Status != stExpired || got.Version != paused.Version+1 {
			t.Fatalf("after the restart the run is %v at version %d, want expired at %d; log:\n%s",
				got.Status, got.Version, paused.Version+1, logText(evs))
		}
		wantChange(t, evs[len(evs)-1], stNeedsApproval, stExpired, "proposal_expired")
		if at, due := evs[len(evs)-1].GetRecordedAt().AsTime(), paused.Pending.GetProposal().GetExpiresAt().AsTime(); at.Before(due) {
			t.Errorf("expired at %v, before the proposal's expiry %v", at, due)
		}
		if n := len(m.requests(paused.RunID)); n != 0 {
			t.Errorf("the restarted node made %d model calls", n)
		}
		if n := len(w.commitCounts()); n != 0 {
			t.Errorf("the restarted node committed %d writes", n)
		}
	}

	t.Run("resume arms the timer", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "rein.db")
		paused := pause(t, path, 500*time.Millisecond)
		node, m, w := reopen(t, path, true)
		if !time.Now().Before(paused.Pending.GetProposal().GetExpiresAt().AsTime()) {
			t.Logf("the proposal expired before the node reopened; the timer fires at once")
		}
		wantExpired(t, node, paused, m, w)
	})
	t.Run("no resume leaves it", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "rein.db")
		paused := pause(t, path, 200*time.Millisecond)
		node, _, _ := reopen(t, path, false)
		// Poll until well past the expiry: the run must not move.
		bound := time.After(time.Until(paused.Pending.GetProposal().GetExpiresAt().AsTime()) + 250*time.Millisecond)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
	poll:
		for {
			st, err := node.Store.Load(context.Background(), paused.RunID)
			if err != nil {
				t.Fatal(err)
			}
			if st.Version != paused.Version {
				t.Fatalf("a node opened without Resume changed the paused run: version %d → %d (%v)", paused.Version, st.Version, st.Status)
			}
			select {
			case <-tick.C:
			case <-bound:
				break poll
			}
		}
		node.Close()
		node, m, w := reopen(t, path, true)
		wantExpired(t, node, paused, m, w)
	})
}

// TestProvideInputResumes: input resumes a needs_input run, which goes on
// to complete; the model's next call sees the input. TestApprovalRefusals
// has the twins (input to a run that does not wait for it).
func TestProvideInputResumes(t *testing.T) {
	s := newPeopleServer(t, Config{})
	run := s.begin(t, contract(nil, ask("which account?"), final("refunded acct 42")), stNeedsInput)
	if q := run.GetPending().GetQuestion(); q.GetText() != "which account?" {
		t.Fatalf("pending question %v, want the model's", q)
	}
	resp, err := s.client.ProvideInput(context.Background(), &reinv1.ProvideInputRequest{RunId: run.GetRunId(), Text: "acct 42"})
	if err != nil {
		t.Fatalf("ProvideInput: %v", err)
	}
	if got := resp.GetRun().GetStatus(); got != stRunning && got != stCompleted {
		t.Fatalf("ProvideInput answered a %v run, want running (or later)", got)
	}
	if resp.GetRun().GetPending() != nil {
		t.Errorf("the resumed run still shows a pending action: %v", resp.GetRun().GetPending())
	}
	evs := s.watchToEnd(t, run.GetRunId(), run.GetVersion())
	const want = "input_provided,status_changed,model_requested,model_returned,status_changed"
	if got := payloadNames(evs); got != want {
		t.Fatalf("after the input: %s, want %s; log:\n%s", got, want, logText(evs))
	}
	if in := evs[0].GetInputProvided(); in.GetText() != "acct 42" || evs[0].GetActor() != "principal:"+LocalPrincipal().ID {
		t.Errorf("input_provided %v by %q, want the text by principal:%s", in, evs[0].GetActor(), LocalPrincipal().ID)
	}
	wantChange(t, evs[1], stNeedsInput, stRunning, "input_provided")
	wantChange(t, evs[len(evs)-1], stRunning, stCompleted, "final_answer")
	if !s.models.sawObservation(run.GetRunId(), "person", "acct 42") {
		t.Errorf("the model's next call was not shown the input: %+v", s.models.requests(run.GetRunId()))
	}

	// Input to the same run again, now completed: refused, nothing changes.
	before := s.mark(t, run.GetRunId())
	_, err = s.client.ProvideInput(context.Background(), &reinv1.ProvideInputRequest{RunId: run.GetRunId(), Text: "acct 43"})
	wantCode(t, err, codes.FailedPrecondition)
	s.unchanged(t, "input to a completed run", before)
}

// TestCancelPausedRun: a run paused for input or approval is cancelled at
// once, and its timer does not fire afterwards: nothing is stored after the
// cancellation, well past the time the timer was due. The twin is
// TestPausedRunTimers, where the timer fires.
func TestCancelPausedRun(t *testing.T) {
	for _, tc := range []struct {
		name     string
		contract *reinv1.TaskContract
		paused   reinv1.RunStatus
	}{
		// Timers long enough that a loaded machine still cancels first;
		// the test waits for them to pass.
		{"needs_input", withTimeout(contract(nil, ask("which account?"), final("x")), 2*time.Second), stNeedsInput},
		{"needs_approval", withTTL(writeContract(refundCall(), final("x")), 2*time.Second), stNeedsApproval},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newPeopleServer(t, Config{})
			run := s.begin(t, tc.contract, tc.paused)
			due := run.GetDeadline()
			if tc.paused == stNeedsApproval {
				due = run.GetPending().GetProposal().GetExpiresAt()
			}
			if due == nil {
				t.Fatal("the paused run has no time to be due")
			}
			resp, err := s.client.CancelRun(context.Background(), &reinv1.CancelRunRequest{RunId: run.GetRunId(), Reason: "not needed"})
			if err != nil && !time.Now().Before(due.AsTime()) {
				t.Skipf("the run's timer was due (%v) before the cancel reached it: %v; the machine is too slow for this test", due.AsTime(), err)
			}
			if err != nil {
				t.Fatalf("CancelRun: %v", err)
			}
			if resp.GetRun().GetStatus() != stCancelled || resp.GetRun().GetPending() != nil {
				t.Fatalf("CancelRun answered a %v run with pending %v, want cancelled with nothing pending", resp.GetRun().GetStatus(), resp.GetRun().GetPending())
			}
			if !time.Now().Before(due.AsTime()) {
				t.Skipf("the run was cancelled after its timer was due (%v); the machine is too slow for this test", due.AsTime())
			}
			evs := s.watchToEnd(t, run.GetRunId(), run.GetVersion())
			if got := payloadNames(evs); got != "status_changed" {
				t.Fatalf("after the cancel: %s, want status_changed; log:\n%s", got, logText(evs))
			}
			wantChange(t, evs[0], tc.paused, stCancelled, "not needed")
			cancelled := s.mark(t, run.GetRunId())

			// Poll until well past the time the timer was due.
			bound := time.After(time.Until(due.AsTime()) + 250*time.Millisecond)
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for {
				st, err := s.node.Store.Load(context.Background(), run.GetRunId())
				if err != nil {
					t.Fatal(err)
				}
				if st.Version != cancelled.run.GetVersion() {
					t.Fatalf("the cancelled run moved to version %d; log:\n%s", st.Version, logText(s.events(t, run.GetRunId())))
				}
				select {
				case <-tick.C:
					continue
				case <-bound:
				}
				break
			}
			s.unchanged(t, "the paused run's timer", cancelled)
			if n := len(s.models.requests(run.GetRunId())); n != 1 {
				t.Errorf("%d model calls, want only the one before the pause", n)
			}
			if n := len(s.tools.commitCounts()); n != 0 {
				t.Errorf("%d writes committed", n)
			}
		})
	}
}
