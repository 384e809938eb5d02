package main

// The service over real gRPC: a grpc.Server on a loopback port, called by
// a real client, by rein's own client (internal/policy), and as the
// binary (run) that logs its address and stops on its signal.

import (
	"bufio"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/policy"
)

// serve serves f on a loopback port until the test ends; stop stops it
// sooner.
func serve(t *testing.T, f *Finance) (addr string, stop func()) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := newServer(f)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = gs.Serve(lis)
	}()
	stop = func() {
		gs.Stop()
		<-served
	}
	t.Cleanup(stop)
	return lis.Addr().String(), stop
}

// dial is a plaintext client connection to addr, closed when the test ends.
func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// TestService: allow, ask with 2 approvals and deny over gRPC; a request
// with no tool is InvalidArgument and the service answers the next one; it
// serves reflection.
func TestService(t *testing.T) {
	ctx := testCtx(t)
	addr, _ := serve(t, NewFinance(nil, nil))
	conn := dial(t, addr)
	c := reinv1.NewPolicyServiceClient(conn)
	for _, tc := range []struct {
		name      string
		req       *reinv1.CheckRequest
		effect    reinv1.PolicyEffect
		approvals uint32
	}{
		{"20 EUR", refund(t, toolRefund, "acme", "alice", eur("20.00")), allow, 0},
		{"6000 EUR", refund(t, toolRefund, "acme", "alice", eur("6000")), askEffect, 2},
		{"20 USD", refund(t, toolRefund, "acme", "alice", map[string]any{"amount": "20.00", "currency": "USD"}), denyEffect, 0},
		{"another tool", refund(t, "invoices.get", "acme", "alice", map[string]any{"invoice_id": "INV-1001"}), unspecified, 0},
	} {
		resp, err := c.Check(ctx, tc.req)
		if err != nil || resp.GetEffect() != tc.effect || resp.GetApprovals() != tc.approvals {
			t.Errorf("%s: %v with %d approvals (%v), want %s with %d", tc.name, resp.GetEffect(), resp.GetApprovals(), err, tc.effect, tc.approvals)
		}
	}

	_, err := c.Check(ctx, &reinv1.CheckRequest{CallId: "c1", Args: refund(t, toolRefund, "", "", eur("20")).Args})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "names no tool") {
		t.Errorf("no tool: %v, want InvalidArgument saying the request names no tool", err)
	}
	if resp, err := c.Check(ctx, refund(t, toolRefund, "acme", "alice", eur("20"))); err != nil || resp.GetEffect() != allow {
		t.Errorf("the call after it: %v, %v; want allow from a service still serving", resp, err)
	}

	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	list, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range list.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	if !strings.Contains(strings.Join(names, " "), "rein.v1.PolicyService") {
		t.Errorf("reflection lists %v, want rein.v1.PolicyService among them", names)
	}
}

// TestReinAsks: rein's own client (as `rein serve --policy-service
// finance=ADDR` makes it) gets the service's decisions, and none for a tool
// it does not decide. The twin: the service stopped, rein fails closed,
// asking (or denying with --policy-fail deny), never allowing.
func TestReinAsks(t *testing.T) {
	ctx := testCtx(t)
	addr, stop := serve(t, NewFinance(nil, nil))
	rein := policy.NewServices(5*time.Second, false)
	if err := rein.Dial("finance", addr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rein.Close() })
	call := func(tool string, args map[string]any) policy.Call {
		return policy.Call{ID: "c1", Tool: tool, Tier: reinv1.ToolTier_TOOL_TIER_WRITE, Args: refund(t, tool, "", "", args).Args}
	}
	run := &reinv1.PolicyRun{Id: "run_1", Tenant: "acme", Principal: "bot-nightly"}

	d := rein.Ask(ctx, "finance", call(toolRefund, eur("20")), run)
	if d.GetEffect() != askEffect || d.GetApprovals() != 1 || d.GetRule() != "finance" || d.GetError() != "" || !strings.Contains(d.GetMessage(), "bot-nightly") {
		t.Errorf("a bot's refund: %v, want an ask of 1 approval by finance, naming the bot", d)
	}
	if d := rein.Ask(ctx, "finance", call("invoices.get", map[string]any{"invoice_id": "INV-1001"}), run); d != nil {
		t.Errorf("another tool: %v, want no decision", d)
	}

	stop()
	if d := rein.Ask(ctx, "finance", call(toolRefund, eur("20")), nil); d.GetEffect() != askEffect || d.GetError() == "" {
		t.Errorf("the service stopped: %v, want rein to ask, recording the error", d)
	}
	rein.FailDeny = true
	if d := rein.Ask(ctx, "finance", call(toolRefund, eur("20")), nil); d.GetEffect() != denyEffect || d.GetError() == "" {
		t.Errorf("the service stopped, with --policy-fail deny: %v, want a deny, recording the error", d)
	}
}

// logLines runs run's stderr through a pipe and sends each line on the
// returned channel, draining the pipe until run is done with it.
func logLines(t *testing.T) (io.WriteCloser, <-chan string) {
	t.Helper()
	pr, pw := io.Pipe()
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default: // nobody waits for this one
			}
		}
	}()
	t.Cleanup(func() { _ = pr.Close() })
	return pw, lines
}

// TestRun: the binary serves on the address it logs, with its limits file,
// until its ctx ends, then stops gracefully (exit 0). The twins: usage
// errors exit 2, a service that cannot start exits 1 and says why.
func TestRun(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	limits := filepath.Join(dir, "limits.json")
	if err := os.WriteFile(limits, []byte(`{"tenants": {"acme": {"auto_approve_up_to": 100}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	stderr, lines := logLines(t)
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	exited := make(chan int, 1)
	go func() {
		code := run(runCtx, []string{"--listen", "127.0.0.1:0", "--limits", limits}, stderr)
		_ = stderr.Close()
		exited <- code
	}()
	var addr string
	for addr == "" {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("the service exited (%d) before it served", <-exited)
			}
			if _, rest, found := strings.Cut(line, " addr="); found {
				addr, _, _ = strings.Cut(rest, " ")
			}
		case <-ctx.Done():
			t.Fatal("the service did not log its address")
		}
	}
	c := reinv1.NewPolicyServiceClient(dial(t, addr))
	for tenant, want := range map[string]reinv1.PolicyEffect{"acme": allow, "globex": askEffect} {
		if resp, err := c.Check(ctx, refund(t, toolRefund, tenant, "alice", eur("80"))); err != nil || resp.GetEffect() != want {
			t.Errorf("80 EUR for %s: %v, %v; want %s", tenant, resp, err, want)
		}
	}
	stopRun()
	select {
	case code := <-exited:
		if code != exitOK {
			t.Fatalf("exit %d after the stop, want 0", code)
		}
	case <-ctx.Done():
		t.Fatal("the service did not stop")
	}

	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"tenants": {"acme": {"two_people": 100}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		says string
	}{
		{"an argument", []string{"--listen", "127.0.0.1:0", "extra"}, exitUsage, "takes no arguments"},
		{"an unknown flag", []string{"--port", "7400"}, exitUsage, "flag provided but not defined: -port"},
		{"an unknown limit", []string{"--listen", "127.0.0.1:0", "--limits", bad}, exitError, `unknown field \"two_people\"`},
		{"no limits file", []string{"--listen", "127.0.0.1:0", "--limits", filepath.Join(dir, "missing.json")}, exitError, "no such file"},
		{"a bad address", []string{"--listen", "127.0.0.1:http-alt-no"}, exitError, "listen on 127.0.0.1:http-alt-no"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			if code := run(ctx, tc.args, &out); code != tc.code || !strings.Contains(out.String(), tc.says) {
				t.Errorf("exit %d, saying %q; want %d, saying %q", code, out.String(), tc.code, tc.says)
			}
		})
	}
}
