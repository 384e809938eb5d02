// Package mcp makes the tools of an MCP (Model Context Protocol) server rein
// tools. A Client connects to one server, over stdio (a command rein starts)
// or streamable HTTP (a URL), and is a tools.Executor: the server's tool T
// is the rein tool NAME.T, NAME being the server's registration name, so the
// tools of two servers never collide.
//
// Invariants:
//   - The client never decides a call's tier. The MCP annotations
//     (readOnlyHint, destructiveHint, …) are the server's hints about itself:
//     they are shown in the tool's description and in a write's preview, but
//     what may run, and how, is the contract's grant alone (the harness routes
//     it). A tool the contract does not grant is never called, whatever the
//     server says of it.
//   - Propose never calls the server: an MCP tool has no dry run, so the
//     preview describes the exact call that approving it makes.
//   - Commit calls the tool once per operation ID in this process: a second
//     Commit with a key that succeeded returns the first receipt; one with a
//     key in flight waits for it and shares its outcome. Only after a failed
//     attempt (the outcome unknown; a person approved again) is a key sent
//     again. The key travels in the request's _meta under MetaOperationID, for
//     servers that honour it. MCP has no way to ask whether a call was
//     applied, so the client is not a tools.Looker, and after a crash rein
//     leaves an unknown outcome to a person.
//   - A tool whose rein name would not be a valid tool name (1-64 letters,
//     digits, '_', '.' or '-'), or whose input schema is not a JSON object, is
//     skipped: Skipped reports it, and the logger is told.
//   - Every call takes its deadline and cancellation from its context; a
//     cancelled call is cancelled on the server too, as far as the server
//     heeds notifications/cancelled.
//   - A server that goes away (a stdio server's process exits, an HTTP
//     server loses the session) is reconnected at the next call: a stdio
//     server is started again, an HTTP one gets a new session. Attempts are
//     spaced by a backoff (100ms doubling to 5s, reset by a call that
//     succeeds), so a server that dies at once is not restarted in a loop.
//     A call is never sent twice by the client: one made while the server
//     is down fails with ErrUnreachable (for a read, the model's
//     observation; for a commit, an unknown outcome for the harness).
//     Open's clients reconnect; Connect's, over a given transport, cannot.
package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/reinhq/rein/internal/tail"
	"github.com/reinhq/rein/internal/tools"
)

// MetaOperationID is the _meta key of a commit's request that carries the
// write's operation ID (its idempotency key).
const MetaOperationID = "rein/operation_id"

// NoDryRunNote is the note of every preview.
const NoDryRunNote = "MCP tools have no dry run: approving runs this call once"

// Client is the connection to one MCP server, and a tools.Executor over its
// tools. It is safe for concurrent use. Close it to end the session (and
// stop a stdio server).
type Client struct {
	name   string
	logger *slog.Logger
	stderr *tail.Buffer // a stdio server's stderr, of every process; nil otherwise
	// dial opens a new session with the server (starts a stdio server
	// again); nil for a Client of Connect, whose transport opens once.
	dial func(ctx context.Context) (*sdk.ClientSession, error)
	// redial is held by the one reconnection in progress.
	redial chan struct{}

	// sessMu guards sess, closed, attempts and nextTry.
	sessMu sync.Mutex
	sess   *session
	closed bool
	// attempts counts the reconnections since a call last succeeded;
	// nextTry is the earliest the next may start.
	attempts int
	nextTry  time.Time

	// mu guards listed, specs, skipped, listedAt and changes.
	mu      sync.Mutex
	listed  map[string]*sdk.Tool // by rein name; nil before the first listing
	specs   []tools.Spec
	skipped []Skipped
	// changes counts the server's tools/list_changed notifications;
	// listedAt is its value when the listing began. They differ when the
	// listing may be stale.
	changes, listedAt uint64

	// commitMu guards commits.
	commitMu sync.Mutex
	// commits is every operation ID committed or being committed.
	commits map[string]*commit
}

var _ tools.Executor = (*Client)(nil)

// commit is one attempt at committing an operation ID. receipt and err are
// set before done is closed, and read only after.
type commit struct {
	done    chan struct{}
	receipt *structpb.Value
	err     error
}

func (c *commit) failed() bool {
	select {
	case <-c.done:
		return c.err != nil
	default:
		return false
	}
}

// Skipped is a tool of the server that rein does not offer, and why.
type Skipped struct {
	Tool   string // the MCP tool's name
	Reason string
}

// Name is the server's registration name, the prefix of its tools' names.
func (c *Client) Name() string { return c.name }

// Skipped is the server's tools that the last listing left out, and why.
func (c *Client) Skipped() []Skipped {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.skipped)
}

func (c *Client) toolsChanged() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.changes++
}

// refresh lists the server's tools again.
func (c *Client) refresh(ctx context.Context) error {
	c.mu.Lock()
	at := c.changes
	c.mu.Unlock()
	s, err := c.live(ctx)
	if err != nil {
		return err
	}
	listed := map[string]*sdk.Tool{}
	var (
		specs   []tools.Spec
		skipped []Skipped
	)
	for t, err := range s.cs.Tools(ctx, nil) {
		if err != nil {
			return c.callError(s, "tools/list", err)
		}
		full := c.name + "." + t.Name
		if err := tools.CheckName(full); err != nil {
			skipped = append(skipped, Skipped{t.Name, fmt.Sprintf("its rein name %q is not a tool name: %v", full, err)})
			continue
		}
		if listed[full] != nil {
			skipped = append(skipped, Skipped{t.Name, "the server lists it twice; the first is kept"})
			continue
		}
		schema, err := schemaStruct(t.InputSchema)
		if err != nil {
			skipped = append(skipped, Skipped{t.Name, fmt.Sprintf("its input schema is not a JSON object: %v", err)})
			continue
		}
		listed[full] = t
		specs = append(specs, tools.Spec{Name: full, Description: describe(t), InputSchema: schema, Server: "mcp " + c.name})
	}
	for _, s := range skipped {
		c.logger.Warn("MCP tool skipped", "server", c.name, "tool", s.Tool, "reason", s.Reason)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.listed, c.specs, c.skipped, c.listedAt = listed, specs, skipped, at
	return nil
}

func schemaStruct(schema any) (*structpb.Struct, error) {
	if schema == nil {
		return &structpb.Struct{}, nil
	}
	data, err := json.Marshal(schema)
	if err != nil {
		return nil, err
	}
	s := &structpb.Struct{}
	if err := s.UnmarshalJSON(data); err != nil {
		return nil, err
	}
	return s, nil
}

// describe is a tool's description for the model, with the server's hints.
func describe(t *sdk.Tool) string {
	d := t.Description
	if d == "" {
		d = t.Title
	}
	h := hints(t.Annotations)
	if len(h) == 0 {
		return d
	}
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%v", k, h[k]))
	}
	note := "MCP hints from the server (not enforced; the run's contract decides what runs): " + strings.Join(parts, ", ")
	if d == "" {
		return note
	}
	return d + "\n\n" + note
}

// hints is a tool's annotations as they stand in a preview; nil without
// annotations.
func hints(a *sdk.ToolAnnotations) map[string]any {
	if a == nil {
		return nil
	}
	h := map[string]any{"readOnlyHint": a.ReadOnlyHint, "idempotentHint": a.IdempotentHint}
	if a.DestructiveHint != nil {
		h["destructiveHint"] = *a.DestructiveHint
	}
	if a.OpenWorldHint != nil {
		h["openWorldHint"] = *a.OpenWorldHint
	}
	if a.Title != "" {
		h["title"] = a.Title
	}
	return h
}

// List implements tools.Executor: the server's tools, named NAME.T. The
// listing is kept until the server says it changed, or is reconnected. A
// server that is unreachable keeps its last listing, so that a call to
// one of its tools is routed to it and fails as unreachable (which the
// model may try again), not as a tool that does not exist.
func (c *Client) List(ctx context.Context) ([]tools.Spec, error) {
	c.mu.Lock()
	fresh := c.listed != nil && c.listedAt == c.changes
	listed := c.listed != nil
	c.mu.Unlock()
	if !fresh {
		if err := c.refresh(ctx); err != nil && (!listed || !errors.Is(err, ErrUnreachable)) {
			return nil, err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]tools.Spec, len(c.specs))
	for i, s := range c.specs {
		out[i] = s
		out[i].InputSchema = proto.Clone(s.InputSchema).(*structpb.Struct)
	}
	return out, nil
}

// tool is the listed MCP tool a rein name names. A name not in the listing
// lists the tools again once, in case the server added it.
func (c *Client) tool(ctx context.Context, name string) (*sdk.Tool, error) {
	if !strings.HasPrefix(name, c.name+".") {
		return nil, fmt.Errorf("%w: %q (MCP server %q provides tools named %s.TOOL)", tools.ErrNoTool, name, c.name, c.name)
	}
	for try := 0; ; try++ {
		c.mu.Lock()
		t, fresh := c.listed[name], c.listed != nil && c.listedAt == c.changes
		c.mu.Unlock()
		if t != nil && fresh {
			return t, nil
		}
		if try == 1 {
			if t != nil {
				return t, nil
			}
			return nil, fmt.Errorf("%w: %q (MCP server %q provides: %s)", tools.ErrNoTool, name, c.name, c.names())
		}
		if err := c.refresh(ctx); err != nil {
			return nil, err
		}
	}
}

func (c *Client) names() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.specs) == 0 {
		return "no tools"
	}
	names := make([]string, len(c.specs))
	for i, s := range c.specs {
		names[i] = s.Name
	}
	return strings.Join(names, ", ")
}

// Read implements tools.Executor: it calls the tool.
func (c *Client) Read(ctx context.Context, call tools.Call) (*structpb.Value, error) {
	t, err := c.tool(ctx, call.Tool)
	if err != nil {
		return nil, err
	}
	return c.call(ctx, t, call.Args, nil)
}

// Propose implements tools.Executor. It does not call the server: the
// preview is the call that approving it makes, with the server's hints.
func (c *Client) Propose(ctx context.Context, call tools.Call) (*structpb.Value, error) {
	t, err := c.tool(ctx, call.Tool)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return c.preview(t, call.Args)
}

func (c *Client) preview(t *sdk.Tool, args *structpb.Struct) (*structpb.Value, error) {
	fields := map[string]*structpb.Value{
		"server":    structpb.NewStringValue(c.name),
		"tool":      structpb.NewStringValue(t.Name),
		"arguments": structpb.NewStructValue(argsOf(args)),
		"note":      structpb.NewStringValue(NoDryRunNote),
	}
	if h := hints(t.Annotations); h != nil {
		v, err := structpb.NewValue(h)
		if err != nil {
			return nil, err
		}
		fields["hints"] = v
	}
	return structpb.NewStructValue(&structpb.Struct{Fields: fields}), nil
}

// argsOf is a copy of a call's arguments; an empty object for none.
func argsOf(args *structpb.Struct) *structpb.Struct {
	if args == nil {
		return &structpb.Struct{}
	}
	return proto.Clone(args).(*structpb.Struct)
}

// Commit implements tools.Executor: it calls the tool once per operation
// ID (see the package doc) and returns {"operation_id", "output"}.
func (c *Client) Commit(ctx context.Context, call tools.Call, operationID string) (*structpb.Value, error) {
	if operationID == "" {
		return nil, errors.New("commit needs an operation ID (the write's idempotency key); nothing was sent")
	}
	c.commitMu.Lock()
	prev := c.commits[operationID]
	if prev != nil && !prev.failed() {
		c.commitMu.Unlock()
		select {
		case <-prev.done:
		case <-ctx.Done():
			return nil, fmt.Errorf("operation %s is being committed by another call, which has not answered: %w", operationID, ctx.Err())
		}
		if prev.err != nil {
			return nil, prev.err
		}
		return proto.Clone(prev.receipt).(*structpb.Value), nil
	}
	cur := &commit{done: make(chan struct{})}
	c.commits[operationID] = cur
	c.commitMu.Unlock()

	cur.receipt, cur.err = c.commitOnce(ctx, call, operationID)
	close(cur.done)
	if cur.err != nil {
		return nil, cur.err
	}
	return proto.Clone(cur.receipt).(*structpb.Value), nil
}

// commitOnce makes a commit's call.
func (c *Client) commitOnce(ctx context.Context, call tools.Call, operationID string) (*structpb.Value, error) {
	t, err := c.tool(ctx, call.Tool)
	if err != nil {
		return nil, err
	}
	if call.Preview != nil {
		if err := c.samePreview(t, call); err != nil {
			return nil, err
		}
	}
	out, err := c.call(ctx, t, call.Args, sdk.Meta{MetaOperationID: operationID})
	if err != nil {
		return nil, err
	}
	return structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
		"operation_id": structpb.NewStringValue(operationID),
		"output":       out,
	}}), nil
}

// samePreview refuses a commit whose approved preview describes another
// call than the one to be made.
func (c *Client) samePreview(t *sdk.Tool, call tools.Call) error {
	want, err := c.preview(t, call.Args)
	if err != nil {
		return err
	}
	got := call.Preview.GetStructValue().GetFields()
	for _, k := range []string{"server", "tool", "arguments"} {
		if !proto.Equal(got[k], want.GetStructValue().GetFields()[k]) {
			return fmt.Errorf("the approved preview's %s differs from the call to commit, so nothing was sent; propose the call again", k)
		}
	}
	return nil
}

// call calls an MCP tool and turns its result into a value: the structured
// content when there is one, else the text blocks joined by newlines. A
// result flagged isError is a *ToolError.
func (c *Client) call(ctx context.Context, t *sdk.Tool, args *structpb.Struct, meta sdk.Meta) (*structpb.Value, error) {
	full := c.name + "." + t.Name
	s, err := c.live(ctx)
	if err != nil {
		return nil, err
	}
	res, err := s.cs.CallTool(ctx, &sdk.CallToolParams{Name: t.Name, Arguments: argsOf(args).AsMap(), Meta: meta})
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s did not answer before its context ended, so whether it had an effect is unknown: %w", full, ctx.Err())
		}
		return nil, c.callError(s, "tools/call "+t.Name, err)
	}
	c.succeeded()
	if res.IsError {
		return nil, &ToolError{Tool: full, Text: contentText(res.Content)}
	}
	if res.NeedsInput() {
		return nil, fmt.Errorf("%s asks for input from the client, which rein does not provide; whether it had an effect is unknown", full)
	}
	if res.StructuredContent != nil {
		data, err := json.Marshal(res.StructuredContent)
		if err != nil {
			return nil, fmt.Errorf("%s: structured content: %w", full, err)
		}
		v := &structpb.Value{}
		if err := v.UnmarshalJSON(data); err != nil {
			return nil, fmt.Errorf("%s: structured content: %w", full, err)
		}
		return v, nil
	}
	return structpb.NewStringValue(contentText(res.Content)), nil
}

// callError is an error of session s, not of a tool. A connection that
// closed (the server stopped, or lost the session) marks s dead, so that
// the next call reconnects.
func (c *Client) callError(s *session, what string, err error) error {
	if errors.Is(err, sdk.ErrConnectionClosed) || errors.Is(err, sdk.ErrSessionMissing) || errors.Is(err, io.EOF) {
		s.markBroken()
		return &unreachableError{cause: err, msg: fmt.Sprintf("MCP server %q is unreachable: the connection closed during %s, before an answer (the server stopped?), so whether the call had an effect is unknown; rein reconnects at the next call, so it may be tried again (%v)%s",
			c.name, what, err, stderrNote(c.stderr))}
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return &unreachableError{cause: err, msg: fmt.Sprintf("MCP server %q is unreachable: %s: the HTTP request failed (%v); the server may be down or restarting, so it may be tried again in a moment",
			c.name, what, err)}
	}
	return fmt.Errorf("MCP server %q: %s: %w", c.name, what, err)
}

// ToolError is a tool's own report of failure (a result with isError set).
// Its message is the tool's text, for the model to read.
type ToolError struct {
	Tool string // the rein name
	Text string
}

func (e *ToolError) Error() string {
	if e.Text == "" {
		return e.Tool + " reported an error and gave no message"
	}
	return e.Text
}

// contentText is a result's content as text: text blocks as they are, other
// blocks described in brackets, joined by newlines.
func contentText(content []sdk.Content) string {
	parts := make([]string, 0, len(content))
	for _, b := range content {
		switch b := b.(type) {
		case *sdk.TextContent:
			parts = append(parts, b.Text)
		case *sdk.ImageContent:
			parts = append(parts, fmt.Sprintf("[%s image, %d bytes, not shown]", b.MIMEType, len(b.Data)))
		case *sdk.AudioContent:
			parts = append(parts, fmt.Sprintf("[%s audio, %d bytes, not shown]", b.MIMEType, len(b.Data)))
		case *sdk.ResourceLink:
			parts = append(parts, fmt.Sprintf("[resource %s %s]", b.Name, b.URI))
		case *sdk.EmbeddedResource:
			switch r := b.Resource; {
			case r == nil:
			case r.Text != "":
				parts = append(parts, r.Text)
			default:
				parts = append(parts, fmt.Sprintf("[resource %s, %s, %d bytes, not shown]", r.URI, r.MIMEType, len(r.Blob)))
			}
		default:
			parts = append(parts, fmt.Sprintf("[%T content, not shown]", b))
		}
	}
	return strings.Join(parts, "\n")
}
