package main

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/server"
)

// fault is what a faultyServer does to the first call of a method.
type fault int

const (
	// lost applies the call and then answers Unavailable, as a connection
	// that broke after the server committed and before the answer arrived.
	lost fault = iota
	// unsent answers Unavailable without applying the call.
	unsent
	// overtaken applies an approval in place of the call (another person
	// deciding first, the other way), then answers Unavailable.
	overtaken
)

// faultyServer serves the store at db, with the refund example's fixture
// tools, on loopback TCP; the first call of method meets f.
func faultyServer(t *testing.T, db, method string, f fault) string {
	t.Helper()
	h := hostFlags{tools: "fixture:" + example("refund", "tools.json")}
	s, err := h.open(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	st, err := openStore(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	inject := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		first := false
		if info.FullMethod == method {
			once.Do(func() { first = true })
		}
		if !first {
			return next(ctx, req)
		}
		switch f {
		case lost:
			if _, err := next(ctx, req); err != nil {
				return nil, err
			}
		case overtaken:
			d := req.(*reinv1.DecideApprovalRequest)
			if _, err := next(ctx, &reinv1.DecideApprovalRequest{RunId: d.GetRunId(), ProposalId: d.GetProposalId(), ProposalHash: d.GetProposalHash(),
				Verdict: reinv1.ApprovalVerdict_APPROVAL_VERDICT_APPROVE, Reason: "someone else"}); err != nil {
				return nil, err
			}
		}
		return nil, status.Error(codes.Unavailable, "connection lost (test)")
	}
	node, err := server.Open(context.Background(), server.Config{Store: st, Models: models, Tools: s.executor, Resume: true,
		ServerOptions: []grpc.ServerOption{grpc.ChainUnaryInterceptor(inject)}})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = node.GRPC.Serve(lis) }()
	t.Cleanup(func() { node.Close(); <-served; s.close() })
	return lis.Addr().String()
}

// count is how many events of the run have the type.
func count(evs []map[string]any, typ string) int {
	n := 0
	for _, ev := range evs {
		if ev["type"] == typ {
			n++
		}
	}
	return n
}

// TestRetriedDecisionIsNotAnError: approve, deny, input and cancel against a
// --server whose first answer is lost after the server applied it are tried
// again, and the retry, refused because the run no longer waits, is known
// for the same call and taken as the success it was: the run carries on,
// the call is in the log once. Today the first such answer exited 5, and a
// retry alone would exit 1. The twins: a first try that never reached the
// server is applied by the retry, once; and a different decision recorded
// meanwhile (an approval, when this was a deny) is not taken for this one.
func TestRetriedDecisionIsNotAnError(t *testing.T) {
	refund := func(t *testing.T, addr string) (runID, proposalID string) {
		t.Helper()
		out := decodeOne(t, cli(t, "run", example("refund", "task.json"), "--model", "script:"+example("refund", "model.jsonl"),
			"--server", addr, "--json").mustExit(t, exitPaused).stdout)
		prop := obj(t, obj(t, out["pending"], "pending")["proposal"], "pending.proposal")
		return out["run_id"].(string), prop["proposal_id"].(string)
	}
	const approve, input, cancel = "/rein.v1.RunService/DecideApproval", "/rein.v1.RunService/ProvideInput", "/rein.v1.RunService/CancelRun"
	cases := []struct {
		name   string
		method string
		f      fault
		args   func(t *testing.T, addr string) (runID string, args []string)
		exit   int
		status string
		once   string // the event type the call records, once
	}{
		{"approve, answer lost", approve, lost, func(t *testing.T, addr string) (string, []string) {
			id, prop := refund(t, addr)
			return id, []string{"approve", id, prop, "--reason", "ok"}
		}, exitOK, "completed", "approval_decided"},
		{"deny, answer lost", approve, lost, func(t *testing.T, addr string) (string, []string) {
			id, prop := refund(t, addr)
			return id, []string{"deny", id, prop, "--end", "--reason", "no"}
		}, exitRefused, "denied", "approval_decided"},
		{"approve, never sent", approve, unsent, func(t *testing.T, addr string) (string, []string) {
			id, prop := refund(t, addr)
			return id, []string{"approve", id, prop}
		}, exitOK, "completed", "approval_decided"},
		{"input, answer lost", input, lost, func(t *testing.T, addr string) (string, []string) {
			ask := writeFile(t, "ask.jsonl", `{"decision": {"ask_human": {"question": "Which invoice?"}}}`+"\n"+`{"decision": {"final_answer": {"text": "thanks"}}}`+"\n")
			out := decodeOne(t, cli(t, "run", writeFile(t, "task.json", lookupTask), "--model", "script:"+ask, "--server", addr, "--json").mustExit(t, exitPaused).stdout)
			id := out["run_id"].(string)
			return id, []string{"input", id, "INV-42"}
		}, exitOK, "completed", "input_provided"},
		{"cancel, answer lost", cancel, lost, func(t *testing.T, addr string) (string, []string) {
			id, _ := refund(t, addr)
			return id, []string{"cancel", id, "--reason", "no longer needed"}
		}, exitOK, "cancelled", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			addr := faultyServer(t, newDB(t), tc.method, tc.f)
			runID, args := tc.args(t, addr)
			r := cli(t, append(args, "--server", addr, "--json")...).mustExit(t, tc.exit)
			if got := decodeOne(t, r.stdout); got["status"] != tc.status {
				t.Fatalf("%s: status %v, want %s\n%s", tc.name, got["status"], tc.status, r.stderr)
			}
			evs := events(t, "", runID, "--server", addr)
			if tc.once != "" && count(evs, tc.once) != 1 {
				t.Fatalf("%s: %d %s events, want 1", tc.name, count(evs, tc.once), tc.once)
			}
			if n := count(evs, "write_committed"); n > 1 {
				t.Fatalf("%s: %d write_committed, want at most 1", tc.name, n)
			}
			if tc.f == lost {
				mustContain(t, tc.name+" stderr", r.stderr, "unavailable; trying again")
			}
		})
	}

	t.Run("deny, an approval recorded meanwhile", func(t *testing.T) {
		addr := faultyServer(t, newDB(t), approve, overtaken)
		runID, prop := refund(t, addr)
		r := cli(t, "deny", runID, prop, "--end", "--server", addr)
		if r.code == exitOK || r.code == exitRefused {
			t.Fatalf("deny after someone else approved: exit %d, want a refusal\n%s", r.code, r.stderr)
		}
		evs := events(t, "", runID, "--server", addr)
		if n := count(evs, "approval_decided"); n != 1 {
			t.Fatalf("%d approval_decided, want the one approval", n)
		}
		if strings.Contains(r.stderr, "had recorded this") {
			t.Fatalf("the deny was taken for the approval:\n%s", r.stderr)
		}
	})
}
