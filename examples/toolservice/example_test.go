package main

// The example's own files drive a run: task.json and model.jsonl, through
// a real engine.Engine (in-memory store), over real gRPC to this service
// on a loopback port, on its own bbolt file.

import (
	"bufio"
	"bytes"
	"net"
	"os"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/engine"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store/mem"
	"github.com/reinhq/rein/internal/taskcontract"
	"github.com/reinhq/rein/internal/tools/remote"
)

// exampleContract is task.json with model.jsonl as its scripted model, read
// as `rein run task.json --model script:model.jsonl` reads them.
func exampleContract(t *testing.T) *reinv1.TaskContract {
	t.Helper()
	data, err := os.ReadFile("task.json")
	if err != nil {
		t.Fatal(err)
	}
	c := &reinv1.TaskContract{}
	if err := protojson.Unmarshal(data, c); err != nil {
		t.Fatalf("task.json: %v", err)
	}
	script, err := os.ReadFile("model.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	spec := &reinv1.ModelSpec{Provider: "script", Name: "script"}
	sc := bufio.NewScanner(bytes.NewReader(script))
	for line := 1; sc.Scan(); line++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		r := &reinv1.ScriptedReply{}
		if err := protojson.Unmarshal(sc.Bytes(), r); err != nil {
			t.Fatalf("model.jsonl:%d: %v", line, err)
		}
		spec.Script = append(spec.Script, r)
	}
	c.Model = spec
	if err := taskcontract.Validate(c); err != nil {
		t.Fatalf("the example's contract: %v", err)
	}
	return c
}

// TestExampleRun: the walkthrough of README.md, in-process: the run reads
// INV-1001, proposes a refund of 40.00 EUR and waits with nothing written;
// approved, the refund is committed once and the run completes. The twin:
// rejected, nothing is written and the run still completes (the model is
// told, and answers).
func TestExampleRun(t *testing.T) {
	for _, approve := range []bool{true, false} {
		name := map[bool]string{true: "approved", false: "rejected"}[approve]
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t)
			b, _ := openBilling(t)
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			gs := grpc.NewServer()
			reinv1.RegisterToolServiceServer(gs, remote.NewServer(b))
			served := make(chan struct{})
			go func() {
				defer close(served)
				_ = gs.Serve(lis)
			}()
			t.Cleanup(func() {
				gs.Stop()
				<-served
			})
			client, err := remote.Dial("billing", lis.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = client.Close() })
			st := mem.New()
			e := engine.New(engine.Config{Store: st, Tools: client})
			t.Cleanup(e.Close)

			run, _, err := e.Start(ctx, engine.StartRequest{RequestID: "req-1", Contract: exampleContract(t), Principal: "alice", Tenant: "billing"})
			if err != nil {
				t.Fatalf("Start: %v", err)
			}
			if err := e.Wait(ctx, run.RunID); err != nil {
				t.Fatal(err)
			}
			paused, err := st.Load(ctx, run.RunID)
			if err != nil {
				t.Fatal(err)
			}
			p := paused.Pending.GetProposal()
			if paused.Status != reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL || p.GetTool() != toolRefund {
				t.Fatalf("the run is %s with pending %v, want needs_approval on refunds.create", runstate.StatusName(paused.Status), paused.Pending)
			}
			if got := field(p.GetPreview(), "amount") + " " + field(p.GetPreview(), "currency") + ", " + field(p.GetPreview(), "refundable_after") + " after"; got != "40.00 EUR, 80.00 after" {
				t.Errorf("the preview says %s, want 40.00 EUR, 80.00 after", got)
			}
			if n := refundsIn(t, b); n != 0 {
				t.Fatalf("%d refunds stored before the approval, want none", n)
			}

			if _, err := e.DecideApproval(ctx, engine.Verdict{RunID: run.RunID, ProposalID: p.GetProposalId(), ProposalHash: p.GetHash(),
				Approve: approve, Reason: "checked", Principal: "bob"}); err != nil {
				t.Fatalf("DecideApproval: %v", err)
			}
			if err := e.Wait(ctx, run.RunID); err != nil {
				t.Fatal(err)
			}
			end, err := st.Load(ctx, run.RunID)
			if err != nil {
				t.Fatal(err)
			}
			if end.Status != reinv1.RunStatus_RUN_STATUS_COMPLETED {
				t.Errorf("the run ended %s, want completed", runstate.StatusName(end.Status))
			}
			evs, err := st.Events(ctx, run.RunID, 0, 1000)
			if err != nil {
				t.Fatal(err)
			}
			var committed []string
			for _, ev := range evs {
				if tr := ev.GetToolReturned(); tr != nil && tr.GetError() != "" {
					t.Errorf("%s returned an error: %s", tr.GetTool(), tr.GetError())
				}
				if wc := ev.GetWriteCommitted(); wc != nil {
					committed = append(committed, field(wc.GetReceipt(), "refund_id"))
				}
			}
			want, refunds := "re_1", 1
			if !approve {
				want, refunds = "", 0
			}
			if got := strings.Join(committed, ","); got != want {
				t.Errorf("write_committed receipts %q, want %q", got, want)
			}
			if n := refundsIn(t, b); n != refunds {
				t.Errorf("%d refunds stored, want %d", n, refunds)
			}
		})
	}
}
