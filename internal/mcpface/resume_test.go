package mcpface_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// cuttable is a client's HTTP transport whose connections the test can
// drop: cut closes every open connection and holds each GET (the
// standalone stream's reconnection) until mend.
type cuttable struct {
	base *http.Transport
	mu   sync.Mutex
	conn []net.Conn
	down chan struct{} // non-nil while cut
}

func newCuttable() *cuttable {
	c := &cuttable{}
	c.base = &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err == nil {
			c.mu.Lock()
			c.conn = append(c.conn, conn)
			c.mu.Unlock()
		}
		return conn, err
	}}
	return c
}

func (c *cuttable) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	down := c.down
	c.mu.Unlock()
	if down != nil && r.Method == http.MethodGet {
		select {
		case <-down:
		case <-r.Context().Done():
			return nil, r.Context().Err()
		}
	}
	return c.base.RoundTrip(r)
}

func (c *cuttable) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.down = make(chan struct{})
	for _, conn := range c.conn {
		_ = conn.Close()
	}
	c.conn = nil
}

func (c *cuttable) mend() {
	c.mu.Lock()
	defer c.mu.Unlock()
	close(c.down)
	c.down = nil
}

// noted is an event store that tells the test when the transport stores
// an elicitation.
type noted struct {
	mcp.EventStore
	elicited chan struct{}
}

func (n *noted) Append(ctx context.Context, session, stream string, data []byte) error {
	err := n.EventStore.Append(ctx, session, stream, data)
	if strings.Contains(string(data), `"elicitation/create"`) {
		select {
		case n.elicited <- struct{}{}:
		default:
		}
	}
	return err
}

// none fails if anything more came on seen.
func none(t *testing.T, seen <-chan *mcp.ElicitParams) {
	t.Helper()
	select {
	case p := <-seen:
		t.Errorf("elicited again: %s", p.Message)
	default:
	}
}

// TestElicitationResumesAfterADrop: the session's connections drop while
// its run pauses for approval; the elicitation is sent while no stream
// carries it; the client's transport comes back with Last-Event-ID and
// gets it, once; accepting it commits the write once.
func TestElicitationResumesAfterADrop(t *testing.T) {
	store := &noted{EventStore: mcp.NewMemoryEventStore(nil), elicited: make(chan struct{}, 1)}
	f := startFaceOpts(t, refundTaskFile(t), nil, store)
	seen := make(chan *mcp.ElicitParams, 4)
	link := newCuttable()
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, &mcp.ClientOptions{ElicitationHandler: elicitor("accept", seen)})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: f.url, HTTPClient: &http.Client{Transport: bearer{"starter-token", link}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	link.cut()
	started := decodeStart(t, call(t, cs, "start_refund", map[string]any{"invoice_id": "INV-42"}))
	select {
	case <-store.elicited:
	case <-ctx.Done():
		t.Fatal("the server sent no elicitation")
	}
	link.mend()
	p := receive(t, seen)
	if !strings.Contains(p.Message, started.Pending.Proposal.Hash) {
		t.Errorf("the elicitation after the drop does not show the hash %s:\n%s", started.Pending.Proposal.Hash, p.Message)
	}
	f.waitStatus(t, started.RunID, reinv1.RunStatus_RUN_STATUS_COMPLETED)
	if ops, commits := f.tools.total(); ops != 1 || commits != 1 {
		t.Errorf("%d writes committed %d times, want 1 once", ops, commits)
	}
	none(t, seen)
}

// TestNewSessionAdoptsPendingRuns: the session that started a run goes
// away with its write pending; a new session of the same principal is
// asked about it and approves it; a session of another principal is not
// asked.
func TestNewSessionAdoptsPendingRuns(t *testing.T) {
	f := startFace(t)
	first := make(chan *mcp.ElicitParams, 4)
	gone := f.connect(t, "starter", elicitor("cancel", first))
	started := decodeStart(t, call(t, gone, "start_refund", map[string]any{"invoice_id": "INV-42"}))
	receive(t, first)
	_ = gone.Close()

	other := make(chan *mcp.ElicitParams, 4)
	f.connect(t, "approver", elicitor("accept", other))
	again := make(chan *mcp.ElicitParams, 4)
	f.connect(t, "starter", elicitor("accept", again))
	if p := receive(t, again); !strings.Contains(p.Message, started.Pending.Proposal.Hash) {
		t.Errorf("the new session was asked %s", p.Message)
	}
	f.waitStatus(t, started.RunID, reinv1.RunStatus_RUN_STATUS_COMPLETED)
	if ops, commits := f.tools.total(); ops != 1 || commits != 1 {
		t.Errorf("%d writes committed %d times, want 1 once", ops, commits)
	}
	none(t, again)
	none(t, other)
}

// TestStaleElicitationRefused: while the session holds an elicitation, an
// approver revises the write; the session's accept of what it was shown
// is refused by its hash and the session is told so; it is then asked
// about the revision, once, and its accept commits the revision once.
func TestStaleElicitationRefused(t *testing.T) {
	f := startFace(t)
	seen := make(chan *mcp.ElicitParams, 4)
	hold := make(chan struct{})
	logs := make(chan string, 4)
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			seen <- req.Params
			select {
			case <-hold:
			case <-ctx.Done():
			}
			return &mcp.ElicitResult{Action: "accept"}, nil
		},
		LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) { logs <- fmt.Sprint(req.Params.Data) },
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: f.url, HTTPClient: &http.Client{Transport: bearer{"starter-token", http.DefaultTransport}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if err := cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatal(err)
	}
	started := decodeStart(t, call(t, cs, "start_refund", map[string]any{"invoice_id": "INV-42"}))
	receive(t, seen)
	revised := call(t, f.connect(t, "approver", nil), "revise", map[string]any{"run_id": started.RunID, "proposal_id": started.Pending.Proposal.ProposalID,
		"proposal_hash": started.Pending.Proposal.Hash, "arguments": map[string]any{"invoice_id": "INV-42", "amount": "600.00", "currency": "EUR", "reason": "half"}})
	if revised.IsError {
		t.Fatalf("revise: %s", resultText(revised))
	}
	run := f.waitStatus(t, started.RunID, reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL)
	newHash := run.GetPending().GetProposal().GetHash()
	if newHash == started.Pending.Proposal.Hash {
		t.Fatal("the revision kept the hash")
	}
	close(hold) // the person accepts what they were shown: the old hash
	select {
	case msg := <-logs:
		if !strings.Contains(msg, "refused") || !strings.Contains(msg, started.Pending.Proposal.Hash) || !strings.Contains(msg, "not pending") {
			t.Errorf("the session was told %q", msg)
		}
	case <-ctx.Done():
		t.Fatal("the stale accept was not reported to the session")
	}
	if p := receive(t, seen); !strings.Contains(p.Message, newHash) {
		t.Errorf("the revision was asked as %s", p.Message)
	}
	f.waitStatus(t, started.RunID, reinv1.RunStatus_RUN_STATUS_COMPLETED)
	if ops, commits := f.tools.total(); ops != 1 || commits != 1 {
		t.Errorf("%d writes committed %d times, want 1 once", ops, commits)
	}
	none(t, seen)
}
