package policy

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// DefaultServiceTimeout is how long rein waits for a policy service's
// answer before it fails closed.
const DefaultServiceTimeout = 2 * time.Second

// Asker asks a policy service about a call. *Services is rein's; a replay
// answers from the recording.
type Asker interface {
	// Has reports whether a service is registered as name.
	Has(name string) bool
	// Ask is the service's decision on call, always with Source SERVICE
	// and the service's name as Rule; nil when the service does not decide
	// the call.
	Ask(ctx context.Context, name string, call Call, run *reinv1.PolicyRun) *reinv1.PolicyDecided
}

// Services are the policy services a server registered (rein serve
// --policy-service NAME=ADDR), by name.
type Services struct {
	clients map[string]reinv1.PolicyServiceClient
	conns   []*grpc.ClientConn
	// Timeout bounds one Check; 0 means DefaultServiceTimeout.
	Timeout time.Duration
	// FailDeny makes a service that fails or does not answer deny the
	// call; otherwise it asks a person. Never allow.
	FailDeny bool
	// now is the clock latencies are measured on.
	now func() time.Time
}

var _ Asker = (*Services)(nil)

// NewServices returns no services, answered within timeout.
func NewServices(timeout time.Duration, failDeny bool) *Services {
	return &Services{clients: map[string]reinv1.PolicyServiceClient{}, Timeout: timeout, FailDeny: failDeny, now: time.Now}
}

// Dial registers the service at addr (host:port) as name. It does not
// connect: the first Check does. The connection is plaintext, for a
// service on loopback or an internal network.
func (s *Services) Dial(name, addr string) error {
	if _, dup := s.clients[name]; dup {
		return fmt.Errorf("policy service %s is registered twice", name)
	}
	if name == "" || addr == "" {
		return fmt.Errorf("policy service %q at %q: register it as NAME=HOST:PORT", name, addr)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("policy service %s at %s: %w", name, addr, err)
	}
	s.conns = append(s.conns, conn)
	s.Add(name, reinv1.NewPolicyServiceClient(conn))
	return nil
}

// Add registers a client as name.
func (s *Services) Add(name string, c reinv1.PolicyServiceClient) { s.clients[name] = c }

// Close closes the connections Dial made.
func (s *Services) Close() error {
	var errs []error
	for _, c := range s.conns {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// Has reports whether a service is registered as name.
func (s *Services) Has(name string) bool {
	if s == nil {
		return false
	}
	_, ok := s.clients[name]
	return ok
}

// Names are the registered services' names, sorted.
func (s *Services) Names() []string {
	if s == nil {
		return nil
	}
	out := make([]string, 0, len(s.clients))
	for n := range s.clients {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Ask asks the service registered as name to decide call. A service that
// errs, gives no valid answer or does not answer within the timeout fails
// closed: ask (deny with FailDeny), with the error recorded. The decision
// records how long the service took.
func (s *Services) Ask(ctx context.Context, name string, call Call, run *reinv1.PolicyRun) *reinv1.PolicyDecided {
	in := newInput(call, run)
	d := &reinv1.PolicyDecided{CallId: call.ID, Tool: call.Tool, Source: reinv1.PolicySource_POLICY_SOURCE_SERVICE, Rule: name}
	var c reinv1.PolicyServiceClient
	if s != nil {
		c = s.clients[name]
	}
	if c == nil {
		return s.failClosed(d, fmt.Errorf("no policy service is registered as %q on this server (rein serve --policy-service %s=ADDR)", name, name))
	}
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = DefaultServiceTimeout
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := s.now()
	resp, err := c.Check(cctx, &reinv1.CheckRequest{CallId: call.ID, Tool: in.tool, Args: in.args, Run: in.run})
	d.Latency = durationpb.New(s.now().Sub(start))
	if err != nil {
		if cctx.Err() == context.DeadlineExceeded || status.Code(err) == codes.DeadlineExceeded && ctx.Err() == nil {
			// Either clock may see the deadline first: gRPC's, or the
			// context's timer.
			err = fmt.Errorf("policy service %s did not answer within %s", name, timeout)
		} else {
			err = fmt.Errorf("policy service %s failed: %v", name, err)
		}
		return s.failClosed(d, err)
	}
	effect := resp.GetEffect()
	switch {
	case effect == reinv1.PolicyEffect_POLICY_EFFECT_UNSPECIFIED:
		return nil
	case reinv1.PolicyEffect_name[int32(effect)] == "" || resp.GetApprovals() > 16 || len(resp.GetReason()) > 4096:
		return s.failClosed(d, fmt.Errorf("policy service %s gave an answer rein does not take (effect %d, %d approvals, a reason of %d bytes)",
			name, effect, resp.GetApprovals(), len(resp.GetReason())))
	}
	d.Effect, d.Message, d.Approvals = effect, resp.GetReason(), resp.GetApprovals()
	return d
}

// failClosed makes d the decision of a service that could not decide.
func (s *Services) failClosed(d *reinv1.PolicyDecided, err error) *reinv1.PolicyDecided {
	d.Effect = reinv1.PolicyEffect_POLICY_EFFECT_ASK
	if s != nil && s.FailDeny {
		d.Effect = reinv1.PolicyEffect_POLICY_EFFECT_DENY
	}
	d.Error = err.Error()
	d.Message = "the policy service could not decide this call: " + strings.TrimSpace(err.Error())
	return d
}
