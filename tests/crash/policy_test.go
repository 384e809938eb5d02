package crash_test

import (
	"context"
	"testing"
	"time"

	"github.com/reinhq/rein/client"
	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/failpoint"
)

// TestPolicyApprovedWriteCrash: a write a policy rule approves is
// recovered after a crash exactly as a person-approved one is. The server
// crashes once the policy's approval and the dispatch are durable, before
// the write is sent (WriteAfterDispatch) or after the tool applied it and
// before its receipt is stored (WriteAfterCommit); the restarted server
// settles the write by its lookup, and the write is applied exactly once.
// The failure twin of each is the ledger: a second send shows as a second
// line.
func TestPolicyApprovedWriteCrash(t *testing.T) {
	for _, tc := range []struct {
		point  string
		ledger int // lines the crash left
		// actors are those of the write_dispatched events: a write the
		// lookup found not applied is dispatched again.
		actors []string
	}{
		{failpoint.WriteAfterDispatch, 0, []string{"harness", "harness"}},
		{failpoint.WriteAfterCommit, 1, []string{"harness"}},
	} {
		t.Run(tc.point, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			in := newInstance(t)
			c := contract(0)
			c.Tools[1].Rules = []*reinv1.PolicyRule{{Name: "records-ok", Effect: reinv1.PolicyEffect_POLICY_EFFECT_ALLOW, When: `args.record.startsWith("R-")`}}

			// 1. The server is armed from its start: the first write it
			// dispatches is the policy-approved one.
			srv := in.start(t, "REIN_FAILPOINTS="+tc.point)
			in.waitServing(t, srv)
			cl := in.dial(t, client.Backoff{})
			started, err := cl.Runs.StartRun(ctx, &reinv1.StartRunRequest{RequestId: "policy-" + tc.point, Contract: c})
			if err != nil {
				t.Fatalf("StartRun: %v", err)
			}
			runID := started.GetRun().GetRunId()
			if code := srv.wait(t, 20*time.Second); code != failpoint.CrashCode {
				t.Fatalf("rein serve armed with %s exited %d, want %d", tc.point, code, failpoint.CrashCode)
			}
			stored := storedEvents(t, in.db, runID)
			l := runLog{events: stored}
			if l.count("approval_decided") != 1 || l.count("write_dispatched") != 1 || l.count("write_committed") != 0 {
				t.Fatalf("the crash left:\n%s\nwant the policy's approval and one dispatch, no receipt", eventsText(stored))
			}
			if d := l.find("approval_decided"); d[0].GetActor() != "policy:records-ok" {
				t.Fatalf("approval_decided by %q, want policy:records-ok", d[0].GetActor())
			}
			wantLedgerLines(t, readLedger(t, in.ledger), tc.ledger)

			// 2. Restart without the failpoint: the write is settled, and
			// the run goes on to its question.
			srv = in.start(t)
			in.waitServing(t, srv)
			waitStatus(t, ctx, cl, runID, stNeedsInput)
			if _, err := cl.Runs.ProvideInput(ctx, &reinv1.ProvideInputRequest{RunId: runID, Text: "yes"}); err != nil {
				t.Fatalf("ProvideInput: %v", err)
			}
			waitStatus(t, ctx, cl, runID, stCompleted)
			done, err := fetchLog(ctx, cl, runID)
			if err != nil {
				t.Fatal(err)
			}
			in.stop(t, srv)
			checkBolt(t, in.db)
			if msg := done.gapFree(); msg != "" {
				t.Fatalf("%s\n%v", msg, done)
			}
			led := readLedger(t, in.ledger)
			for _, problem := range writeProblems([]runLog{done}, led) {
				t.Error(problem)
			}
			if n := len(led.lines); n != 1 {
				t.Errorf("the ledger has %d lines, want the write applied once", n)
			}
			if n := done.count("write_committed"); n != 1 {
				t.Errorf("%d write_committed events, want 1\n%v", n, done)
			}
			wantActors(t, done, "write_dispatched", tc.actors...)
		})
	}
}
