package policy

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// checkFunc is a policy service that answers with its function.
type checkFunc struct {
	reinv1.UnimplementedPolicyServiceServer
	check func(context.Context, *reinv1.CheckRequest) (*reinv1.CheckResponse, error)
}

func (c checkFunc) Check(ctx context.Context, r *reinv1.CheckRequest) (*reinv1.CheckResponse, error) {
	return c.check(ctx, r)
}

// serve runs a real gRPC policy service on loopback and returns its
// address.
func serve(t *testing.T, check func(context.Context, *reinv1.CheckRequest) (*reinv1.CheckResponse, error)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	reinv1.RegisterPolicyServiceServer(s, checkFunc{check: check})
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

func services(t *testing.T, timeout time.Duration, failDeny bool, name, addr string) *Services {
	t.Helper()
	s := NewServices(timeout, failDeny)
	if err := s.Dial(name, addr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestServiceAnswers: the service sees the call and the run, and its
// answer is recorded with its name and latency.
func TestServiceAnswers(t *testing.T) {
	var got *reinv1.CheckRequest
	addr := serve(t, func(_ context.Context, r *reinv1.CheckRequest) (*reinv1.CheckResponse, error) {
		got = r
		return &reinv1.CheckResponse{Effect: ask, Reason: "finance reviews refunds", Approvals: 2}, nil
	})
	s := services(t, time.Second, false, "finance", addr)
	d := s.Ask(context.Background(), "finance", refund(70, "EUR"), &reinv1.PolicyRun{Id: "run_1", Tenant: "acme"})
	if d.GetEffect() != ask || d.GetRule() != "finance" || d.GetSource() != reinv1.PolicySource_POLICY_SOURCE_SERVICE ||
		d.GetMessage() != "finance reviews refunds" || d.GetApprovals() != 2 || d.GetLatency() == nil || d.GetError() != "" {
		t.Fatalf("decision %v: want ask by finance with its reason, approvals and latency", d)
	}
	if got.GetTool().GetName() != "refunds.create" || got.GetTool().GetTier() != "write" || got.GetArgs().GetFields()["currency"].GetStringValue() != "EUR" ||
		got.GetRun().GetTenant() != "acme" || got.GetCallId() != "c1" {
		t.Errorf("the service was asked %v", got)
	}
}

// TestServiceFailsClosed: a service that is down, slow or wrong never
// allows: the call is asked (or denied with FailDeny), with the error.
func TestServiceFailsClosed(t *testing.T) {
	slow := serve(t, func(ctx context.Context, _ *reinv1.CheckRequest) (*reinv1.CheckResponse, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	wrong := serve(t, func(context.Context, *reinv1.CheckRequest) (*reinv1.CheckResponse, error) {
		return &reinv1.CheckResponse{Effect: 42}, nil
	})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := lis.Addr().String()
	lis.Close()
	for _, tc := range []struct {
		name, addr, want string
		failDeny         bool
	}{
		{"slow", slow, "did not answer within", false},
		{"slow, deny", slow, "did not answer within", true},
		{"down", down, "failed", false},
		{"wrong answer", wrong, "does not take", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := services(t, 200*time.Millisecond, tc.failDeny, "svc", tc.addr)
			d := s.Ask(context.Background(), "svc", refund(1, "EUR"), nil)
			want := ask
			if tc.failDeny {
				want = deny
			}
			if d.GetEffect() != want || !strings.Contains(d.GetError(), tc.want) {
				t.Fatalf("decision %v: want %v with an error saying %q", d, want, tc.want)
			}
		})
	}
	// A grant naming a service no one registered fails closed too, and is
	// refused at start by CheckGrants.
	c := &Checker{}
	d := c.Decide(context.Background(), &reinv1.ToolGrant{Name: "refunds.create", PolicyService: "ghost"}, nil, refund(1, "EUR"), nil)
	if d.GetEffect() != ask || !strings.Contains(d.GetError(), "ghost") {
		t.Errorf("an unregistered service: %v, want ask with an error", d)
	}
	if err := c.CheckGrants([]*reinv1.ToolGrant{{Name: "refunds.create", PolicyService: "ghost"}}); err == nil || !strings.Contains(err.Error(), "--policy-service ghost=ADDR") {
		t.Errorf("CheckGrants: %v, want the unregistered service refused", err)
	}
}
