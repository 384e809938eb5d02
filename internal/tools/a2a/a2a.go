// Package a2a makes the skills of a remote A2A agent (the Agent2Agent
// protocol, v1.0; docs/a2a.md, "rein as a client") rein tools, over the
// official Go SDK's client. A Client reads the agent's card once, at
// Open, and is a tools.Executor: the agent's skill S is the rein tool
// NAME.S, NAME being the agent's registration name, and NAME.task follows
// (or replies to) a task one of them started.
//
// Invariants:
//   - The client never decides a call's tier: the contract's grant does
//     (the harness routes it), whatever the card says of a skill. Propose
//     never calls the agent: the preview is the message approving sends.
//   - A call's message has IDs derived from the call (its run and call ID,
//     or a commit's operation ID): the same call always sends the same
//     message, in the same context. Before sending, the client looks the
//     context's task up (ListTasks by context ID, rein's face included)
//     and, when there is one, follows it instead of sending again; an
//     agent that does not list tasks is sent the same message again
//     (which rein's face would turn into the run the first one started:
//     its request ID is the context and message IDs). A call cut by a
//     crash and run again so follows the one remote task; the agent runs
//     the message once.
//   - A call follows its task until it ends or waits for its client
//     (input-required, auth-required): completed is the tool's result,
//     with the task's artifacts; failed, rejected and canceled are an
//     error; a wait is a result that says what the agent waits for, for
//     the run's model (NAME.task replies) or a person on the agent's side.
//     Every result names the remote task's ID and context ID.
//   - The bearer token is sent on every request and is nowhere in what a
//     call returns.
package a2a

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/reinhq/rein/internal/tools"
)

// InputSchemaExtension is the URI of the card extension whose params map
// each skill's ID to the JSON Schema of its inputs, as rein's A2A face
// writes it.
const InputSchemaExtension = "https://github.com/reinhq/rein/blob/main/docs/a2a.md#input-schemas"

// Keys the client uses on rein's face: the skill a message starts (its
// metadata), the sequence a task reflects (its metadata) and the header a
// resubscription gives it in, so that the stream starts after it.
const (
	skillKey    = "skill"
	sequenceKey = "rein.sequence"
	afterHeader = "Rein-After-Sequence"
)

// TaskTool is the name, after NAME., of the tool that follows or replies
// to a task of the agent.
const TaskTool = "task"

// Options configure a Client.
type Options struct {
	// Token is the bearer token sent to the agent; "" sends none.
	Token string
	// HTTPClient carries the requests; nil is http.DefaultClient.
	HTTPClient *http.Client
}

// Client is the connection to one A2A agent, and a tools.Executor over
// its skills. It is safe for concurrent use.
type Client struct {
	name  string
	url   string
	token string
	cli   *a2aclient.Client
	// skills are the agent's skill IDs by rein tool name; specs their
	// specs, NAME.task last.
	skills map[string]string
	specs  []tools.Spec
}

var (
	_ tools.Executor = (*Client)(nil)
	_ tools.Looker   = (*Client)(nil)
)

// Open reads the card of the agent at baseURL (its extended card, when
// the agent has one and a token is given) and returns a client over its
// skills, named name.SKILL. An agent that is down, or that refuses the
// token, is an error.
func Open(ctx context.Context, name, baseURL string, opts Options) (*Client, error) {
	if err := tools.CheckServerName(name); err != nil {
		return nil, err
	}
	hc := opts.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	var ropts []agentcard.ResolveOption
	if opts.Token != "" {
		ropts = append(ropts, agentcard.WithRequestHeader("Authorization", "Bearer "+opts.Token))
	}
	card, err := agentcard.NewResolver(hc).Resolve(ctx, baseURL, ropts...)
	if err != nil {
		return nil, fmt.Errorf("read the agent card of %s: %w", baseURL, err)
	}
	cli, err := a2aclient.NewFromCard(ctx, card, a2aclient.WithJSONRPCTransport(hc), a2aclient.WithRESTTransport(hc))
	if err != nil {
		return nil, fmt.Errorf("connect to the agent at %s: %w", baseURL, err)
	}
	c := &Client{name: name, url: baseURL, token: opts.Token, cli: cli}
	if card.Capabilities.ExtendedAgentCard && opts.Token != "" {
		ext, err := cli.GetExtendedAgentCard(c.auth(ctx, 0), &sdk.GetExtendedAgentCardRequest{})
		if err != nil {
			_ = cli.Destroy()
			return nil, fmt.Errorf("read the extended agent card of %s (is the token right?): %w", baseURL, err)
		}
		card = ext
	}
	c.index(card)
	return c, nil
}

// index builds the tools of card's skills.
func (c *Client) index(card *sdk.AgentCard) {
	schemas := map[string]any{}
	for _, ext := range card.Capabilities.Extensions {
		if ext.URI == InputSchemaExtension {
			schemas = ext.Params
		}
	}
	c.skills = map[string]string{}
	for _, s := range card.Skills {
		full := c.name + "." + s.ID
		if s.ID == TaskTool || tools.CheckName(full) != nil || c.skills[full] != "" {
			continue // no rein name for it; it cannot be granted
		}
		schema := &structpb.Struct{}
		if m, ok := schemas[s.ID].(map[string]any); ok {
			if st, err := structpb.NewStruct(m); err == nil {
				schema = st
			}
		}
		c.skills[full] = s.ID
		desc := strings.TrimSpace(s.Description + " (skill " + s.ID + " of the A2A agent " + card.Name + " at " + c.url + ")")
		c.specs = append(c.specs, tools.Spec{Name: full, Description: desc, InputSchema: schema, Server: "a2a " + c.name})
	}
	taskSchema, _ := structpb.NewStruct(map[string]any{"type": "object", "required": []any{"task_id"}, "properties": map[string]any{
		"task_id": map[string]any{"type": "string", "description": "the task's ID, as a call of one of the agent's skills returned it"},
		"reply":   map[string]any{"description": "what to tell the task when it waits for input: text, or an object (a data part, e.g. a decision on its proposal); none to follow it only"},
	}})
	c.specs = append(c.specs, tools.Spec{Name: c.name + "." + TaskTool, InputSchema: taskSchema, Server: "a2a " + c.name,
		Description: "Follow a task of the A2A agent at " + c.url + " until it ends or waits again, replying to it first when reply is given."})
}

// Name is the agent's registration name, the prefix of its tools' names.
func (c *Client) Name() string { return c.name }

// Close ends the client.
func (c *Client) Close() error { return c.cli.Destroy() }

// List implements tools.Executor.
func (c *Client) List(context.Context) ([]tools.Spec, error) { return c.specs, nil }

// Read implements tools.Executor: it sends the call's message (or follows
// the task it started) and follows the task.
func (c *Client) Read(ctx context.Context, call tools.Call) (*structpb.Value, error) {
	return c.call(ctx, call, call.RunID+"\x00"+call.CallID)
}

// Propose implements tools.Executor without calling the agent.
func (c *Client) Propose(_ context.Context, call tools.Call) (*structpb.Value, error) {
	if call.Tool == c.name+"."+TaskTool {
		return structpb.NewValue(map[string]any{"agent": c.url, "task_id": call.Args.GetFields()["task_id"].AsInterface(),
			"reply": call.Args.GetFields()["reply"].AsInterface(), "note": "approving sends this reply to the remote task once, then follows it"})
	}
	skill, ok := c.skills[call.Tool]
	if !ok {
		return nil, c.noTool(call.Tool)
	}
	return structpb.NewValue(map[string]any{"agent": c.url, "skill": skill, "message": call.Args.AsMap(),
		"note": "approving sends this message to the remote agent once; the agent may ask for approvals of its own"})
}

// Commit implements tools.Executor: as Read, its message's IDs derived
// from the operation ID.
func (c *Client) Commit(ctx context.Context, call tools.Call, operationID string) (*structpb.Value, error) {
	out, err := c.call(ctx, call, "op\x00"+operationID)
	var ended *EndedError
	if errors.As(err, &ended) && ended.State != sdk.TaskStateFailed {
		// Rejected or canceled: the agent says it did not do it.
		return nil, fmt.Errorf("%w: %w", tools.ErrRefused, err)
	}
	return out, err
}

// Lookup implements tools.Looker: the task the operation's message
// started, followed, when the agent lists tasks; tools.ErrNoLookup when
// it does not, for rein to leave the write to a person
// rather than send it unasked.
func (c *Client) Lookup(ctx context.Context, call tools.Call, operationID string) (*structpb.Value, bool, error) {
	contextID, _ := ids("op\x00" + operationID)
	t, listed, err := c.find(ctx, contextID)
	if err != nil {
		return nil, false, err
	}
	if !listed {
		return nil, false, fmt.Errorf("%w: the A2A agent at %s does not list tasks by context", tools.ErrNoLookup, c.url)
	}
	if t == nil {
		return nil, false, nil
	}
	out, err := c.settle(ctx, t)
	return out, err == nil, err
}

func (c *Client) noTool(tool string) error {
	return fmt.Errorf("%w: %q is not a skill of the A2A agent %s at %s", tools.ErrNoTool, tool, c.name, c.url)
}

// ids are the context and message IDs of the call whose key is key.
func ids(key string) (contextID, messageID string) {
	sum := sha256.Sum256([]byte(key))
	h := hex.EncodeToString(sum[:16])
	return "rein-" + h, "rein-" + h + "-1"
}

// call runs a call of a skill, or of NAME.task.
func (c *Client) call(ctx context.Context, call tools.Call, key string) (*structpb.Value, error) {
	if call.Tool == c.name+"."+TaskTool {
		return c.taskCall(ctx, call, key)
	}
	skill, ok := c.skills[call.Tool]
	if !ok {
		return nil, c.noTool(call.Tool)
	}
	contextID, messageID := ids(key)
	t, _, err := c.find(ctx, contextID)
	if err != nil {
		return nil, err
	}
	if t == nil {
		m := sdk.NewMessage(sdk.MessageRoleUser, sdk.NewDataPart(call.Args.AsMap()))
		m.ID, m.ContextID = messageID, contextID
		m.SetMeta(skillKey, skill)
		res, err := c.cli.SendMessage(c.auth(ctx, 0), &sdk.SendMessageRequest{Message: m, Config: &sdk.SendMessageConfig{ReturnImmediately: true}})
		if err != nil {
			return nil, c.failed("send the message to skill "+skill, err)
		}
		switch r := res.(type) {
		case *sdk.Message:
			return structpb.NewValue(map[string]any{"context_id": r.ContextID, "message": parts(r.Parts)})
		case *sdk.Task:
			t = r
		default:
			return nil, fmt.Errorf("the A2A agent at %s answered the message with %T, neither a task nor a message", c.url, res)
		}
	}
	return c.settle(ctx, t)
}

// taskCall follows the task call.Args names, replying to it first when
// the call gives a reply.
func (c *Client) taskCall(ctx context.Context, call tools.Call, key string) (*structpb.Value, error) {
	id := call.Args.GetFields()["task_id"].GetStringValue()
	if id == "" {
		return nil, errors.New("name the task: task_id, as a call of one of the agent's skills returned it")
	}
	t, err := c.cli.GetTask(c.auth(ctx, 0), &sdk.GetTaskRequest{ID: sdk.TaskID(id)})
	if err != nil {
		return nil, c.failed("read task "+id, err)
	}
	if reply, ok := call.Args.GetFields()["reply"]; ok && t.Status.State == sdk.TaskStateInputRequired {
		_, messageID := ids(key)
		var p *sdk.Part
		if s, ok := reply.GetKind().(*structpb.Value_StringValue); ok {
			p = sdk.NewTextPart(s.StringValue)
		} else {
			p = sdk.NewDataPart(reply.AsInterface())
		}
		m := sdk.NewMessage(sdk.MessageRoleUser, p)
		m.ID, m.ContextID, m.TaskID = messageID, t.ContextID, t.ID
		res, err := c.cli.SendMessage(c.auth(ctx, 0), &sdk.SendMessageRequest{Message: m, Config: &sdk.SendMessageConfig{ReturnImmediately: true}})
		if err != nil {
			return nil, c.failed("reply to task "+id, err)
		}
		if r, ok := res.(*sdk.Task); ok {
			t = r
		}
	}
	return c.settle(ctx, t)
}

// maxListPages bounds the pages find reads: an agent may answer a page
// with no task and a next page (rein's face reads a bounded number of
// runs a call), but not without end.
const maxListPages = 100

// find is the task of contextID, when the agent lists tasks (listed); nil
// when it lists none. It reads pages until one holds a task or there is
// no next page.
func (c *Client) find(ctx context.Context, contextID string) (t *sdk.Task, listed bool, err error) {
	req := &sdk.ListTasksRequest{ContextID: contextID, PageSize: 1, IncludeArtifacts: true}
	for range maxListPages {
		resp, err := c.cli.ListTasks(c.auth(ctx, 0), req)
		if err != nil {
			if ctx.Err() != nil {
				return nil, false, context.Cause(ctx)
			}
			if req.PageToken != "" {
				return nil, true, c.failed("list the tasks of context "+contextID, err)
			}
			return nil, false, nil // the agent does not list tasks
		}
		if len(resp.Tasks) > 0 {
			return resp.Tasks[0], true, nil
		}
		if resp.NextPageToken == "" || resp.NextPageToken == req.PageToken {
			return nil, true, nil
		}
		req.PageToken = resp.NextPageToken
	}
	return nil, true, fmt.Errorf("the A2A agent at %s listed %d pages of context %s without its task or an end; the call is not sent again until a person looks at the agent", c.url, maxListPages, contextID)
}

// settle follows t and returns its outcome as a tool result.
func (c *Client) settle(ctx context.Context, t *sdk.Task) (*structpb.Value, error) {
	t, err := c.follow(ctx, t)
	if err != nil {
		return nil, err
	}
	return outcome(c.url, t)
}

// settled reports whether a task in s is where a call stops following it.
func settled(s sdk.TaskState) bool {
	return s.Terminal() || s == sdk.TaskStateInputRequired || s == sdk.TaskStateAuthRequired
}

// follow subscribes to t until it is settled, then reads it whole. The
// subscription starts after the sequence t reflects (rein's face), so a
// past pause is not taken for the present; the task read at the end is
// the judge, and one not settled yet is followed again, after a backoff
// when its stream ended without news.
func (c *Client) follow(ctx context.Context, t *sdk.Task) (*sdk.Task, error) {
	wait := 100 * time.Millisecond
	for !settled(t.Status.State) {
		news := false
		for ev, err := range c.cli.SubscribeToTask(c.auth(ctx, sequenceOf(t.Metadata)), &sdk.SubscribeToTaskRequest{ID: t.ID}) {
			if err != nil {
				return nil, c.failed("follow task "+string(t.ID), err)
			}
			if s, ok := stateOf(ev); ok {
				news = true
				if settled(s) {
					break
				}
			}
		}
		got, err := c.cli.GetTask(c.auth(ctx, 0), &sdk.GetTaskRequest{ID: t.ID})
		if err != nil {
			return nil, c.failed("read task "+string(t.ID), err)
		}
		t = got
		if !news && !settled(t.Status.State) {
			select {
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			case <-time.After(wait):
			}
			wait = min(2*wait, 2*time.Second)
		}
	}
	return t, nil
}

func stateOf(ev sdk.Event) (sdk.TaskState, bool) {
	switch e := ev.(type) {
	case *sdk.Task:
		return e.Status.State, true
	case *sdk.TaskStatusUpdateEvent:
		return e.Status.State, true
	}
	return "", false
}

// sequenceOf is the rein sequence in a task's metadata, 0 for none.
func sequenceOf(meta map[string]any) uint64 {
	switch n := meta[sequenceKey].(type) {
	case float64:
		return uint64(n)
	case uint64:
		return n
	}
	return 0
}

// auth is ctx carrying the token and, when after is not 0, the sequence a
// subscription starts after.
func (c *Client) auth(ctx context.Context, after uint64) context.Context {
	p := a2aclient.ServiceParams{}
	if c.token != "" {
		p.Append("Authorization", "Bearer "+c.token)
	}
	if after > 0 {
		p.Append(afterHeader, strconv.FormatUint(after, 10))
	}
	return a2aclient.AttachServiceParams(ctx, p)
}

// failed is err of a request to the agent, saying what was asked.
func (c *Client) failed(what string, err error) error {
	return fmt.Errorf("A2A agent %s at %s: %s: %w", c.name, c.url, what, err)
}

// EndedError is a remote task that failed, was rejected or was canceled.
type EndedError struct {
	TaskID, ContextID string
	State             sdk.TaskState
	Message           string
}

func (e *EndedError) Error() string {
	s := "remote task " + e.TaskID + " (context " + e.ContextID + ") ended " + stateName(e.State)
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

func stateName(s sdk.TaskState) string {
	return strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(string(s), "TASK_STATE_"), "_", "-"))
}

// outcome is a settled task as a tool result: completed, or waiting; an
// EndedError for the other ends.
func outcome(agent string, t *sdk.Task) (*structpb.Value, error) {
	var msg string
	var msgParts []any
	if m := t.Status.Message; m != nil {
		msgParts = parts(m.Parts)
		for _, p := range m.Parts {
			if s := p.Text(); s != "" {
				msg = strings.TrimSpace(msg + "\n" + s)
			}
		}
	}
	switch t.Status.State {
	case sdk.TaskStateFailed, sdk.TaskStateRejected, sdk.TaskStateCanceled:
		return nil, &EndedError{TaskID: string(t.ID), ContextID: t.ContextID, State: t.Status.State, Message: msg}
	}
	out := map[string]any{"task_id": string(t.ID), "context_id": t.ContextID, "state": stateName(t.Status.State)}
	if t.Status.State == sdk.TaskStateCompleted {
		var arts []any
		for _, a := range t.Artifacts {
			arts = append(arts, map[string]any{"name": a.Name, "parts": parts(a.Parts)})
		}
		out["artifacts"] = arts
	} else {
		out["waiting_for"] = msgParts
		out["note"] = "the remote agent at " + agent + " waits for its client: reply with the agent's task tool (task_id, reply), or a person acts on the agent's side, then follow it with the task tool"
	}
	return structpb.NewValue(out)
}

// parts are message or artifact parts as values: text as a string, data
// as itself, a file by its name and URL.
func parts(ps sdk.ContentParts) []any {
	out := []any{}
	for _, p := range ps {
		switch c := p.Content.(type) {
		case sdk.Text:
			out = append(out, string(c))
		case sdk.Data:
			out = append(out, jsonable(c.Value))
		default:
			out = append(out, map[string]any{"file": p.Filename, "url": string(p.URL())})
		}
	}
	return out
}

// jsonable is v with the number types structpb does not take as float64.
func jsonable(v any) any {
	if _, err := structpb.NewValue(v); err != nil {
		return fmt.Sprint(v)
	}
	return v
}
