package crash_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/reinhq/rein/client"
	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/failpoint"
)

// TestFailpoints crashes one run at each failpoint, at the approval of its
// write, in three generations of the server:
//
//  1. no failpoint: the run starts and pauses for approval at version V;
//     the server stops cleanly;
//  2. REIN_FAILPOINTS=POINT: the approval is the first thing this process
//     commits or dispatches, so the point fires on it and the process
//     exits 77; the approval is never acknowledged. The test reads what
//     the crash left in the bbolt file and the ledger;
//  3. no failpoint: the run is carried to its end (approved again if it
//     still waits, its question answered), and the server stops cleanly.
//
// Each case checks what the crash left and the completed log: the write
// was applied exactly once, and the log is gap-free.
func TestFailpoints(t *testing.T) {
	cases := []struct {
		point string
		// crashed checks the log the crash left on disk (V events before
		// the approval) and the ledger.
		crashed func(t *testing.T, stored []*reinv1.Event, v uint64, led ledger)
		// ended checks the completed log against the one at the crash.
		ended func(t *testing.T, l runLog, stored []*reinv1.Event, v uint64)
	}{{
		point: failpoint.StoreBeforeCommit,
		crashed: func(t *testing.T, stored []*reinv1.Event, v uint64, led ledger) {
			// The approval's batch never reached the file.
			wantStored(t, stored, v)
			wantLedgerLines(t, led, 0)
		},
		ended: func(t *testing.T, l runLog, stored []*reinv1.Event, v uint64) {
			// The unacknowledged approval is simply absent: the one in the
			// log is the approval made after the restart, dispatched once.
			wantPayloads(t, l, v+1, "approval_decided", "write_dispatched", "write_committed", "status_changed")
			wantActors(t, l, "write_dispatched", "principal:driver")
		},
	}, {
		point: failpoint.StoreAfterCommit,
		crashed: func(t *testing.T, stored []*reinv1.Event, v uint64, led ledger) {
			// The approval's batch is durable though never acknowledged;
			// the write was not sent.
			wantStored(t, stored, v, "approval_decided", "write_dispatched")
			wantLedgerLines(t, led, 0)
		},
		ended: func(t *testing.T, l runLog, stored []*reinv1.Event, v uint64) {
			// The committed events are there exactly once, as the crash
			// left them; at start the lookup found the write not applied,
			// so it was dispatched again with the same key, and committed.
			wantKept(t, l, stored, v)
			wantPayloads(t, l, v+1, "approval_decided", "write_dispatched", "write_dispatched", "write_committed", "status_changed")
			wantActors(t, l, "write_dispatched", "principal:driver", "harness")
		},
	}, {
		point: failpoint.WriteAfterDispatch,
		crashed: func(t *testing.T, stored []*reinv1.Event, v uint64, led ledger) {
			// write_dispatched is durable; the write was not sent.
			wantStored(t, stored, v, "approval_decided", "write_dispatched")
			wantLedgerLines(t, led, 0)
		},
		ended: func(t *testing.T, l runLog, stored []*reinv1.Event, v uint64) {
			// The write was sent after the restart, once the lookup said it
			// was not applied.
			wantKept(t, l, stored, v)
			wantPayloads(t, l, v+1, "approval_decided", "write_dispatched", "write_dispatched", "write_committed", "status_changed")
			wantActors(t, l, "write_dispatched", "principal:driver", "harness")
		},
	}, {
		point: failpoint.WriteAfterCommit,
		crashed: func(t *testing.T, stored []*reinv1.Event, v uint64, led ledger) {
			// The tool applied the write; its receipt is not in the log.
			wantStored(t, stored, v, "approval_decided", "write_dispatched")
			wantLedgerLines(t, led, 1)
		},
		ended: func(t *testing.T, l runLog, stored []*reinv1.Event, v uint64) {
			// At start the lookup found the write applied: its receipt was
			// recorded with no second dispatch.
			wantKept(t, l, stored, v)
			wantPayloads(t, l, v+1, "approval_decided", "write_dispatched", "write_committed", "status_changed")
			wantActors(t, l, "write_dispatched", "principal:driver")
		},
	}}
	for _, tc := range cases {
		t.Run(tc.point, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			in := newInstance(t)

			// 1. Start the run and let it pause for approval.
			srv := in.start(t)
			in.waitServing(t, srv)
			cl := in.dial(t, client.Backoff{})
			started, err := cl.Runs.StartRun(ctx, &reinv1.StartRunRequest{RequestId: "fp-" + tc.point, Contract: contract(0)})
			if err != nil {
				t.Fatalf("StartRun: %v", err)
			}
			runID := started.GetRun().GetRunId()
			paused := waitStatus(t, ctx, cl, runID, stNeedsApproval)
			v := paused.GetVersion()
			before, err := fetchLog(ctx, cl, runID)
			if err != nil {
				t.Fatal(err)
			}
			in.stop(t, srv)

			// 2. Approve on a server armed with the failpoint.
			srv = in.start(t, "REIN_FAILPOINTS="+tc.point)
			in.waitServing(t, srv)
			p := paused.GetPending().GetProposal()
			resp, err := cl.Runs.DecideApproval(ctx, &reinv1.DecideApprovalRequest{
				RunId: runID, ProposalId: p.GetProposalId(), ProposalHash: p.GetHash(), Verdict: approve, Reason: "crash test",
			})
			if err == nil {
				t.Fatalf("DecideApproval on a server armed with %s was acknowledged (version %d); want the process to crash first", tc.point, resp.GetRun().GetVersion())
			}
			if code := srv.wait(t, 20*time.Second); code != failpoint.CrashCode {
				t.Fatalf("rein serve armed with %s exited %d, want %d", tc.point, code, failpoint.CrashCode)
			}
			if got := in.log.grep(fmt.Sprintf("g%d| ", srv.gen), "failpoint "+tc.point+": crashing"); len(got) != 1 {
				t.Fatalf("rein serve exited %d but did not say it crashed at %s", failpoint.CrashCode, tc.point)
			}
			stored := storedEvents(t, in.db, runID)
			if !proto.Equal(&reinv1.ListEventsResponse{Events: stored[:min(len(stored), int(v))]}, &reinv1.ListEventsResponse{Events: before.events}) {
				t.Fatalf("the crash changed the log before the approval:\nbefore:\n%s\nafter the crash:\n%s", eventsText(before.events), eventsText(stored))
			}
			tc.crashed(t, stored, v, readLedger(t, in.ledger))
			if t.Failed() {
				t.Fatalf("the log the crash left:\n%s", eventsText(stored))
			}

			// 3. Restart without the failpoint and carry the run to its end.
			srv = in.start(t)
			in.waitServing(t, srv)
			run := get(t, ctx, cl, runID)
			if tc.point == failpoint.StoreBeforeCommit {
				if run.GetVersion() != v || run.GetStatus() != stNeedsApproval || run.GetPending().GetProposal().GetHash() != p.GetHash() {
					t.Fatalf("after a crash before the approval's commit the run is %s at version %d, want %s at %d with proposal %s still pending",
						run.GetStatus(), run.GetVersion(), stNeedsApproval, v, p.GetProposalId())
				}
				if _, err := cl.Runs.DecideApproval(ctx, &reinv1.DecideApprovalRequest{
					RunId: runID, ProposalId: p.GetProposalId(), ProposalHash: p.GetHash(), Verdict: approve, Reason: "crash test, again",
				}); err != nil {
					t.Fatalf("approve again after the restart: %v", err)
				}
			} else if run.GetVersion() <= v+2 || run.GetStatus() == stNeedsApproval {
				t.Fatalf("after a crash at %s the restarted server did not settle the dispatched write before serving: the run is %s at version %d",
					tc.point, run.GetStatus(), run.GetVersion())
			}
			waitStatus(t, ctx, cl, runID, stNeedsInput)
			if _, err := cl.Runs.ProvideInput(ctx, &reinv1.ProvideInputRequest{RunId: runID, Text: "yes"}); err != nil {
				t.Fatalf("ProvideInput: %v", err)
			}
			waitStatus(t, ctx, cl, runID, stCompleted)
			l, err := fetchLog(ctx, cl, runID)
			if err != nil {
				t.Fatal(err)
			}
			in.stop(t, srv)
			checkBolt(t, in.db)

			// The completed log and the ledger.
			if msg := l.gapFree(); msg != "" {
				t.Fatalf("%s\n%v", msg, l)
			}
			if !proto.Equal(&reinv1.ListEventsResponse{Events: l.events[:v]}, &reinv1.ListEventsResponse{Events: before.events}) {
				t.Errorf("the log before the approval changed:\nbefore:\n%s\nnow:\n%v", eventsText(before.events), l)
			}
			led := readLedger(t, in.ledger)
			for _, problem := range writeProblems([]runLog{l}, led) {
				t.Error(problem)
			}
			if wc := l.find("write_committed"); len(wc) != 1 {
				t.Errorf("%d write_committed events, want 1", len(wc))
			} else if op := wc[0].GetWriteCommitted().GetOperationId(); len(led.lines) != 1 || led.lines[0] != op+"\t"+writeTool+"\tapplied" {
				t.Errorf("ledger %q, want the one line %q", led.lines, op+"\t"+writeTool+"\tapplied")
			}
			if dropped := droppedCalls(l); len(dropped) > 0 {
				t.Errorf("tool calls without an outcome: %s", strings.Join(dropped, "; "))
			}
			for _, payload := range []string{"approval_requested", "approval_decided", "input_provided"} {
				if n := l.count(payload); n != 1 {
					t.Errorf("%d %s events, want 1", n, payload)
				}
			}
			tc.ended(t, l, stored, v)
			if t.Failed() {
				t.Logf("the log the crash left:\n%s\nthe completed log:\n%v\nledger: %q", eventsText(stored), l, led.lines)
			}
		})
	}
}

// get reads a run.
func get(t *testing.T, ctx context.Context, cl *client.Client, runID string) *reinv1.Run {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	got, err := cl.Runs.GetRun(cctx, &reinv1.GetRunRequest{RunId: runID})
	if err != nil {
		t.Fatalf("GetRun %s: %v", runID, err)
	}
	return got.GetRun()
}

// waitStatus polls the run until it has the status, for up to 20 seconds.
func waitStatus(t *testing.T, ctx context.Context, cl *client.Client, runID string, want reinv1.RunStatus) *reinv1.Run {
	t.Helper()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		run := get(t, ctx, cl, runID)
		if run.GetStatus() == want {
			return run
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("run %s is %s at version %d after 20s, want %s", runID, run.GetStatus(), run.GetVersion(), want)
		}
	}
}

// wantStored checks that the log on disk holds the v events before the
// approval and then exactly the payloads.
func wantStored(t *testing.T, stored []*reinv1.Event, v uint64, payloads ...string) {
	t.Helper()
	if uint64(len(stored)) != v+uint64(len(payloads)) {
		t.Errorf("the crash left %d events, want the %d before the approval and then %q", len(stored), v, payloads)
		return
	}
	for i, want := range payloads {
		if got := payloadName(stored[int(v)+i]); got != want {
			t.Errorf("the crash left %s at sequence %d, want %s", got, int(v)+i+1, want)
		}
	}
}

// wantLedgerLines checks how many commits the tool took before the crash.
func wantLedgerLines(t *testing.T, led ledger, n int) {
	t.Helper()
	if len(led.lines) != n {
		t.Errorf("the ledger at the crash holds %d lines, want %d: %q", len(led.lines), n, led.lines)
	}
	for _, line := range led.lines {
		if !strings.HasSuffix(line, "\tapplied") {
			t.Errorf("ledger line %q at the crash, want an applied write", line)
		}
	}
}

// wantKept checks that the events the crash left after the approval's
// version are in the completed log exactly as they were stored, once.
func wantKept(t *testing.T, l runLog, stored []*reinv1.Event, v uint64) {
	t.Helper()
	for _, ev := range stored[v:] {
		s := ev.GetSequence()
		if s > uint64(len(l.events)) || !proto.Equal(ev, l.events[s-1]) {
			t.Errorf("the event the crash left at sequence %d (%s) is not in the completed log as it was stored", s, payloadName(ev))
		}
	}
}

// wantPayloads checks the payloads of the log from sequence from on.
func wantPayloads(t *testing.T, l runLog, from uint64, payloads ...string) {
	t.Helper()
	for i, want := range payloads {
		s := from + uint64(i)
		if s > uint64(len(l.events)) {
			t.Errorf("the log ends at %d, want %s at sequence %d", len(l.events), want, s)
			return
		}
		if got := payloadName(l.events[s-1]); got != want {
			t.Errorf("sequence %d is %s, want %s (the approval's events from %d: %q)", s, got, want, from, payloads)
		}
	}
}

// wantActors checks the actors of the log's events with the payload, in
// order.
func wantActors(t *testing.T, l runLog, payload string, actors ...string) {
	t.Helper()
	var got []string
	for _, ev := range l.find(payload) {
		got = append(got, ev.GetActor())
	}
	if strings.Join(got, ",") != strings.Join(actors, ",") {
		t.Errorf("%s events by %q, want %q", payload, got, actors)
	}
}
