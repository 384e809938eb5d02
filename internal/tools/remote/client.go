package remote

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/tools"
)

// Client runs the tools of one remote tool service. It is safe for
// concurrent use.
type Client struct {
	// name is the service's registration name, addr where it is reached;
	// both go into every error.
	name, addr string
	rpc        reinv1.ToolServiceClient
	// conn is the connection Dial made, which Close closes; nil when New was
	// given a connection its caller owns.
	conn *grpc.ClientConn
}

var (
	_ tools.Executor = (*Client)(nil)
	_ tools.Looker   = (*Client)(nil)
)

// redialBackoff spaces the attempts to reconnect to a service that went
// away: 100ms doubling to 5s (gRPC's default grows to 120s, so a service
// back after a long outage would stay unreached for up to two minutes).
var redialBackoff = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 2, Jitter: 0.2, MaxDelay: 5 * time.Second},
	MinConnectTimeout: 5 * time.Second,
}

// Dial returns a Client of the tool service registered as name at addr
// (host:port). It does not connect: the first call does, and a service that
// is down fails that call, not Dial. A connection that breaks is re-dialed
// in the background, with backoff (100ms doubling to 5s); a call made while
// it is down fails Unavailable. The connection is plaintext, for
// a service on loopback or an internal network; opts come after these
// defaults, so grpc.WithTransportCredentials among them replaces it.
func Dial(name, addr string, opts ...grpc.DialOption) (*Client, error) {
	if addr == "" {
		return nil, fmt.Errorf("tool server %s: no address; register it as NAME=HOST:PORT", name)
	}
	opts = append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(redialBackoff),
	}, opts...)
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("tool server %s at %s: %w", name, addr, err)
	}
	c := New(name, conn)
	c.conn = conn
	return c, nil
}

// New returns a Client of the tool service registered as name, over cc,
// which stays its caller's to close. The address in errors is cc's target
// when cc has one (a *grpc.ClientConn does).
func New(name string, cc grpc.ClientConnInterface) *Client {
	addr := "an unknown address"
	if t, ok := cc.(interface{ Target() string }); ok {
		addr = t.Target()
	}
	return &Client{name: name, addr: addr, rpc: reinv1.NewToolServiceClient(cc)}
}

// Close closes the connection Dial made. A Client from New leaves its
// connection alone.
func (c *Client) Close() error {
	if c.conn == nil {
		return nil
	}
	if err := c.conn.Close(); err != nil {
		return fmt.Errorf("tool server %s at %s: close: %w", c.name, c.addr, err)
	}
	return nil
}

// List implements tools.Executor: one ListTools call, on the connection
// the Client keeps, and nothing remembered from the last one.
func (c *Client) List(ctx context.Context) ([]tools.Spec, error) {
	resp, err := c.rpc.ListTools(ctx, &reinv1.ListToolsRequest{})
	if err != nil {
		return nil, c.fail(ctx, "ListTools", "", err)
	}
	specs := make([]tools.Spec, len(resp.GetTools()))
	for i, t := range resp.GetTools() {
		specs[i] = tools.Spec{Name: t.GetName(), Description: t.GetDescription(), InputSchema: t.GetInputSchema(), Tier: t.GetTier(),
			Server: "tool-server " + c.name}
	}
	return specs, nil
}

// Read implements tools.Executor.
func (c *Client) Read(ctx context.Context, call tools.Call) (*structpb.Value, error) {
	resp, err := c.rpc.Read(ctx, &reinv1.ReadRequest{Call: toWire(call)})
	if err != nil {
		return nil, c.fail(ctx, "Read", call.Tool, err)
	}
	return resp.GetOutput(), nil
}

// Propose implements tools.Executor.
func (c *Client) Propose(ctx context.Context, call tools.Call) (*structpb.Value, error) {
	resp, err := c.rpc.ProposeWrite(ctx, &reinv1.ProposeWriteRequest{Call: toWire(call)})
	if err != nil {
		return nil, c.fail(ctx, "ProposeWrite", call.Tool, err)
	}
	return resp.GetPreview(), nil
}

// Commit implements tools.Executor. The service must not write twice for
// one operationID; call.Preview goes with the request, so that the service
// can refuse a write whose approved preview no longer holds.
func (c *Client) Commit(ctx context.Context, call tools.Call, operationID string) (*structpb.Value, error) {
	resp, err := c.rpc.CommitWrite(ctx, &reinv1.CommitWriteRequest{
		Call: toWire(call), OperationId: operationID, Preview: call.Preview,
	})
	if err != nil {
		return nil, c.fail(ctx, "CommitWrite", call.Tool, err)
	}
	return resp.GetReceipt(), nil
}

// Lookup implements tools.Looker.
func (c *Client) Lookup(ctx context.Context, call tools.Call, operationID string) (*structpb.Value, bool, error) {
	resp, err := c.rpc.LookupWrite(ctx, &reinv1.LookupWriteRequest{Call: toWire(call), OperationId: operationID})
	if err != nil {
		return nil, false, c.fail(ctx, "LookupWrite", call.Tool, err)
	}
	if !resp.GetApplied() {
		return nil, false, nil
	}
	return resp.GetReceipt(), true, nil
}

// toWire is a call as the service sees it. Index does not travel (the
// service does not know the run's history); Preview travels in
// CommitWriteRequest itself.
func toWire(call tools.Call) *reinv1.RemoteToolCall {
	return &reinv1.RemoteToolCall{RunId: call.RunID, CallId: call.CallID, Tool: call.Tool, Arguments: call.Args}
}

// fromWire is the tools.Call of a call that came over the wire.
func fromWire(call *reinv1.RemoteToolCall) tools.Call {
	return tools.Call{RunID: call.GetRunId(), CallID: call.GetCallId(), Tool: call.GetTool(), Args: call.GetArguments()}
}
