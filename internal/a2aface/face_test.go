package a2aface_test

// Tests of the A2A face with the official Go SDK's client against a real
// node on a real bbolt file, the refund example's task (its scripted
// model and fixture tools), and principals from a tokens file. Nothing
// sleeps: the tests read the streams to the updates they wait for, under
// deadlines.

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/a2aface"
	"github.com/reinhq/rein/server"
	"github.com/reinhq/rein/server/facetest"
)

type face struct {
	url  string
	runs reinv1.RunServiceClient
}

// refundTaskFile is examples/refund as a catalog task, with the
// description its card's skill shows.
func refundTaskFile(t *testing.T) string {
	t.Helper()
	task := facetest.RefundTask(t)
	task["description"] = "Refund a duplicate charge on an invoice."
	return facetest.JSON(t, task)
}

// startFace serves a node with the refund task and the A2A face in
// front of it, its calls going in-process through the node's gRPC server.
// Principals: starter (operator, approver) and clerk (operator) of tenant
// acme, other (operator, approver) of tenant globex; a token is the ID +
// "-token".
func startFace(t *testing.T) *face {
	t.Helper()
	_, tasks := facetest.Catalog(t, map[string]string{"refund.json": refundTaskFile(t)})
	directory := facetest.Directory(t,
		facetest.Principal{ID: "starter", Tenant: "acme", Roles: []string{"operator", "approver"}},
		facetest.Principal{ID: "clerk", Tenant: "acme", Roles: []string{"operator"}},
		facetest.Principal{ID: "other", Tenant: "globex", Roles: []string{"operator", "approver"}})
	node, cc := facetest.Node(t, server.Config{Tools: facetest.RefundTools(t), Directory: directory, Tasks: tasks, Resume: true})
	runs := reinv1.NewRunServiceClient(cc)
	f := a2aface.New(a2aface.Options{Runs: runs, Authenticate: node.AuthenticateHTTP, Bearer: true, PublicTasks: func() []*reinv1.Task {
		got, err := runs.ListTasks(facetest.As(context.Background(), "starter"), &reinv1.ListTasksRequest{})
		if err != nil {
			t.Error(err)
			return nil
		}
		return got.GetTasks()
	}})
	mux := http.NewServeMux()
	for path, h := range f.Mounts() {
		mux.Handle(path, h)
	}
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	return &face{url: hs.URL, runs: runs}
}

// as is ctx carrying who's token, to the SDK's client and to RunService.
func as(ctx context.Context, who string) context.Context {
	ctx = a2aclient.AttachServiceParams(ctx, a2aclient.ServiceParams{"Authorization": {"Bearer " + who + "-token"}})
	return facetest.As(ctx, who)
}

func deadline(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// client is the SDK's client made from the face's card.
func (f *face) client(t *testing.T, ctx context.Context) (*a2aclient.Client, *a2a.AgentCard) {
	t.Helper()
	card, err := agentcard.NewResolver(http.DefaultClient).Resolve(ctx, f.url)
	if err != nil {
		t.Fatal(err)
	}
	c, err := a2aclient.NewFromCard(ctx, card)
	if err != nil {
		t.Fatal(err)
	}
	return c, card
}

func refundMessage() *a2a.Message {
	m := a2a.NewMessage(a2a.MessageRoleUser, a2a.NewDataPart(map[string]any{"invoice_id": "INV-42"}))
	m.SetMeta("skill", "refund")
	return m
}

func seqOf(t *testing.T, ev a2a.Event) uint64 {
	t.Helper()
	var meta map[string]any
	switch e := ev.(type) {
	case *a2a.TaskStatusUpdateEvent:
		meta = e.Metadata
	case *a2a.TaskArtifactUpdateEvent:
		meta = e.Metadata
	case *a2a.Task:
		meta = e.Metadata
	}
	n, ok := meta[a2aface.SequenceKey].(float64)
	if !ok {
		t.Fatalf("%T has no %s: %v", ev, a2aface.SequenceKey, meta)
	}
	return uint64(n)
}

// stream reads events until the stream ends.
func stream(t *testing.T, events func(func(a2a.Event, error) bool)) []a2a.Event {
	t.Helper()
	var out []a2a.Event
	for ev, err := range events {
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		out = append(out, ev)
	}
	return out
}

func lastState(t *testing.T, evs []a2a.Event) (a2a.TaskState, *a2a.Message) {
	t.Helper()
	for i := len(evs) - 1; i >= 0; i-- {
		switch e := evs[i].(type) {
		case *a2a.TaskStatusUpdateEvent:
			return e.Status.State, e.Status.Message
		case *a2a.Task:
			return e.Status.State, e.Status.Message
		}
	}
	t.Fatal("no status in the stream")
	return "", nil
}

// proposalOf is the approval data of an input-required status message.
func proposalOf(t *testing.T, m *a2a.Message) map[string]any {
	t.Helper()
	if m == nil {
		t.Fatal("input-required with no status message")
	}
	for _, p := range m.Parts {
		if d, ok := p.Content.(a2a.Data); ok {
			if obj, ok := d.Value.(map[string]any); ok && obj["kind"] == "approval" {
				return obj
			}
		}
	}
	t.Fatalf("the status message has no approval: %+v", m)
	return nil
}

func writesCommitted(t *testing.T, ctx context.Context, runs reinv1.RunServiceClient, runID string) int {
	t.Helper()
	evs, err := runs.ListEvents(ctx, &reinv1.ListEventsRequest{RunId: runID, PageSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ev := range evs.GetEvents() {
		if ev.GetWriteCommitted() != nil {
			n++
		}
	}
	return n
}

// TestRefundStreamedApprovedCompleted: the card names the refund skill
// and bearer tokens; a message starts it, the stream reaches
// input-required with the proposal, a reply approves it by hash, and the
// task completes with its result as an artifact, the write committed
// once. Every update carries a sequence that grows.
func TestRefundStreamedApprovedCompleted(t *testing.T) {
	f := startFace(t)
	ctx := as(deadline(t), "starter")
	c, card := f.client(t, ctx)
	if len(card.Skills) != 1 || card.Skills[0].ID != "refund" {
		t.Fatalf("card skills %+v, want refund", card.Skills)
	}
	if _, ok := card.SecuritySchemes["bearer"]; !ok {
		t.Errorf("card security schemes %v, want bearer", card.SecuritySchemes)
	}
	if schemas := card.Capabilities.Extensions[0].Params; schemas["refund"] == nil {
		t.Errorf("card input schemas %v, want refund's", schemas)
	}

	evs := stream(t, c.SendStreamingMessage(ctx, &a2a.SendMessageRequest{Message: refundMessage()}))
	first, ok := evs[0].(*a2a.Task)
	if !ok {
		t.Fatalf("first event %T, want the task", evs[0])
	}
	var last uint64
	for _, ev := range evs[1:] {
		if s := seqOf(t, ev); s < last {
			t.Errorf("sequence %d after %d", s, last)
		} else {
			last = s
		}
	}
	st, msg := lastState(t, evs)
	if st != a2a.TaskStateInputRequired {
		t.Fatalf("stream ended at %s, want input-required", st)
	}
	prop := proposalOf(t, msg)

	// Free text never approves.
	free := a2a.NewMessageForTask(a2a.MessageRoleUser, first, a2a.NewTextPart("yes, approve it"))
	if _, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: free}); err == nil {
		t.Fatal("a free-text reply was taken as a decision")
	}

	approve := a2a.NewMessageForTask(a2a.MessageRoleUser, first, a2a.NewDataPart(map[string]any{"decision": "approve", "proposal_hash": prop["hash"]}))
	evs = stream(t, c.SendStreamingMessage(ctx, &a2a.SendMessageRequest{Message: approve}))
	st, _ = lastState(t, evs)
	if st != a2a.TaskStateCompleted {
		t.Fatalf("after approval the stream ended at %s, want completed", st)
	}
	var artifact *a2a.Artifact
	for _, ev := range evs {
		if a, ok := ev.(*a2a.TaskArtifactUpdateEvent); ok {
			artifact = a.Artifact
		}
	}
	if artifact == nil || !strings.Contains(artifact.Parts[0].Text(), "Refunded") {
		t.Fatalf("artifact %+v, want the refund's result", artifact)
	}
	got, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: first.ID})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.State != a2a.TaskStateCompleted || len(got.Artifacts) != 1 || got.ContextID != first.ContextID {
		t.Errorf("tasks/get: %s with %d artifacts in %s, want completed with 1 in %s", got.Status.State, len(got.Artifacts), got.ContextID, first.ContextID)
	}
	if n := writesCommitted(t, ctx, f.runs, string(first.ID)); n != 1 {
		t.Errorf("%d writes committed, want 1", n)
	}
	// The same approval again changes nothing.
	if _, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: approve}); err == nil {
		t.Error("an approval of an ended task was taken")
	}
	if n := writesCommitted(t, ctx, f.runs, string(first.ID)); n != 1 {
		t.Errorf("after a second approval %d writes committed, want 1", n)
	}
}

// TestResubscribeAfterSequence: a subscriber that gives the last sequence
// it saw gets every update after it, none it saw; one that gives none
// gets them all.
func TestResubscribeAfterSequence(t *testing.T) {
	f := startFace(t)
	ctx := as(deadline(t), "starter")
	c, _ := f.client(t, ctx)
	evs := stream(t, c.SendStreamingMessage(ctx, &a2a.SendMessageRequest{Message: refundMessage()}))
	task := evs[0].(*a2a.Task)
	_, msg := lastState(t, evs)
	prop := proposalOf(t, msg)
	approve := a2a.NewMessageForTask(a2a.MessageRoleUser, task, a2a.NewDataPart(map[string]any{"decision": "approve", "proposal_hash": prop["hash"]}))
	if _, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: approve}); err != nil {
		t.Fatal(err)
	}

	all := stream(t, c.SubscribeToTask(ctx, &a2a.SubscribeToTaskRequest{ID: task.ID}))
	var seqs []uint64
	for _, ev := range all[1:] {
		seqs = append(seqs, seqOf(t, ev))
	}
	if len(seqs) < 3 {
		t.Fatalf("a full resubscription carried %d updates (%v), want input-required, working, the artifact and completed", len(seqs), seqs)
	}
	cut := seqs[0]
	rctx := a2aclient.AttachServiceParams(ctx, a2aclient.ServiceParams{"Authorization": {"Bearer starter-token"}, a2aface.AfterHeader: {jsonNumber(cut)}})
	rest := stream(t, c.SubscribeToTask(rctx, &a2a.SubscribeToTaskRequest{ID: task.ID}))
	var want []uint64
	for _, s := range seqs {
		if s > cut {
			want = append(want, s)
		}
	}
	var gotSeqs []uint64
	for _, ev := range rest[1:] {
		gotSeqs = append(gotSeqs, seqOf(t, ev))
	}
	if len(gotSeqs) != len(want) {
		t.Fatalf("after %d: updates at %v, want %v", cut, gotSeqs, want)
	}
	for i := range want {
		if gotSeqs[i] != want[i] {
			t.Fatalf("after %d: updates at %v, want %v", cut, gotSeqs, want)
		}
	}
	bad := a2aclient.AttachServiceParams(ctx, a2aclient.ServiceParams{"Authorization": {"Bearer starter-token"}, a2aface.AfterHeader: {"yesterday"}})
	for _, err := range c.SubscribeToTask(bad, &a2a.SubscribeToTaskRequest{ID: task.ID}) {
		if err == nil {
			t.Fatal("a resubscription after \"yesterday\" was served")
		}
		break
	}
}

func jsonNumber(n uint64) string { b, _ := json.Marshal(n); return string(b) }

// TestCancel cancels a task waiting for approval; a second cancel is
// refused.
func TestCancel(t *testing.T) {
	f := startFace(t)
	ctx := as(deadline(t), "starter")
	c, _ := f.client(t, ctx)
	res, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: refundMessage()})
	if err != nil {
		t.Fatal(err)
	}
	task := res.(*a2a.Task)
	if task.Status.State != a2a.TaskStateInputRequired {
		t.Fatalf("message/send answered %s, want input-required", task.Status.State)
	}
	got, err := c.CancelTask(ctx, &a2a.CancelTaskRequest{ID: task.ID})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.State != a2a.TaskStateCanceled {
		t.Errorf("cancel answered %s, want canceled", got.Status.State)
	}
	if _, err := c.CancelTask(ctx, &a2a.CancelTaskRequest{ID: task.ID}); err == nil {
		t.Error("a canceled task was canceled again")
	}
	if n := writesCommitted(t, ctx, f.runs, string(task.ID)); n != 0 {
		t.Errorf("%d writes committed, want 0", n)
	}
}

// TestRefusals: a principal without the approver role cannot approve;
// another tenant's task is not found; a decision with a wrong hash is
// refused; nothing changes.
func TestRefusals(t *testing.T) {
	f := startFace(t)
	ctx := as(deadline(t), "starter")
	c, _ := f.client(t, ctx)
	res, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: refundMessage()})
	if err != nil {
		t.Fatal(err)
	}
	task := res.(*a2a.Task)
	prop := proposalOf(t, task.Status.Message)
	approve := a2a.NewMessageForTask(a2a.MessageRoleUser, task, a2a.NewDataPart(map[string]any{"decision": "approve", "proposal_hash": prop["hash"]}))

	clerk := as(deadline(t), "clerk")
	if _, err := c.SendMessage(clerk, &a2a.SendMessageRequest{Message: approve}); err == nil {
		t.Error("a principal without the approver role approved")
	}
	other := as(deadline(t), "other")
	if _, err := c.GetTask(other, &a2a.GetTaskRequest{ID: task.ID}); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("another tenant's tasks/get: %v, want not found", err)
	}
	if _, err := c.SendMessage(other, &a2a.SendMessageRequest{Message: approve}); err == nil {
		t.Error("another tenant approved")
	}
	if _, err := c.CancelTask(other, &a2a.CancelTaskRequest{ID: task.ID}); err == nil {
		t.Error("another tenant cancelled")
	}
	wrong := a2a.NewMessageForTask(a2a.MessageRoleUser, task, a2a.NewDataPart(map[string]any{"decision": "approve", "proposal_hash": "sha256:00"}))
	if _, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: wrong}); err == nil {
		t.Error("an approval with the wrong hash was taken")
	}
	got, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: task.ID})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.State != a2a.TaskStateInputRequired || seqOf(t, got) != seqOf(t, task) {
		t.Errorf("after the refusals the task is %s at %d, want input-required at %d", got.Status.State, seqOf(t, got), seqOf(t, task))
	}
	// The approver's approval still goes through.
	if res, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: approve}); err != nil || res.(*a2a.Task).Status.State != a2a.TaskStateCompleted {
		t.Fatalf("the approver's approval: %v, %v", res, err)
	}
}

// post sends a raw body to the JSON-RPC endpoint.
func post(t *testing.T, url, token string, body []byte) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+a2aface.RPCPath, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// TestHostile: no token is 401; malformed JSON-RPC, unknown methods,
// parts of unknown kinds, file parts and 4 MiB messages are JSON-RPC
// errors; no run starts.
func TestHostile(t *testing.T) {
	f := startFace(t)
	ctx := as(deadline(t), "starter")
	send := func(parts string) []byte {
		return []byte(`{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m1","role":"ROLE_USER","metadata":{"skill":"refund"},"parts":` + parts + `}}}`)
	}
	big := `[{"text":"` + strings.Repeat("x", 4<<20) + `"}]`
	cases := []struct {
		name, token string
		body        []byte
		status      int
	}{
		{"no token", "", send(`[{"data":{"invoice_id":"INV-42"}}]`), http.StatusUnauthorized},
		{"wrong token", "nobody", send(`[{"data":{"invoice_id":"INV-42"}}]`), http.StatusUnauthorized},
		{"malformed", "starter-token", []byte(`{"jsonrpc":"2.0","id":1,"method":`), http.StatusOK},
		{"not json-rpc 2.0", "starter-token", []byte(`{"jsonrpc":"1.0","id":1,"method":"GetTask","params":{"id":"x"}}`), http.StatusOK},
		{"unknown method", "starter-token", []byte(`{"jsonrpc":"2.0","id":1,"method":"tasks/explode","params":{}}`), http.StatusOK},
		{"unknown part kind", "starter-token", send(`[{"hologram":"x"}]`), http.StatusOK},
		{"file part", "starter-token", send(`[{"url":"https://example.com/x.pdf"}]`), http.StatusOK},
		{"data not an object", "starter-token", send(`[{"data":[1,2]}]`), http.StatusOK},
		{"unknown skill", "starter-token", []byte(strings.Replace(string(send(`[{"text":"INV-42"}]`)), `"refund"`, `"nope"`, 1)), http.StatusOK},
		{"two data parts", "starter-token", send(`[{"data":{"invoice_id":"INV-42"}},{"data":{"invoice_id":"INV-43"}}]`), http.StatusOK},
		{"inputs against the schema", "starter-token", send(`[{"data":{"invoice":42}}]`), http.StatusOK},
		{"4 MiB", "starter-token", send(big), http.StatusOK},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, body := post(t, f.url, tc.token, tc.body)
			if code != tc.status {
				t.Fatalf("HTTP %d, want %d: %v", code, tc.status, body)
			}
			if body["error"] == nil {
				t.Errorf("no JSON-RPC error: %v", body)
			}
		})
	}
	runs, err := f.runs.ListRuns(ctx, &reinv1.ListRunsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs.GetRuns()) != 0 {
		t.Errorf("%d runs started by refused requests, want 0", len(runs.GetRuns()))
	}
	// The twins: the same request, well formed, starts a run; so does
	// text alone, for a skill whose input is one text field.
	for _, parts := range []string{`[{"data":{"invoice_id":"INV-42"}}]`, `[{"text":"INV-42"}]`} {
		code, body := post(t, f.url, "starter-token", []byte(strings.Replace(string(send(parts)), `"m1"`, `"m-`+parts[3:7]+`"`, 1)))
		if code != http.StatusOK || body["error"] != nil {
			t.Fatalf("a good message %s: HTTP %d %v", parts, code, body)
		}
	}
}

// TestREST: the HTTP+JSON binding serves the same tasks: a message starts
// the refund and the task reads back; without a token it is 401.
func TestREST(t *testing.T) {
	f := startFace(t)
	ctx := as(deadline(t), "starter")
	c, err := a2aclient.NewFromEndpoints(ctx, []*a2a.AgentInterface{a2a.NewAgentInterface(f.url+"/a2a/rest", a2a.TransportProtocolHTTPJSON)})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: refundMessage()})
	if err != nil {
		t.Fatal(err)
	}
	task := res.(*a2a.Task)
	got, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: task.ID})
	if err != nil || got.Status.State != a2a.TaskStateInputRequired {
		t.Fatalf("GET the task: %+v, %v; want input-required", got, err)
	}
	resp, err := http.Get(f.url + "/a2a/rest/tasks/" + string(task.ID))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("no token: HTTP %d, want 401", resp.StatusCode)
	}
}
