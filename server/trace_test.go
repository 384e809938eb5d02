package server

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/telemetry"
)

// tracedServer is a node on st whose spans go to exp, and a client whose
// calls carry the trace context of their ctx.
func tracedServer(t *testing.T, st store.Store, tp *sdktrace.TracerProvider) (*Node, reinv1.RunServiceClient) {
	t.Helper()
	node, err := Open(context.Background(), Config{Store: st, Tools: fixtures(), Traces: tp, Resume: true})
	if err != nil {
		t.Fatal(err)
	}
	lis := bufconn.Listen(1 << 20)
	go func() { _ = node.GRPC.Serve(lis) }()
	cc, err := grpc.NewClient("passthrough:///test",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(tp),
			otelgrpc.WithPropagators(propagation.TraceContext{}))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cc.Close()
		node.Close()
	})
	return node, reinv1.NewRunServiceClient(cc)
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// TestRunTrace: a run is traced in its own trace, the caller's when the
// caller's call carried one: an invoke_agent span for its stretch of work,
// a chat span per model call and an execute_tool span per tool call, with
// the GenAI conventions' attributes, and no prompt or output in any of
// them. The run's trace ID is in its log and finds it through ListRuns.
func TestRunTrace(t *testing.T) {
	exp := newNotifyingExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	_, c := tracedServer(t, tempBolt(t), tp)
	ctx, caller := tp.Tracer("caller").Start(context.Background(), "caller")
	resp, err := c.StartRun(ctx, &reinv1.StartRunRequest{RequestId: "trace-1", Contract: contract(nil, readCall("lookup"), final("secret answer"))})
	caller.End()
	if err != nil {
		t.Fatal(err)
	}
	run := resp.GetRun()
	if run.GetTraceId() != caller.SpanContext().TraceID().String() {
		t.Fatalf("run's trace %q, want the caller's %s", run.GetTraceId(), caller.SpanContext().TraceID())
	}
	waitSpans(t, exp, "invoke_agent rein")
	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range exp.GetSpans().Snapshots() {
		if s.SpanContext().TraceID().String() != run.GetTraceId() {
			t.Errorf("span %q is in trace %s, not the run's", s.Name(), s.SpanContext().TraceID())
		}
		byName[s.Name()] = s
		for _, kv := range s.Attributes() {
			if kv.Value.Emit() == "secret answer" || kv.Value.Emit() == "found" {
				t.Errorf("span %q holds content: %s=%s", s.Name(), kv.Key, kv.Value.Emit())
			}
		}
	}
	agent, chat, tool := byName["invoke_agent rein"], byName["chat"], byName["execute_tool lookup"]
	if agent == nil || chat == nil || tool == nil {
		t.Fatalf("spans %v; want invoke_agent rein, chat, execute_tool lookup", keys(byName))
	}
	if a := attrs(agent); a["gen_ai.operation.name"].AsString() != "invoke_agent" || a["gen_ai.agent.id"].AsString() != run.GetRunId() ||
		a["rein.status"].AsString() != "completed" {
		t.Errorf("invoke_agent attributes %v", a)
	}
	if a := attrs(chat); a["gen_ai.operation.name"].AsString() != "chat" || a["gen_ai.provider.name"].AsString() != "script" ||
		a["gen_ai.usage.input_tokens"].AsInt64() != 10 || a["gen_ai.usage.output_tokens"].AsInt64() != 5 {
		t.Errorf("chat attributes %v", a)
	}
	if a := attrs(tool); a["gen_ai.tool.name"].AsString() != "lookup" || a["gen_ai.tool.call.id"].AsString() != "c" {
		t.Errorf("execute_tool attributes %v", a)
	}
	if chat.Parent().SpanID() != agent.SpanContext().SpanID() || tool.Parent().SpanID() != agent.SpanContext().SpanID() {
		t.Error("the model and tool spans are not under the run's invoke_agent span")
	}
	list, err := c.ListRuns(context.Background(), &reinv1.ListRunsRequest{TraceId: run.GetTraceId()})
	if err != nil || len(list.GetRuns()) != 1 || list.GetRuns()[0].GetRunId() != run.GetRunId() {
		t.Fatalf("ListRuns by the trace ID: %v %v", list, err)
	}
}

// The twins: a caller with no trace gets a new trace for its run (another
// run's trace finds nothing of it), and a trace ID that is not one is
// refused.
func TestRunTraceWithoutCaller(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	_, c := tracedServer(t, tempBolt(t), tp)
	a, err := c.StartRun(context.Background(), &reinv1.StartRunRequest{RequestId: "a", Contract: contract(nil, final("x"))})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.StartRun(context.Background(), &reinv1.StartRunRequest{RequestId: "b", Contract: contract(nil, final("y"))})
	if err != nil {
		t.Fatal(err)
	}
	if len(a.GetRun().GetTraceId()) != 32 || a.GetRun().GetTraceId() == b.GetRun().GetTraceId() {
		t.Fatalf("trace IDs %q and %q: want a new one each", a.GetRun().GetTraceId(), b.GetRun().GetTraceId())
	}
	list, err := c.ListRuns(context.Background(), &reinv1.ListRunsRequest{TraceId: "0123456789abcdef0123456789abcdef"})
	if err != nil || len(list.GetRuns()) != 0 {
		t.Fatalf("ListRuns by an unknown trace: %v %v", list, err)
	}
	_, err = c.ListRuns(context.Background(), &reinv1.ListRunsRequest{TraceId: "not-a-trace"})
	wantCode(t, err, 3) // InvalidArgument
}

// TestTraceSurvivesRestart: a run that pauses, and is carried on by another
// server on the same store, keeps its one trace: the second stretch is in
// the trace the first was.
func TestTraceSurvivesRestart(t *testing.T) {
	path := t.TempDir() + "/rein.db"
	exp := newNotifyingExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	first, c := tracedServer(t, boltAt(t, path), tp)
	resp, err := c.StartRun(context.Background(), &reinv1.StartRunRequest{RequestId: "r", Contract: contract(nil, ask("which?"), final("done"))})
	if err != nil {
		t.Fatal(err)
	}
	waitSpans(t, exp, "invoke_agent rein")
	first.Close()
	exp.Reset()

	_, c = tracedServer(t, boltAt(t, path), tp)
	if _, err := c.ProvideInput(context.Background(), &reinv1.ProvideInputRequest{RunId: resp.GetRun().GetRunId(), Text: "that one"}); err != nil {
		t.Fatal(err)
	}
	waitSpans(t, exp, "invoke_agent rein")
	for _, s := range exp.GetSpans().Snapshots() {
		if strings.HasPrefix(s.Name(), "rein.v1.") {
			continue // the ProvideInput call's own span, in its caller's trace
		}
		if s.SpanContext().TraceID().String() != resp.GetRun().GetTraceId() {
			t.Errorf("after the restart, span %q is in trace %s, not the run's %s", s.Name(), s.SpanContext().TraceID(), resp.GetRun().GetTraceId())
		}
	}
}

// notifyingExporter is an in-memory exporter that signals each export.
type notifyingExporter struct {
	*tracetest.InMemoryExporter
	// exported receives a value after spans were stored. Capacity 1:
	// signals coalesce.
	exported chan struct{}
}

func newNotifyingExporter() *notifyingExporter {
	return &notifyingExporter{InMemoryExporter: tracetest.NewInMemoryExporter(), exported: make(chan struct{}, 1)}
}

func (e *notifyingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.InMemoryExporter.ExportSpans(ctx, spans)
	select {
	case e.exported <- struct{}{}:
	default:
	}
	return err
}

// waitSpans waits until exp holds a span named name: it looks, then waits
// for the next export, so that none stored after a look is missed.
func waitSpans(t *testing.T, exp *notifyingExporter, name string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		for _, s := range exp.GetSpans().Snapshots() {
			if s.Name() == name {
				return
			}
		}
		select {
		case <-exp.exported:
		case <-deadline:
			t.Fatalf("no %q span within 10s; have %v", name, exp.GetSpans().Snapshots())
		}
	}
}

func keys(m map[string]sdktrace.ReadOnlySpan) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// collector is an OTLP/gRPC trace receiver: what rein exports arrives here.
type collector struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans map[string]string // span name → service.name
}

func (c *collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				c.spans[s.GetName()] = service
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// TestTracesExportOverOTLP: set up from the standard environment, rein's
// spans reach an OTLP/gRPC collector, under the service name it gives.
func TestTracesExportOverOTLP(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	col := &collector{spans: map[string]string{}}
	gs := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(gs, col)
	go func() { _ = gs.Serve(lis) }()
	defer gs.Stop()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+lis.Addr().String())
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
	t.Setenv("OTEL_SERVICE_NAME", "rein-test")
	tp, err := telemetry.Setup(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_, c := tracedServer(t, tempBolt(t), tp)
	ts := &testServer{client: c}
	ts.start(t, "otlp-1", contract(nil, readCall("lookup"), final("done")))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := tp.Shutdown(ctx); err != nil { // flushes the batch
		t.Fatal(err)
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	for _, name := range []string{"invoke_agent rein", "execute_tool lookup", "rein.v1.RunService/StartRun"} {
		if col.spans[name] != "rein-test" {
			t.Errorf("span %q reached the collector as service %q; got %v", name, col.spans[name], col.spans)
		}
	}
}

// The twin: a protocol rein cannot export over is refused at setup.
func TestTracesSetupRefusesUnknownProtocol(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "carrier-pigeon")
	if _, err := telemetry.Setup(context.Background()); err == nil {
		t.Fatal("Setup accepted an unknown OTLP protocol")
	}
}

// A run cut mid-call (its server stopped at once, as a crash stops it) and
// carried on by the next server at start keeps its one trace too: the
// resent call's span is in the run's trace.
func TestTraceSurvivesCrash(t *testing.T) {
	path := t.TempDir() + "/rein.db"
	exp := newNotifyingExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	first, c := tracedServer(t, boltAt(t, path), tp)
	slow := final("done")
	slow.DelayMs = 60_000
	resp, err := c.StartRun(context.Background(), &reinv1.StartRunRequest{RequestId: "crash", Contract: contract(nil, slow)})
	if err != nil {
		t.Fatal(err)
	}
	// Wait until the model call is in flight: the hub wakes sub at each
	// commit of the run, and the store says whether it is.
	sub := first.Hub.Subscribe(resp.GetRun().GetRunId())
	deadline := time.After(10 * time.Second)
	for {
		cur, err := first.Store.Load(context.Background(), resp.GetRun().GetRunId())
		if err != nil {
			t.Fatal(err)
		}
		if cur.ModelInFlight {
			break
		}
		select {
		case <-sub.C:
		case <-deadline:
			t.Fatalf("the model call was not sent within 10s: the run is at version %d, %v", cur.Version, cur.Status)
		}
	}
	sub.Close()
	first.Close() // the run is cut with its call in flight
	exp.Reset()

	node, err := Open(context.Background(), Config{Store: boltAt(t, path), Tools: fixtures(), Traces: tp, Resume: true,
		Models: scriptedModels(final("done"))})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	waitSpans(t, exp, "invoke_agent rein")
	var resumed bool
	for _, s := range exp.GetSpans().Snapshots() {
		if s.SpanContext().TraceID().String() != resp.GetRun().GetTraceId() {
			t.Errorf("after the crash, span %q is in trace %s, not the run's %s", s.Name(), s.SpanContext().TraceID(), resp.GetRun().GetTraceId())
		}
		if a := attrs(s); s.Name() == "chat" && a["rein.resumed"].AsBool() {
			resumed = true
		}
	}
	if !resumed {
		t.Error("no chat span of the resent call (rein.resumed)")
	}
}
