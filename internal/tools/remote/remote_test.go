package remote_test

// Every test here runs real gRPC on a loopback port: the generated client
// and server, the fixture executor with its durable ledger, and thin
// executors that block or fail on purpose. No test sleeps: they wait on
// channels the executors signal, under testCtx's bound.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/tools"
	"github.com/reinhq/rein/internal/tools/remote"
)

// testCtx bounds anything a test waits on, so a hang fails instead of
// stalling the suite.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// serve serves srv on lis until the end of the test.
func serve(t *testing.T, lis net.Listener, srv reinv1.ToolServiceServer) {
	t.Helper()
	serveWith(t, lis, func(*grpc.Server) reinv1.ToolServiceServer { return srv })
}

// serveWith serves, on lis until the end of the test, the service that
// build makes for the gRPC server (which it may keep, to stop it early).
func serveWith(t *testing.T, lis net.Listener, build func(*grpc.Server) reinv1.ToolServiceServer) {
	t.Helper()
	gs := grpc.NewServer()
	reinv1.RegisterToolServiceServer(gs, build(gs))
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = gs.Serve(lis)
	}()
	t.Cleanup(func() {
		gs.Stop()
		<-served
	})
}

// listen is a fresh loopback listener, or one on addr when it is set.
func listen(t *testing.T, addr string) net.Listener {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	return lis
}

// serveExec serves exec on a fresh loopback port and returns its address.
func serveExec(t *testing.T, exec tools.Executor) string {
	t.Helper()
	lis := listen(t, "")
	serve(t, lis, remote.NewServer(exec))
	return lis.Addr().String()
}

// dial is a Client of the service at addr, named billing, closed at the
// end of the test.
func dial(t *testing.T, addr string, opts ...grpc.DialOption) *remote.Client {
	t.Helper()
	c, err := remote.Dial("billing", addr, opts...)
	if err != nil {
		t.Fatalf("Dial(%s): %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func mustValue(t *testing.T, v any) *structpb.Value {
	t.Helper()
	pv, err := structpb.NewValue(v)
	if err != nil {
		t.Fatalf("value %v: %v", v, err)
	}
	return pv
}

func mustStruct(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatalf("struct %v: %v", m, err)
	}
	return s
}

// The fixture billing service: an invoice to read, a refund to write.
func invoiceOut(t *testing.T) *structpb.Value {
	return mustValue(t, map[string]any{"invoice_id": "INV-42", "amount": "1200.00", "currency": "EUR"})
}

func refundPreview(t *testing.T) *structpb.Value {
	return mustValue(t, map[string]any{"refund": map[string]any{"invoice_id": "INV-42", "amount": "1200.00"}})
}

func refundReceipt(t *testing.T) *structpb.Value {
	return mustValue(t, map[string]any{"refund_id": "re_9", "status": "succeeded"})
}

// billing is the fixture billing service's executor; with ledger set, its
// writes are durable there (tools.Fixtures.WithLedger), and a new billing
// on the same ledger knows them.
func billing(t *testing.T, ledger string) *tools.Fixtures {
	t.Helper()
	f := tools.NewFixtures(map[string][]tools.FixtureResult{
		"invoices.get":   {{Output: invoiceOut(t)}},
		"refunds.create": {{Preview: refundPreview(t), Receipt: refundReceipt(t)}},
	})
	if ledger == "" {
		return f
	}
	f, err := f.WithLedger(ledger)
	if err != nil {
		t.Fatalf("WithLedger: %v", err)
	}
	return f
}

// ledgerLines is the fixture ledger's lines: "OP\tTOOL\tapplied|repeat".
func ledgerLines(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("read the ledger: %v", err)
	}
	return strings.Fields(strings.ReplaceAll(string(data), "\t", ":"))
}

// recorder is the fixture billing service, with an input schema on every
// tool, that keeps the last call each operation was given, so a test sees
// what crossed the wire.
type recorder struct {
	*tools.Fixtures
	schema *structpb.Struct

	mu    sync.Mutex
	calls map[string]tools.Call
}

func (r *recorder) keep(op string, call tools.Call) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls[op] = call
}

func (r *recorder) call(op string) tools.Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[op]
}

func (r *recorder) List(ctx context.Context) ([]tools.Spec, error) {
	specs, err := r.Fixtures.List(ctx)
	for i := range specs {
		specs[i].InputSchema = r.schema
	}
	return specs, err
}

func (r *recorder) Read(ctx context.Context, call tools.Call) (*structpb.Value, error) {
	r.keep("read", call)
	return r.Fixtures.Read(ctx, call)
}

func (r *recorder) Propose(ctx context.Context, call tools.Call) (*structpb.Value, error) {
	r.keep("propose", call)
	return r.Fixtures.Propose(ctx, call)
}

func (r *recorder) Commit(ctx context.Context, call tools.Call, op string) (*structpb.Value, error) {
	r.keep("commit", call)
	return r.Fixtures.Commit(ctx, call, op)
}

func (r *recorder) Lookup(ctx context.Context, call tools.Call, op string) (*structpb.Value, bool, error) {
	r.keep("lookup", call)
	return r.Fixtures.Lookup(ctx, call, op)
}

// TestRoundTrip: each operation crosses the wire and back unchanged: the
// specs with their schemas, a read's output, a write's preview and receipt,
// and a lookup of a committed key (applied, with its receipt) and of an
// unknown one (not applied). The service sees the call as made, but for
// Index, which does not travel. The twins are in TestErrors.
func TestRoundTrip(t *testing.T) {
	ctx := testCtx(t)
	rec := &recorder{
		Fixtures: billing(t, ""),
		schema: mustStruct(t, map[string]any{"type": "object", "properties": map[string]any{
			"invoice_id": map[string]any{"type": "string"},
		}}),
		calls: map[string]tools.Call{},
	}
	c := dial(t, serveExec(t, rec))

	specs, err := c.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	var names []string
	for _, s := range specs {
		names = append(names, s.Name)
		if s.Description != "fixture" || !proto.Equal(s.InputSchema, rec.schema) {
			t.Errorf("spec %s: description %q, schema %v; want \"fixture\" and %v", s.Name, s.Description, s.InputSchema, rec.schema)
		}
	}
	if got := strings.Join(names, ","); got != "invoices.get,refunds.create" {
		t.Errorf("List: %s, want invoices.get,refunds.create", got)
	}

	read := tools.Call{RunID: "run_1", CallID: "c1", Tool: "invoices.get",
		Args: mustStruct(t, map[string]any{"invoice_id": "INV-42"}), Index: 3}
	out, err := c.Read(ctx, read)
	if err != nil || !proto.Equal(out, invoiceOut(t)) {
		t.Fatalf("Read: %v, %v; want %v", out, err, invoiceOut(t))
	}
	got := rec.call("read")
	if got.RunID != "run_1" || got.CallID != "c1" || got.Tool != "invoices.get" || !proto.Equal(got.Args, read.Args) ||
		got.Index != 0 || got.Preview != nil {
		t.Errorf("the service saw %+v, want the call as made with Index 0 and no preview", got)
	}

	write := tools.Call{RunID: "run_1", CallID: "c2", Tool: "refunds.create",
		Args: mustStruct(t, map[string]any{"invoice_id": "INV-42", "amount": "1200.00"})}
	preview, err := c.Propose(ctx, write)
	if err != nil || !proto.Equal(preview, refundPreview(t)) {
		t.Fatalf("Propose: %v, %v; want %v", preview, err, refundPreview(t))
	}
	write.Preview = preview
	receipt, err := c.Commit(ctx, write, "op_prop_1")
	if err != nil || !proto.Equal(receipt, refundReceipt(t)) {
		t.Fatalf("Commit: %v, %v; want %v", receipt, err, refundReceipt(t))
	}
	if got := rec.call("commit"); !proto.Equal(got.Preview, preview) || !proto.Equal(got.Args, write.Args) {
		t.Errorf("the service committed %+v, want the call with the approved preview %v", got, preview)
	}

	for _, tc := range []struct {
		op      string
		applied bool
		receipt *structpb.Value
	}{
		{"op_prop_1", true, refundReceipt(t)},
		{"op_prop_2", false, nil},
	} {
		receipt, applied, err := c.Lookup(ctx, tools.Call{RunID: "run_1", CallID: "c2", Tool: "refunds.create"}, tc.op)
		if err != nil || applied != tc.applied || !proto.Equal(receipt, tc.receipt) {
			t.Errorf("Lookup(%s): %v, %v, %v; want %v, %v, nil", tc.op, receipt, applied, err, tc.receipt, tc.applied)
		}
	}
}

// failing is an executor whose every operation fails with err. It cannot
// look writes up.
type failing struct{ err error }

func (f failing) List(context.Context) ([]tools.Spec, error) {
	return []tools.Spec{{Name: "invoices.get"}}, nil
}
func (f failing) Read(context.Context, tools.Call) (*structpb.Value, error)    { return nil, f.err }
func (f failing) Propose(context.Context, tools.Call) (*structpb.Value, error) { return nil, f.err }
func (f failing) Commit(context.Context, tools.Call, string) (*structpb.Value, error) {
	return nil, f.err
}

// TestErrors: a service's refusal reaches rein with its code, and with a
// message that names the service and says what went wrong: an unknown tool
// is tools.ErrNoTool, InvalidArgument is the service's message as it is
// (the model reads it), a request that breaks the proto's rules never
// reaches the executor, and a service that cannot look writes up says so.
// The twin is TestRoundTrip, where the same calls succeed.
func TestErrors(t *testing.T) {
	read := func(tool string) func(context.Context, *remote.Client) error {
		return func(ctx context.Context, c *remote.Client) error {
			_, err := c.Read(ctx, tools.Call{RunID: "run_1", CallID: "c1", Tool: tool})
			return err
		}
	}
	for _, tc := range []struct {
		name string
		exec tools.Executor
		call func(context.Context, *remote.Client) error
		code codes.Code
		is   error
		// exact, when set, is the whole message; else it contains want.
		exact string
		want  []string
	}{
		{name: "unknown tool", exec: billing(t, ""), call: read("invoices.delete"), code: codes.NotFound, is: tools.ErrNoTool,
			want: []string{"the tool server billing at 127.0.0.1:", `has no tool "invoices.delete": `}},
		{name: "invalid argument", exec: failing{status.Error(codes.InvalidArgument, "invoice_id is required, such as \"INV-42\"")},
			call: read("invoices.get"), code: codes.InvalidArgument, exact: "invoice_id is required, such as \"INV-42\""},
		{name: "failed precondition", exec: failing{status.Error(codes.FailedPrecondition, "the invoice changed since the refund was approved")},
			call: read("invoices.get"), code: codes.FailedPrecondition,
			want: []string{"the tool server billing at 127.0.0.1:", "refused Read invoices.get: the invoice changed since the refund was approved"}},
		{name: "plain error", exec: failing{errors.New("the ledger is offline")}, call: read("invoices.get"), code: codes.Unknown,
			want: []string{"tool server billing at 127.0.0.1:", "Read invoices.get failed: the ledger is offline"}},
		{name: "executor deadline", exec: failing{context.DeadlineExceeded}, call: read("invoices.get"), code: codes.DeadlineExceeded,
			is: context.DeadlineExceeded, want: []string{"Read invoices.get did not answer before the call's deadline"}},
		{name: "request breaks the rules", exec: billing(t, ""), call: read(""), code: codes.InvalidArgument,
			want: []string{"call.tool: must be at least 1 characters"}},
		{name: "commit without a key", exec: billing(t, ""), code: codes.InvalidArgument,
			call: func(ctx context.Context, c *remote.Client) error {
				_, err := c.Commit(ctx, tools.Call{Tool: "refunds.create"}, "")
				return err
			},
			want: []string{"operation_id: must be at least 1 characters"}},
		{name: "commit refused", exec: failing{status.Error(codes.FailedPrecondition, "the invoice changed since the refund was approved")},
			code: codes.FailedPrecondition, is: tools.ErrRefused,
			call: func(ctx context.Context, c *remote.Client) error {
				_, err := c.Commit(ctx, tools.Call{Tool: "refunds.create"}, "op_1")
				return err
			},
			want: []string{"refused the write: the invoice changed since the refund was approved"}},
		{name: "executor refusal", exec: failing{fmt.Errorf("%w: stale", tools.ErrRefused)}, code: codes.FailedPrecondition, is: tools.ErrRefused,
			call: func(ctx context.Context, c *remote.Client) error {
				_, err := c.Commit(ctx, tools.Call{Tool: "refunds.create"}, "op_1")
				return err
			},
			want: []string{"stale"}},
		{name: "no lookup", exec: failing{errors.New("unused")}, code: codes.Unimplemented, is: tools.ErrNoLookup,
			call: func(ctx context.Context, c *remote.Client) error {
				_, _, err := c.Lookup(ctx, tools.Call{Tool: "invoices.get"}, "op_1")
				return err
			},
			want: []string{"the tool server billing at 127.0.0.1:", "cannot look writes up"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := dial(t, serveExec(t, tc.exec))
			err := tc.call(testCtx(t), c)
			if err == nil {
				t.Fatal("the call succeeded, want an error")
			}
			if got := status.Code(err); got != tc.code {
				t.Errorf("code %v, want %v (%v)", got, tc.code, err)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("errors.Is(%v, %v) = false", err, tc.is)
			}
			if tc.exact != "" && err.Error() != tc.exact {
				t.Errorf("message %q, want exactly %q", err, tc.exact)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestCommitIdempotent: the operation ID crosses the wire intact, so a
// second commit with the same key writes nothing and returns the first
// receipt; the twin: two keys are two writes.
func TestCommitIdempotent(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  []string
		want string
	}{
		{"same key twice", []string{"op_prop_1", "op_prop_1"}, "op_prop_1:refunds.create:applied op_prop_1:refunds.create:repeat"},
		{"two keys", []string{"op_prop_1", "op_prop_2"}, "op_prop_1:refunds.create:applied op_prop_2:refunds.create:applied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			ledger := filepath.Join(t.TempDir(), "ledger")
			c := dial(t, serveExec(t, billing(t, ledger)))
			call := tools.Call{RunID: "run_1", CallID: "c2", Tool: "refunds.create", Preview: refundPreview(t)}
			var first *structpb.Value
			for i, op := range tc.ops {
				receipt, err := c.Commit(ctx, call, op)
				if err != nil {
					t.Fatalf("commit %d (%s): %v", i+1, op, err)
				}
				if first == nil {
					first = receipt
				} else if !proto.Equal(receipt, first) {
					t.Errorf("commit %d (%s): receipt %v, want the first's %v", i+1, op, receipt, first)
				}
			}
			if got := strings.Join(ledgerLines(t, ledger), " "); got != tc.want {
				t.Errorf("ledger %q, want %q", got, tc.want)
			}
		})
	}
}

// blocking is an executor whose Read reports its ctx on entered, then waits
// for the ctx to end and reports its error on ended, unless answer is set:
// then it answers at once.
type blocking struct {
	failing
	answer  bool
	entered chan context.Context
	ended   chan error
}

func (b *blocking) Read(ctx context.Context, _ tools.Call) (*structpb.Value, error) {
	b.entered <- ctx
	if b.answer {
		return structpb.NewStringValue("done"), nil
	}
	<-ctx.Done()
	b.ended <- ctx.Err()
	return nil, ctx.Err()
}

// TestDeadlinePassesThrough: the ctx of a call is the service's: a deadline
// that passes, or a cancel, ends the service's handler, and the error says
// so with the ctx's error inside; the twin: a call that answers in time
// carried its deadline to the service.
func TestDeadlinePassesThrough(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer bool
		// ctx makes the call's ctx; cancel, when set, is called once the
		// handler runs.
		ctx  func(context.Context) (context.Context, context.CancelFunc)
		kill bool
		is   error
		code codes.Code
		want string
	}{
		{name: "deadline passes", ctx: func(p context.Context) (context.Context, context.CancelFunc) {
			return context.WithTimeout(p, 100*time.Millisecond)
		}, is: context.DeadlineExceeded, code: codes.DeadlineExceeded, want: "Read invoices.get did not answer before the call's deadline"},
		{name: "cancelled", ctx: context.WithCancel, kill: true,
			is: context.Canceled, code: codes.Canceled, want: "Read invoices.get was cancelled"},
		{name: "answers in time", answer: true, ctx: func(p context.Context) (context.Context, context.CancelFunc) {
			return context.WithTimeout(p, 20*time.Second)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			wait := testCtx(t)
			b := &blocking{answer: tc.answer, entered: make(chan context.Context, 1), ended: make(chan error, 1)}
			c := dial(t, serveExec(t, b))
			ctx, cancel := tc.ctx(wait)
			defer cancel()
			if tc.kill {
				go func() {
					select {
					case <-b.entered:
						cancel()
					case <-wait.Done():
					}
				}()
			}
			_, err := c.Read(ctx, tools.Call{Tool: "invoices.get"})
			if tc.answer {
				if err != nil {
					t.Fatalf("Read: %v", err)
				}
				sctx := <-b.entered
				cd, _ := ctx.Deadline()
				sd, ok := sctx.Deadline()
				if !ok || sd.Before(cd.Add(-time.Second)) || sd.After(cd.Add(time.Second)) {
					t.Errorf("the service's deadline is %v (set %v), want about the caller's %v", sd, ok, cd)
				}
				return
			}
			if !errors.Is(err, tc.is) || status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Read: %v (code %v), want errors.Is %v, code %v, and %q", err, status.Code(err), tc.is, tc.code, tc.want)
			}
			select {
			case serr := <-b.ended:
				if serr == nil {
					t.Error("the service's handler ended with no ctx error")
				}
			case <-wait.Done():
				t.Fatal("the service's handler never saw its ctx end")
			}
		})
	}
}

// TestUnreachable: a service that is not listening fails the call with a
// message that names it and says what to do; the twin: the same client
// setup against a listening service answers.
func TestUnreachable(t *testing.T) {
	ctx := testCtx(t)
	lis := listen(t, "")
	addr := lis.Addr().String()
	if err := lis.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := dial(t, addr).List(ctx)
	want := "the tool server billing at " + addr + " is unreachable: start it or check --tool-server"
	if err == nil || !strings.HasPrefix(err.Error(), want) || status.Code(err) != codes.Unavailable {
		t.Errorf("List of a service that is down: %v (code %v), want %q first and Unavailable", err, status.Code(err), want)
	}

	specs, err := dial(t, serveExec(t, billing(t, ""))).List(ctx)
	if err != nil || len(specs) != 2 {
		t.Errorf("List of a service that is up: %v, %v; want two tools", specs, err)
	}
}

// TestDial: Dial's options come after its plaintext default, so they apply,
// and transport credentials among them replace it: TLS against a plaintext
// service fails. A registration without an address is refused at once.
func TestDial(t *testing.T) {
	ctx := testCtx(t)
	addr := serveExec(t, billing(t, ""))

	var mu sync.Mutex
	var methods []string
	count := grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		mu.Lock()
		methods = append(methods, method)
		mu.Unlock()
		return invoker(ctx, method, req, reply, cc, opts...)
	})
	if _, err := dial(t, addr, count).List(ctx); err != nil {
		t.Fatalf("List with an interceptor: %v", err)
	}
	mu.Lock()
	if got := strings.Join(methods, ","); got != reinv1.ToolService_ListTools_FullMethodName {
		t.Errorf("the interceptor saw %q, want one ListTools", got)
	}
	mu.Unlock()

	tlsOpt := grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS13}))
	if _, err := dial(t, addr, tlsOpt).List(ctx); status.Code(err) != codes.Unavailable {
		t.Errorf("List over TLS to a plaintext service: %v, want Unavailable", err)
	}

	if _, err := remote.Dial("billing", ""); err == nil || !strings.Contains(err.Error(), "NAME=HOST:PORT") {
		t.Errorf("Dial with no address: %v, want a refusal that shows NAME=HOST:PORT", err)
	}
}

// TestClose: a Client from Dial closes its connection; the twin: a Client
// from New leaves its caller's connection open.
func TestClose(t *testing.T) {
	ctx := testCtx(t)
	addr := serveExec(t, billing(t, ""))

	dialed, err := remote.Dial("billing", addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := dialed.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := dialed.List(ctx); err == nil {
		t.Error("List after Close succeeded, want an error")
	}

	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if err := remote.New("billing", cc).Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := remote.New("billing", cc).List(ctx); err != nil {
		t.Errorf("List on a connection another Client was closed over: %v", err)
	}
}
