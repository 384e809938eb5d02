package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// TestOversizeRequest: a request over MaxRecvBytes is ResourceExhausted and
// stores nothing; one under it is served.
func TestOversizeRequest(t *testing.T) {
	s := newTCPServer(t, Config{MaxRecvBytes: 64 << 10})
	ctx := context.Background()
	big := contract(nil, final("done"))
	big.Goal = strings.Repeat("g", 200<<10)
	_, err := s.client.StartRun(ctx, &reinv1.StartRunRequest{RequestId: "big", Contract: big})
	wantCode(t, err, codes.ResourceExhausted)

	small := contract(nil, final("done"))
	small.Goal = strings.Repeat("g", 32<<10)
	if _, err := s.client.StartRun(ctx, &reinv1.StartRunRequest{RequestId: "small", Contract: small}); err != nil {
		t.Fatalf("a 32 KiB goal under a 64 KiB limit: %v", err)
	}
	list, err := s.client.ListRuns(ctx, &reinv1.ListRunsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.GetRuns()) != 1 || list.GetRuns()[0].GetContract().GetGoal() != small.Goal {
		t.Fatalf("%d runs stored, want only the small one", len(list.GetRuns()))
	}
}

// TestRateLimit: a principal over its burst is ResourceExhausted, on unary
// and streaming calls; another principal, and the public health check, are
// not affected.
func TestRateLimit(t *testing.T) {
	s := newTCPServer(t, Config{Directory: testDirectory(t), RatePerSecond: 1, RateBurst: 2})
	ctx := context.Background()
	for i := range 2 {
		if _, err := s.client.ListRuns(ctx, &reinv1.ListRunsRequest{}, as("a-viewer")); err != nil {
			t.Fatalf("call %d within the burst: %v", i+1, err)
		}
	}
	_, err := s.client.ListRuns(ctx, &reinv1.ListRunsRequest{}, as("a-viewer"))
	st := wantCode(t, err, codes.ResourceExhausted)
	if !strings.Contains(st.Message(), `"a-viewer"`) {
		t.Errorf("message %q does not name the principal", st.Message())
	}
	// A stream is a call too.
	stream, err := s.client.WatchRuns(ctx, &reinv1.WatchRunsRequest{}, as("a-viewer"))
	if err == nil {
		_, err = stream.Recv()
	}
	wantCode(t, err, codes.ResourceExhausted)

	// The twins: another principal, of the same tenant or another, and the
	// public health check.
	for _, who := range []string{"a-admin", "b-viewer"} {
		if _, err := s.client.ListRuns(ctx, &reinv1.ListRunsRequest{}, as(who)); err != nil {
			t.Fatalf("%s, after a-viewer went over its limit: %v", who, err)
		}
	}
	healthClient := healthpb.NewHealthClient(s.conn)
	for range 5 {
		if _, err := healthClient.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("health check: %v", err)
		}
	}
}

// badRequestFields are the fields the google.rpc.BadRequest details of err
// name.
func badRequestFields(err error) []string {
	var fields []string
	for _, d := range status.Convert(err).Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				fields = append(fields, v.GetField())
			}
		}
	}
	return fields
}

// TestValidationBadRequest: a request violating a proto constraint is
// InvalidArgument with a BadRequest detail naming the field, and reaches no
// handler.
func TestValidationBadRequest(t *testing.T) {
	s := newTCPServer(t, Config{Directory: testDirectory(t)})
	ctx := context.Background()
	untiered := contract(nil, final("x"))
	untiered.Tools[0].Tier = reinv1.ToolTier_TOOL_TIER_UNSPECIFIED
	for _, tc := range []struct {
		name  string
		call  func(...grpc.CallOption) error
		field string
	}{
		{"GetRun without run_id", func(o ...grpc.CallOption) error {
			_, err := s.client.GetRun(ctx, &reinv1.GetRunRequest{}, o...)
			return err
		}, "run_id"},
		{"StartRun with a tool tier unspecified", func(o ...grpc.CallOption) error {
			_, err := s.client.StartRun(ctx, &reinv1.StartRunRequest{RequestId: "r", Contract: untiered}, o...)
			return err
		}, "contract.tools[0].tier"},
		{"DecideApproval with verdict 0", func(o ...grpc.CallOption) error {
			_, err := s.client.DecideApproval(ctx, &reinv1.DecideApprovalRequest{RunId: "run_x", ProposalId: "p", ProposalHash: "h"}, o...)
			return err
		}, "verdict"},
		{"CancelRun with an overlong reason", func(o ...grpc.CallOption) error {
			_, err := s.client.CancelRun(ctx, &reinv1.CancelRunRequest{RunId: "run_x", Reason: strings.Repeat("r", 1025)}, o...)
			return err
		}, "reason"},
		{"ListRuns with an unknown status", func(o ...grpc.CallOption) error {
			_, err := s.client.ListRuns(ctx, &reinv1.ListRunsRequest{Statuses: []reinv1.RunStatus{reinv1.RunStatus_RUN_STATUS_COMPLETED, 42}}, o...)
			return err
		}, "statuses[1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call(as("a-admin"))
			wantCode(t, err, codes.InvalidArgument)
			if got := badRequestFields(err); len(got) != 1 || got[0] != tc.field {
				t.Fatalf("BadRequest names %v, want [%s]; details %v", got, tc.field, status.Convert(err).Details())
			}
			// The twin: without credentials the same request is refused
			// before it is validated.
			wantCode(t, tc.call(), codes.Unauthenticated)
		})
	}
	list, err := s.client.ListRuns(ctx, &reinv1.ListRunsRequest{}, as("a-admin"))
	if err != nil {
		t.Fatal(err)
	}
	if len(list.GetRuns()) != 0 {
		t.Fatalf("refused requests stored %d runs", len(list.GetRuns()))
	}
}

// TestStreamValidationBadRequest: a streaming RPC's invalid request gets the
// same BadRequest detail as a unary one's (docs/design.md §10).
func TestStreamValidationBadRequest(t *testing.T) {
	s := newTCPServer(t, Config{Directory: testDirectory(t)})
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		open  func() (interface{ Recv() (any, error) }, error)
		field string
	}{
		{"WatchRun without run_id", func() (interface{ Recv() (any, error) }, error) {
			st, err := s.client.WatchRun(ctx, &reinv1.WatchRunRequest{}, as("a-viewer"))
			return recvAny[reinv1.WatchRunResponse]{st}, err
		}, "run_id"},
		{"WatchRuns with status 0", func() (interface{ Recv() (any, error) }, error) {
			st, err := s.client.WatchRuns(ctx, &reinv1.WatchRunsRequest{Statuses: []reinv1.RunStatus{0}}, as("a-viewer"))
			return recvAny[reinv1.WatchRunsResponse]{st}, err
		}, "statuses[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stream, err := tc.open()
			if err == nil {
				_, err = stream.Recv()
			}
			wantCode(t, err, codes.InvalidArgument)
			if got := badRequestFields(err); len(got) != 1 || got[0] != tc.field {
				t.Fatalf("BadRequest names %v, want [%s]; details %v", got, tc.field, status.Convert(err).Details())
			}
		})
	}
}

type recvAny[T any] struct{ s grpc.ServerStreamingClient[T] }

func (r recvAny[T]) Recv() (any, error) { return r.s.Recv() }

// syncBuffer is a bytes.Buffer the server's goroutines may log to.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines are the JSON log lines written so far.
func (b *syncBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// finished are the "finished call" lines of a method.
func (b *syncBuffer) finished(t *testing.T, method string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range b.lines(t) {
		if l["msg"] == "finished call" && l["grpc.method"] == method {
			out = append(out, l)
		}
	}
	return out
}

// TestCallLog: one line per call, with its method, code, duration,
// principal and run.
func TestCallLog(t *testing.T) {
	var logs syncBuffer
	s := newTCPServer(t, Config{Directory: testDirectory(t), Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	ctx := context.Background()
	run := s.startAs(t, "a-operator", contract(nil, final("done")))

	if _, err := s.client.GetRun(ctx, &reinv1.GetRunRequest{RunId: run.GetRunId()}, as("a-viewer")); err != nil {
		t.Fatal(err)
	}
	// startAs made one GetRun call too, as a-operator.
	var got []map[string]any
	for _, l := range logs.finished(t, "GetRun") {
		if l["principal"] == "a-viewer" {
			got = append(got, l)
		}
	}
	if len(got) != 1 {
		t.Fatalf("%d finished-call lines for a-viewer's GetRun, want 1: %v", len(got), logs.finished(t, "GetRun"))
	}
	line := got[0]
	want := map[string]any{
		"grpc.service": "rein.v1.RunService", "grpc.method": "GetRun", "grpc.code": "OK",
		"principal": "a-viewer", "run_id": run.GetRunId(), "level": "INFO",
	}
	for k, v := range want {
		if line[k] != v {
			t.Errorf("%s = %v, want %v; line %v", k, line[k], v, line)
		}
	}
	// The middleware writes the duration as a decimal string.
	if ms, err := strconv.ParseFloat(fmt.Sprint(line["grpc.time_ms"]), 64); err != nil || ms < 0 {
		t.Errorf("grpc.time_ms = %v, want a duration in ms; line %v", line["grpc.time_ms"], line)
	}

	// The twin: a refused call is logged too, with its code, its run and
	// no principal.
	_, err := s.client.GetRun(ctx, &reinv1.GetRunRequest{RunId: run.GetRunId()}, grpc.PerRPCCredentials(bearerToken("mallory-token")))
	wantCode(t, err, codes.Unauthenticated)
	var refused []map[string]any
	for _, l := range logs.finished(t, "GetRun") {
		if l["grpc.code"] == "Unauthenticated" {
			refused = append(refused, l)
		}
	}
	if len(refused) != 1 || refused[0]["principal"] != "" || refused[0]["run_id"] != run.GetRunId() {
		t.Fatalf("refused GetRun logged as %v, want one Unauthenticated line with the run and no principal", refused)
	}

	// A stream's line names the run its request named.
	stream, err := s.client.WatchRun(ctx, &reinv1.WatchRunRequest{RunId: run.GetRunId()}, as("b-admin"))
	if err == nil {
		_, err = stream.Recv()
	}
	wantCode(t, err, codes.NotFound)
	watch := logs.finished(t, "WatchRun")
	var found bool
	for _, l := range watch {
		if l["principal"] == "b-admin" {
			found = true
			if l["grpc.code"] != "NotFound" || l["run_id"] != run.GetRunId() {
				t.Errorf("b-admin's WatchRun logged as %v, want NotFound with run_id %s", l, run.GetRunId())
			}
		}
	}
	if !found {
		t.Errorf("no finished-call line for b-admin's WatchRun: %v", watch)
	}
}

// panicService stands in for rein.v1.RunService (whose rules it shares):
// GetRun of run "boom" and every WatchRun panic; any other GetRun answers.
type panicService struct{}

var panicServiceDesc = grpc.ServiceDesc{
	ServiceName: reinv1.RunService_ServiceDesc.ServiceName,
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "GetRun",
		Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			in := new(reinv1.GetRunRequest)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(_ context.Context, req any) (any, error) {
				if req.(*reinv1.GetRunRequest).GetRunId() == "boom" {
					panic("secret-panic-detail: nil map in handler")
				}
				return &reinv1.GetRunResponse{Run: &reinv1.Run{RunId: req.(*reinv1.GetRunRequest).GetRunId()}}, nil
			}
			return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: reinv1.RunService_GetRun_FullMethodName}, h)
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName:    "WatchRun",
		ServerStreams: true,
		Handler: func(_ any, stream grpc.ServerStream) error {
			in := new(reinv1.WatchRunRequest)
			if err := stream.RecvMsg(in); err != nil {
				return err
			}
			panic("secret-panic-detail: stream")
		},
	}},
}

// noRuleServiceDesc is a service no auth rule names: its handler must never
// run; noRuleCalled says whether it did.
var noRuleCalled atomic.Bool

var noRuleServiceDesc = grpc.ServiceDesc{
	ServiceName: "rein.test.NoRule",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Boom",
		Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			in := new(emptypb.Empty)
			if err := dec(in); err != nil {
				return nil, err
			}
			return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/rein.test.NoRule/Boom"}, func(context.Context, any) (any, error) {
				noRuleCalled.Store(true)
				panic("the handler of a method without an auth rule ran")
			})
		},
	}},
}

// TestPanicIsInternal: a panicking handler is answered Internal with no
// panic text (the log has it), and the server carries on serving. The
// handlers are registered on a server built with the node's interceptor
// chain, without a tokens file.
func TestPanicIsInternal(t *testing.T) {
	var logs syncBuffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	srv := grpc.NewServer(chain(log, &authenticator{}, newValidator(), newLimiter(0, 0), newRequestCodec(4<<20))...)
	srv.RegisterService(&panicServiceDesc, panicService{})
	srv.RegisterService(&noRuleServiceDesc, panicService{})
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(lis)
	}()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cc.Close()
		srv.Stop()
		<-served
	})
	ctx := context.Background()
	client := reinv1.NewRunServiceClient(cc)

	noPanicText := func(err error) {
		t.Helper()
		st := wantCode(t, err, codes.Internal)
		if strings.Contains(st.Message(), "secret-panic-detail") || strings.Contains(st.Message(), "goroutine") {
			t.Fatalf("the panic reached the wire: %q", st.Message())
		}
	}
	for i := range 2 {
		_, err := client.GetRun(ctx, &reinv1.GetRunRequest{RunId: "boom"})
		noPanicText(err)
		// The twin: the same handler, not panicking, still answers.
		resp, err := client.GetRun(ctx, &reinv1.GetRunRequest{RunId: "fine"})
		if err != nil || resp.GetRun().GetRunId() != "fine" {
			t.Fatalf("after panic %d: %v, %v", i+1, resp, err)
		}
	}
	stream, err := client.WatchRun(ctx, &reinv1.WatchRunRequest{RunId: "boom"})
	if err == nil {
		_, err = stream.Recv()
	}
	noPanicText(err)
	if resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health after the panics: %v, %v", resp, err)
	}

	// The log has the panic, and each panicking call's line has Internal.
	var panics, internal int
	for _, l := range logs.lines(t) {
		if l["msg"] == "panic in a handler" && strings.Contains(l["panic"].(string), "secret-panic-detail") {
			panics++
		}
		if l["msg"] == "finished call" && l["grpc.code"] == "Internal" {
			internal++
		}
	}
	if panics != 3 || internal != 3 {
		t.Errorf("%d panic lines and %d Internal call lines logged, want 3 of each", panics, internal)
	}

	// A method with no auth rule is refused before its handler runs.
	err = cc.Invoke(ctx, "/rein.test.NoRule/Boom", &emptypb.Empty{}, &emptypb.Empty{})
	st := wantCode(t, err, codes.PermissionDenied)
	if !strings.Contains(st.Message(), "no auth rule") || noRuleCalled.Load() {
		t.Fatalf("%q (handler ran: %v), want a refusal naming the missing rule", st.Message(), noRuleCalled.Load())
	}
}
