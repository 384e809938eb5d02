package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/tools"
)

// testServer is a real node on a real bbolt file, reached through the
// generated client over bufconn.
type testServer struct {
	node   *Node
	client reinv1.RunServiceClient
}

func newTestServer(t *testing.T, executor tools.Executor) *testServer {
	t.Helper()
	node, err := Open(context.Background(), Config{Store: tempBolt(t), Tools: executor})
	if err != nil {
		t.Fatal(err)
	}
	lis := bufconn.Listen(1 << 20)
	go func() { _ = node.GRPC.Serve(lis) }()
	cc, err := grpc.NewClient("passthrough:///test",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cc.Close()
		node.Close()
	})
	return &testServer{node: node, client: reinv1.NewRunServiceClient(cc)}
}

func decision(d *reinv1.Decision) *reinv1.ScriptedReply {
	return &reinv1.ScriptedReply{Reply: &reinv1.ScriptedReply_Decision{Decision: d}, Usage: &reinv1.Usage{InputTokens: 10, OutputTokens: 5}}
}

func readCall(tool string) *reinv1.ScriptedReply {
	return decision(&reinv1.Decision{Action: &reinv1.Decision_ToolCall{ToolCall: &reinv1.ToolCall{Tool: tool, CallId: "c"}}})
}

func final(text string) *reinv1.ScriptedReply {
	return decision(&reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: text}}})
}

func ask(q string) *reinv1.ScriptedReply {
	return decision(&reinv1.Decision{Action: &reinv1.Decision_AskHuman{AskHuman: &reinv1.AskHuman{Question: q}}})
}

func contract(labels map[string]string, replies ...*reinv1.ScriptedReply) *reinv1.TaskContract {
	return &reinv1.TaskContract{
		Goal:   "test",
		Tools:  []*reinv1.ToolGrant{{Name: "lookup", Tier: reinv1.ToolTier_TOOL_TIER_READ}},
		Model:  &reinv1.ModelSpec{Provider: "script", Script: replies},
		Labels: labels,
	}
}

func fixtures() tools.Executor {
	return tools.NewFixtures(map[string][]tools.FixtureResult{"lookup": {{Output: structpb.NewStringValue("found")}}})
}

// start starts a run and watches it to its first pause or end.
func (s *testServer) start(t *testing.T, requestID string, c *reinv1.TaskContract) *reinv1.Run {
	t.Helper()
	ctx := context.Background()
	resp, err := s.client.StartRun(ctx, &reinv1.StartRunRequest{RequestId: requestID, Contract: c})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := s.client.WatchRun(ctx, &reinv1.WatchRunRequest{RunId: resp.GetRun().GetRunId()})
	if err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatalf("watch ended before the run paused or ended: %v", err)
		}
		if sc := ev.GetEvent().GetStatusChanged(); sc != nil && sc.GetTo() != reinv1.RunStatus_RUN_STATUS_RUNNING {
			break
		}
	}
	got, err := s.client.GetRun(ctx, &reinv1.GetRunRequest{RunId: resp.GetRun().GetRunId()})
	if err != nil {
		t.Fatal(err)
	}
	return got.GetRun()
}

func wantCode(t *testing.T, err error, code codes.Code) *status.Status {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != code {
		t.Fatalf("got %v, want code %v", err, code)
	}
	return st
}

func TestStartRunIdempotent(t *testing.T) {
	s := newTestServer(t, fixtures())
	run := s.start(t, "req-1", contract(nil, readCall("lookup"), final("done")))
	if run.GetStatus() != reinv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Fatalf("status %v, want completed", run.GetStatus())
	}
	again, err := s.client.StartRun(context.Background(), &reinv1.StartRunRequest{RequestId: "req-1", Contract: contract(nil, final("other"))})
	if err != nil {
		t.Fatal(err)
	}
	if again.GetCreated() || again.GetRun().GetRunId() != run.GetRunId() {
		t.Fatalf("second StartRun: created=%v run %s, want the first run %s", again.GetCreated(), again.GetRun().GetRunId(), run.GetRunId())
	}
	list, err := s.client.ListRuns(context.Background(), &reinv1.ListRunsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.GetRuns()) != 1 {
		t.Fatalf("%d runs stored, want 1", len(list.GetRuns()))
	}
}

func TestStartRunInvalidArgument(t *testing.T) {
	s := newTestServer(t, fixtures())
	untiered := contract(nil, final("x"))
	untiered.Tools[0].Tier = reinv1.ToolTier_TOOL_TIER_UNSPECIFIED
	unknownModel := contract(nil)
	unknownModel.Model.Provider = "oracle"
	badSchema := contract(nil, final("x"))
	badSchema.Tools[0].InputSchema, _ = structpb.NewStruct(map[string]any{"type": "object", "properties": map[string]any{"q": map[string]any{"pattern": "("}}})
	cases := []struct {
		name  string
		req   *reinv1.StartRunRequest
		field string
	}{
		{"no request id", &reinv1.StartRunRequest{Contract: contract(nil, final("x"))}, "request_id"},
		{"no contract", &reinv1.StartRunRequest{RequestId: "r"}, "contract"},
		{"tier missing", &reinv1.StartRunRequest{RequestId: "r", Contract: untiered}, "contract.tools[0].tier"},
		{"unknown model", &reinv1.StartRunRequest{RequestId: "r", Contract: unknownModel}, "contract.model.provider"},
		{"input schema does not compile", &reinv1.StartRunRequest{RequestId: "r", Contract: badSchema}, "contract.tools[0].input_schema"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.client.StartRun(context.Background(), tc.req)
			st := wantCode(t, err, codes.InvalidArgument)
			var br *errdetails.BadRequest
			for _, d := range st.Details() {
				if b, ok := d.(*errdetails.BadRequest); ok {
					br = b
				}
			}
			if br == nil || len(br.GetFieldViolations()) != 1 || br.GetFieldViolations()[0].GetField() != tc.field {
				t.Fatalf("details %v, want a BadRequest naming %s", st.Details(), tc.field)
			}
		})
	}
	list, err := s.client.ListRuns(context.Background(), &reinv1.ListRunsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.GetRuns()) != 0 {
		t.Fatalf("refused requests stored %d runs", len(list.GetRuns()))
	}
}

func TestGetRunNotFound(t *testing.T) {
	s := newTestServer(t, fixtures())
	_, err := s.client.GetRun(context.Background(), &reinv1.GetRunRequest{RunId: "run_missing"})
	wantCode(t, err, codes.NotFound)
	_, err = s.client.GetRun(context.Background(), &reinv1.GetRunRequest{})
	wantCode(t, err, codes.InvalidArgument)
	_, err = s.client.ListEvents(context.Background(), &reinv1.ListEventsRequest{RunId: "run_missing"})
	wantCode(t, err, codes.NotFound)
	_, err = s.client.CancelRun(context.Background(), &reinv1.CancelRunRequest{RunId: "run_missing"})
	wantCode(t, err, codes.NotFound)
}

func TestListRunsFiltersAndPages(t *testing.T) {
	s := newTestServer(t, fixtures())
	var completed, paused []string
	for i := 0; i < 5; i++ {
		completed = append(completed, s.start(t, fmt.Sprintf("c%d", i), contract(map[string]string{"kind": "done"}, final("ok"))).GetRunId())
		paused = append(paused, s.start(t, fmt.Sprintf("p%d", i), contract(map[string]string{"kind": "ask"}, ask("why?"))).GetRunId())
	}
	collect := func(req *reinv1.ListRunsRequest) []string {
		var ids []string
		for {
			resp, err := s.client.ListRuns(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range resp.GetRuns() {
				ids = append(ids, r.GetRunId())
			}
			if resp.GetNextPageToken() == "" {
				return ids
			}
			req.PageToken = resp.GetNextPageToken()
		}
	}
	all := collect(&reinv1.ListRunsRequest{PageSize: 3})
	if len(all) != 10 {
		t.Fatalf("paging listed %d runs, want 10", len(all))
	}
	for i := 1; i < len(all); i++ {
		if all[i-1] <= all[i] {
			t.Fatalf("not newest first: %v", all)
		}
	}
	got := collect(&reinv1.ListRunsRequest{Statuses: []reinv1.RunStatus{reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT}, PageSize: 2})
	if strings.Join(got, ",") != strings.Join(reverse(paused), ",") {
		t.Fatalf("needs_input runs %v, want %v", got, reverse(paused))
	}
	got = collect(&reinv1.ListRunsRequest{Labels: map[string]string{"kind": "done"}})
	if strings.Join(got, ",") != strings.Join(reverse(completed), ",") {
		t.Fatalf("kind=done runs %v, want %v", got, reverse(completed))
	}
	_, err := s.client.ListRuns(context.Background(), &reinv1.ListRunsRequest{PageToken: "%%%"})
	wantCode(t, err, codes.InvalidArgument)
	_, err = s.client.ListRuns(context.Background(), &reinv1.ListRunsRequest{PageSize: -1})
	wantCode(t, err, codes.InvalidArgument)
	_, err = s.client.ListRuns(context.Background(), &reinv1.ListRunsRequest{Statuses: []reinv1.RunStatus{42}})
	wantCode(t, err, codes.InvalidArgument)
}

func reverse(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[len(s)-1-i] = v
	}
	return out
}

func TestListEventsPaging(t *testing.T) {
	s := newTestServer(t, fixtures())
	run := s.start(t, "r", contract(nil, readCall("lookup"), readCall("lookup"), final("done")))
	var seqs []uint64
	req := &reinv1.ListEventsRequest{RunId: run.GetRunId(), AfterSequence: 2, PageSize: 3}
	for {
		resp, err := s.client.ListEvents(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range resp.GetEvents() {
			seqs = append(seqs, ev.GetSequence())
		}
		if resp.GetNextPageToken() == "" {
			break
		}
		req.PageToken = resp.GetNextPageToken()
	}
	if len(seqs) != int(run.GetVersion())-2 || seqs[0] != 3 || seqs[len(seqs)-1] != run.GetVersion() {
		t.Fatalf("sequences %v, want 3..%d", seqs, run.GetVersion())
	}
	_, err := s.client.ListEvents(context.Background(), &reinv1.ListEventsRequest{RunId: run.GetRunId(), PageToken: "bm90LWEtbnVtYmVy"})
	wantCode(t, err, codes.InvalidArgument)
}

// TestWatchRun checks the stream of a whole run: in order, gap-free, no
// duplicate, resumable from any sequence, and ending OK at the terminal event.
func TestWatchRun(t *testing.T) {
	s := newTestServer(t, fixtures())
	run := s.start(t, "r", contract(nil, readCall("lookup"), final("done")))
	for after := uint64(0); after <= run.GetVersion(); after++ {
		stream, err := s.client.WatchRun(context.Background(), &reinv1.WatchRunRequest{RunId: run.GetRunId(), AfterSequence: after})
		if err != nil {
			t.Fatal(err)
		}
		want := after + 1
		for {
			resp, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("after %d: %v", after, err)
			}
			if got := resp.GetEvent().GetSequence(); got != want {
				t.Fatalf("after %d: got sequence %d, want %d", after, got, want)
			}
			want++
		}
		if want != run.GetVersion()+1 {
			t.Fatalf("after %d: stream ended at %d, want every event to %d", after, want-1, run.GetVersion())
		}
	}
	_, err := recvErr(s.client.WatchRun(context.Background(), &reinv1.WatchRunRequest{RunId: run.GetRunId(), AfterSequence: run.GetVersion() + 1}))
	wantCode(t, err, codes.OutOfRange)
	_, err = recvErr(s.client.WatchRun(context.Background(), &reinv1.WatchRunRequest{RunId: "run_missing"}))
	wantCode(t, err, codes.NotFound)
}

func recvErr(stream grpc.ServerStreamingClient[reinv1.WatchRunResponse], err error) (*reinv1.WatchRunResponse, error) {
	if err != nil {
		return nil, err
	}
	return stream.Recv()
}

// TestWatchPausedRunStaysOpen: a paused run's stream stays open, and ends
// once the run is cancelled, with the cancellation as its last event.
func TestWatchPausedRunStaysOpen(t *testing.T) {
	s := newTestServer(t, fixtures())
	run := s.start(t, "r", contract(nil, ask("which one?")))
	if run.GetStatus() != reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT {
		t.Fatalf("status %v, want needs_input", run.GetStatus())
	}
	stream, err := s.client.WatchRun(context.Background(), &reinv1.WatchRunRequest{RunId: run.GetRunId(), AfterSequence: run.GetVersion()})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *reinv1.Event, 10)
	done := make(chan error, 1)
	go func() {
		for {
			resp, err := stream.Recv()
			if err != nil {
				done <- err
				return
			}
			got <- resp.GetEvent()
		}
	}()
	cancelled, err := s.client.CancelRun(context.Background(), &reinv1.CancelRunRequest{RunId: run.GetRunId(), Reason: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if cancelled.GetRun().GetStatus() != reinv1.RunStatus_RUN_STATUS_CANCELLED {
		t.Fatalf("status %v, want cancelled", cancelled.GetRun().GetStatus())
	}
	if err := <-done; !errors.Is(err, io.EOF) {
		t.Fatalf("stream ended with %v, want OK", err)
	}
	close(got)
	var last *reinv1.Event
	for ev := range got {
		last = ev
	}
	if last.GetStatusChanged().GetTo() != reinv1.RunStatus_RUN_STATUS_CANCELLED || last.GetSequence() != run.GetVersion()+1 {
		t.Fatalf("last streamed event %v, want the cancellation at %d", last, run.GetVersion()+1)
	}
}

func TestCancelTerminalRun(t *testing.T) {
	s := newTestServer(t, fixtures())
	run := s.start(t, "r", contract(nil, final("done")))
	_, err := s.client.CancelRun(context.Background(), &reinv1.CancelRunRequest{RunId: run.GetRunId()})
	st := wantCode(t, err, codes.FailedPrecondition)
	if !strings.Contains(st.Message(), "completed") {
		t.Fatalf("message %q should name the run's status", st.Message())
	}
	after, err := s.client.GetRun(context.Background(), &reinv1.GetRunRequest{RunId: run.GetRunId()})
	if err != nil {
		t.Fatal(err)
	}
	if after.GetRun().GetVersion() != run.GetVersion() {
		t.Fatalf("a refused cancel changed the run: version %d → %d", run.GetVersion(), after.GetRun().GetVersion())
	}
}

// TestRestartResumesRunningRuns: a run left running in the store (its
// server stopped mid-run) is carried on when a node opens the file again.
func TestRestartResumesRunningRuns(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rein.db")
	slow := &reinv1.ScriptedReply{Reply: &reinv1.ScriptedReply_Decision{Decision: &reinv1.Decision{
		Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: "late"}}}}, DelayMs: 60_000}
	node, err := Open(context.Background(), Config{Store: boltAt(t, path), Tools: fixtures()})
	if err != nil {
		t.Fatal(err)
	}
	st, _, err := node.Engine.Start(context.Background(), harnessStart("r", slow))
	if err != nil {
		t.Fatal(err)
	}
	// Wait until the model call is in flight, then stop the node.
	sub := node.Hub.Subscribe(st.RunID)
	for {
		cur, err := node.Store.Load(context.Background(), st.RunID)
		if err != nil {
			t.Fatal(err)
		}
		if cur.ModelInFlight {
			break
		}
		<-sub.C
	}
	sub.Close()
	node.Close()

	// The second node's script answers at once.
	fast := &reinv1.ScriptedReply{Reply: slow.Reply}
	node, err = Open(context.Background(), Config{Store: boltAt(t, path), Tools: fixtures(), Models: scriptedModels(fast), Resume: true})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	if err := node.Engine.Wait(context.Background(), st.RunID); err != nil {
		t.Fatal(err)
	}
	got, err := node.Store.Load(context.Background(), st.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != reinv1.RunStatus_RUN_STATUS_COMPLETED || got.Result.GetText() != "late" {
		t.Fatalf("after restart: status %v result %v, want completed", got.Status, got.Result)
	}
}
