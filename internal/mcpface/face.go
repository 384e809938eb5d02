// Package mcpface is rein's face for agents and IDEs speaking the Model
// Context Protocol (docs/mcp.md): a tool per task of the catalog, tools
// that read and decide runs, run resources, progress, and elicitation that
// asks the person behind an MCP client to answer or approve a run it
// started.
//
// The face decides nothing: every tool call is a call of RunService, made
// through a client the caller gives (in rein serve, an in-process
// connection to the node's own gRPC server, so that the same
// interceptors judge it) with the session's credentials. What the API
// refuses, the tool reports as an error, and nothing changes.
//
// One mcp.Server is built per session (Session), for the principal whose
// credentials opened it: its tools are the tasks that principal may start
// and the calls its roles allow.
package mcpface

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/auth"
	"github.com/reinhq/rein/internal/version"
)

// Options configure the face.
type Options struct {
	// Runs is the RunService every tool call goes through; required.
	Runs reinv1.RunServiceClient
	// Logger logs what the face does in the background (elicitations);
	// nil logs nothing.
	Logger *slog.Logger
	// StartWait is how long a start tool waits for the run to pause or
	// end before it answers with the run still running; 0 means 10s.
	StartWait time.Duration
}

// Face builds the MCP server of each session.
type Face struct {
	opts Options

	// mu guards live.
	mu   sync.Mutex
	live map[*session]struct{} // sessions open, for Refresh
}

// New returns a face over opts.Runs.
func New(opts Options) *Face {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.StartWait <= 0 {
		opts.StartWait = 10 * time.Second
	}
	return &Face{opts: opts, live: map[*session]struct{}{}}
}

// session is one MCP session's view of rein: whose credentials its calls
// carry, and the runs it attends to.
type session struct {
	face *Face
	// authorization is the value of the authorization header each call
	// carries ("Bearer TOKEN"); "" sends none (rein mcp, whose client
	// carries its own).
	authorization string
	caller        auth.Principal

	// server is the session's MCP server.
	server *mcp.Server

	// startMu serialises changes of the start tools; started is each
	// start tool offered, by name, with the task it was made from.
	startMu sync.Mutex
	started map[string]*reinv1.Task

	// mu guards ctx, end, id, attending and subscriptions.
	mu            sync.Mutex
	ctx           context.Context               // ends when the MCP session closes
	end           context.CancelFunc            // ends ctx
	id            string                        // the MCP session's ID
	attending     map[string]bool               // runs whose pauses this session is asked about
	subscriptions map[string]context.CancelFunc // resource URI → its watch
}

// Session builds the MCP server of a session whose calls carry
// authorization ("" for none). It asks the API whom the credentials name
// (GetServerInfo) and which tasks they may start (ListTasks); an error is
// the API's refusal.
func (f *Face) Session(ctx context.Context, authorization string) (*mcp.Server, error) {
	s := &session{face: f, authorization: authorization, attending: map[string]bool{}}
	info, err := f.opts.Runs.GetServerInfo(s.out(ctx), &reinv1.GetServerInfoRequest{})
	if err != nil {
		return nil, err
	}
	s.caller = auth.Principal{ID: info.GetCaller().GetPrincipal(), Tenant: info.GetCaller().GetTenant()}
	for _, r := range info.GetCaller().GetRoles() {
		s.caller.Roles = append(s.caller.Roles, auth.Role(r))
	}
	tasks, err := s.tasks(ctx)
	if err != nil {
		return nil, err
	}
	srv := mcp.NewServer(implementation(), &mcp.ServerOptions{
		Instructions: "rein runs AI-agent tasks under budgets and approvals. start_<task> starts a task of the catalog; " +
			"a run that pauses waits for approve, deny, revise, answer or raise_budget. rein://runs/{id} is a run's state.",
		InitializedHandler: s.initialized,
		SubscribeHandler:   s.subscribe,
		UnsubscribeHandler: s.unsubscribe,
		HasResources:       true,
		HasTools:           true,
	})
	s.server = srv
	s.addTools(srv, tasks)
	s.addResources(srv)
	return srv, nil
}

// sessions is the open sessions now, to go through without f.mu.
func (f *Face) sessions() []*session {
	f.mu.Lock()
	defer f.mu.Unlock()
	live := make([]*session, 0, len(f.live))
	for s := range f.live {
		live = append(live, s)
	}
	return live
}

// Refresh offers each open session the start tools of the catalog as it
// now stands for its principal (call it when the catalog is reloaded):
// tools of tasks added or changed are added, those of tasks gone are
// removed, and the session's client gets notifications/tools/list_changed.
// A session whose tasks cannot be listed keeps its tools.
func (f *Face) Refresh(ctx context.Context) {
	for _, s := range f.sessions() {
		tasks, err := s.tasks(ctx)
		if err != nil {
			f.opts.Logger.Info("mcp: a session's tasks were not refreshed", "principal", s.caller.ID, "error", err)
			continue
		}
		s.setStartTools(tasks)
	}
}

// closing ends the attendance of the open session named id, when user
// ("" with no credentials to check) is its principal, before the SDK closes
// it: the SDK's close waits for the session's calls in flight, among them
// an elicitation that waits for an answer the closing client will never
// send, and would wait forever for the session's context, which ends only
// once the close is done.
func (f *Face) closing(id, user string) {
	if id == "" {
		return
	}
	for _, s := range f.sessions() {
		s.mu.Lock()
		match := s.id == id && (user == "" || user == s.caller.Tenant+"/"+s.caller.ID)
		end := s.end
		s.mu.Unlock()
		if match && end != nil {
			end()
		}
	}
}

// tasks lists the tasks the session's principal may start.
func (s *session) tasks(ctx context.Context) ([]*reinv1.Task, error) {
	if !s.may("ListTasks") || !s.may("StartRun") {
		return nil, nil
	}
	resp, err := s.face.opts.Runs.ListTasks(s.out(ctx), &reinv1.ListTasksRequest{})
	if err != nil {
		return nil, err
	}
	return resp.GetTasks(), nil
}

// implementation is how rein names itself to MCP clients.
func implementation() *mcp.Implementation {
	return &mcp.Implementation{Name: "rein", Version: version.Get().GetVersion()}
}

// out is ctx with the session's credentials for an outgoing call.
func (s *session) out(ctx context.Context) context.Context {
	if s.authorization == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", s.authorization)
}

// may reports whether the session's principal holds the role RunService's
// method needs: a tool it may not call is not offered (and the API would
// refuse it anyway).
func (s *session) may(method string) bool {
	role, err := auth.Required("/" + reinv1.RunService_ServiceDesc.ServiceName + "/" + method)
	return err == nil && s.caller.Has(role)
}

// bind notes the MCP session the server serves, once: the runs it attends
// to are let go when it closes.
func (s *session) bind(ss *mcp.ServerSession) context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx == nil {
		ctx, cancel := context.WithCancel(context.Background())
		s.ctx, s.end, s.id = ctx, cancel, ss.ID()
		s.face.mu.Lock()
		s.face.live[s] = struct{}{}
		s.face.mu.Unlock()
		go func() {
			_ = ss.Wait()
			cancel()
			s.face.mu.Lock()
			delete(s.face.live, s)
			s.face.mu.Unlock()
		}()
	}
	return s.ctx
}

// requestIDPrefix begins the request ID of every call the face makes, so
// that a run started through it is known by its request_id.
const requestIDPrefix = "mcp-"

// requestID is a fresh idempotency key.
func requestID() string { return requestIDPrefix + rand.Text() }

// asJSON is m in protojson, as a tool's text.
func asJSON(m proto.Message) string {
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		return fmt.Sprintf("{\"error\": %q}", err.Error())
	}
	return string(b)
}

// refused is the API's refusal as a tool's error result: the client (and
// its model) reads the code and the message; nothing was changed.
func refused(err error) *mcp.CallToolResult {
	st := status.Convert(err)
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: st.Code().String() + ": " + st.Message()}}}
}
