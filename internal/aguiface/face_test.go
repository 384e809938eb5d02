package aguiface_test

// Tests of the AG-UI face against a real node on a real bbolt file, the
// refund example's task (its scripted model and fixture tools), and
// principals from a tokens file. Nothing sleeps: the tests read the
// streams to the events they wait for, under deadlines.

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/aguiface"
	"github.com/reinhq/rein/server"
	"github.com/reinhq/rein/server/facetest"
)

type face struct {
	url  string
	runs reinv1.RunServiceClient
}

// startFace serves a node with the refund task and the AG-UI face in
// front of it, its calls going in-process through the node's gRPC server.
// Principals: starter (operator, approver) of tenant acme, other
// (operator, viewer) of tenant globex; a token is the ID + "-token".
func startFace(t *testing.T) *face {
	t.Helper()
	_, tasks := facetest.Catalog(t, map[string]string{"refund.json": facetest.JSON(t, facetest.RefundTask(t))})
	directory := facetest.Directory(t,
		facetest.Principal{ID: "starter", Tenant: "acme", Roles: []string{"operator", "approver"}},
		facetest.Principal{ID: "other", Tenant: "globex", Roles: []string{"operator", "viewer"}})
	node, cc := facetest.Node(t, server.Config{Tools: facetest.RefundTools(t), Directory: directory, Tasks: tasks, Resume: true})
	runs := reinv1.NewRunServiceClient(cc)
	hs := httptest.NewServer(aguiface.New(aguiface.Options{Runs: runs, Authenticate: node.AuthenticateHTTP}))
	t.Cleanup(hs.Close)
	return &face{url: hs.URL, runs: runs}
}

// message is one SSE message: its id (empty for none) and its AG-UI event.
type message struct {
	id    string
	event map[string]any
}

func (m message) typ() string { return m.event["type"].(string) }

// stream is an open SSE response, read message by message.
type stream struct {
	t      *testing.T
	resp   *http.Response
	msgs   chan message
	cancel context.CancelFunc
}

// open sends a request as token ("" for none) and, on 200, reads its
// messages; any other status is returned with the body.
func open(t *testing.T, method, url, token, lastEventID, body string) (*stream, int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		return nil, resp.StatusCode, string(b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q, want text/event-stream", ct)
	}
	s := &stream{t: t, resp: resp, msgs: make(chan message, 1024), cancel: cancel}
	go func() {
		defer close(s.msgs)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var m message
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if m.event != nil {
					s.msgs <- m
				}
				m = message{}
			case strings.HasPrefix(line, "id: "):
				m.id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "data: "):
				if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &m.event); err != nil {
					t.Errorf("data %q: %v", line, err)
				}
			}
		}
	}()
	t.Cleanup(s.close)
	return s, resp.StatusCode, ""
}

func (s *stream) close() { s.cancel(); s.resp.Body.Close() }

// until reads messages up to and including the first that stop accepts.
func (s *stream) until(stop func(message) bool) []message {
	s.t.Helper()
	var got []message
	for m := range s.msgs {
		got = append(got, m)
		if stop(m) {
			return got
		}
	}
	s.t.Fatalf("the stream ended before the message awaited; got %v", types(got))
	return nil
}

// rest reads messages until the server ends the stream.
func (s *stream) rest() []message {
	var got []message
	for m := range s.msgs {
		got = append(got, m)
	}
	return got
}

func types(ms []message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.typ())
	}
	return out
}

func ids(ms []message) []string {
	var out []string
	for _, m := range ms {
		if m.id != "" {
			out = append(out, m.id)
		}
	}
	return out
}

func is(typ string) func(message) bool { return func(m message) bool { return m.typ() == typ } }

func as(ctx context.Context, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

const startBody = `{"threadId": "thread-1", "runId": "client-run-1", "state": {"invoice_id": "INV-42"}, "messages": [], "tools": [], "context": []}`

// startRefund POSTs the refund task and reads its stream to the approval
// it pauses on.
func startRefund(t *testing.T, f *face) (*stream, []message, map[string]any) {
	t.Helper()
	s, code, body := open(t, http.MethodPost, f.url+"/agui/tasks/refund", "starter-token", "", startBody)
	if code != http.StatusOK {
		t.Fatalf("POST the refund task: %d %s", code, body)
	}
	got := s.until(func(m message) bool { return m.typ() == "CUSTOM" && m.event["name"] == "rein.approval_requested" })
	return s, got, got[len(got)-1].event["value"].(map[string]any)
}

func approve(t *testing.T, f *face, v map[string]any) {
	t.Helper()
	if _, err := f.runs.DecideApproval(as(context.Background(), "starter-token"), &reinv1.DecideApprovalRequest{
		RunId: v["runId"].(string), ProposalId: v["proposalId"].(string), ProposalHash: v["hash"].(string), Verdict: reinv1.ApprovalVerdict_APPROVAL_VERDICT_APPROVE,
	}); err != nil {
		t.Fatal(err)
	}
}

// TestRefundToApprovalThenFinished: the refund task started by POST
// streams to its approval pause (steps, the read's tool call and result,
// the write's tool call, the approval with what approving it needs), the
// stream stays open, and after the approval it goes on to the answer's
// text and RUN_FINISHED, then ends.
func TestRefundToApprovalThenFinished(t *testing.T) {
	f := startFace(t)
	s, got, approval := startRefund(t, f)
	if got[0].typ() != "RUN_STARTED" || got[0].event["threadId"] != "thread-1" || got[0].event["runId"] != approval["runId"] || got[1].typ() != "STATE_SNAPSHOT" {
		t.Fatalf("the stream opens with %v", got[:2])
	}
	for _, want := range []string{"STEP_STARTED", "STEP_FINISHED", "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT", "STATE_DELTA"} {
		if !slices.Contains(types(got), want) {
			t.Errorf("no %s before the approval: %v", want, types(got))
		}
	}
	if approval["tool"] != "refunds.create" || approval["hash"] == "" || approval["proposalId"] == "" || approval["endsAt"] == nil || approval["preview"] == nil ||
		approval["arguments"].(map[string]any)["amount"] != "1200.00" {
		t.Errorf("the approval's value: %v", approval)
	}
	approve(t, f, approval)
	rest := s.rest()
	last := rest[len(rest)-1]
	if last.typ() != "RUN_FINISHED" || last.event["result"].(map[string]any)["text"] == nil {
		t.Fatalf("the stream ends with %v, want RUN_FINISHED with the answer", last.event)
	}
	var text string
	for _, m := range rest {
		if m.typ() == "TEXT_MESSAGE_CONTENT" {
			text += m.event["delta"].(string)
		}
	}
	if !strings.Contains(text, "Refunded the duplicate charge") {
		t.Errorf("the answer's text %q", text)
	}
	all := append(got, rest...)
	var results int
	for _, m := range all {
		if m.typ() == "TOOL_CALL_RESULT" {
			results++
		}
	}
	if results != 2 {
		t.Errorf("%d tool call results, want 2 (the read and the committed write): %v", results, types(all))
	}
	ordered(t, all)
}

// ordered checks that the ids only grow, and that every id is N or N:K.
func ordered(t *testing.T, ms []message) {
	t.Helper()
	prev := [2]int{0, 0}
	for _, id := range ids(ms) {
		var n, k int
		seq, sub, found := strings.Cut(id, ":")
		n = atoi(t, seq)
		k = 1 << 30 // the last message of its event
		if found {
			k = atoi(t, sub)
		}
		if cur := [2]int{n, k}; cur[0] < prev[0] || cur[0] == prev[0] && cur[1] <= prev[1] {
			t.Fatalf("id %s after %v: not in order", id, prev)
		} else {
			prev = cur
		}
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	var n int
	if err := json.Unmarshal([]byte(s), &n); err != nil {
		t.Fatalf("id part %q: %v", s, err)
	}
	return n
}

// TestResumeSeesEveryMessageOnce: a stream cut mid-run (at the approval)
// and resumed with the last id it saw gets every message after it once;
// and a finished run resumed from each of its ids in turn gets exactly
// the messages after that id.
func TestResumeSeesEveryMessageOnce(t *testing.T) {
	f := startFace(t)
	s, got, approval := startRefund(t, f)
	s.close()
	approve(t, f, approval)
	runID := approval["runId"].(string)
	lastSeen := ids(got)[len(ids(got))-1]
	s2, code, body := open(t, http.MethodGet, f.url+"/agui/runs/"+runID, "starter-token", lastSeen, "")
	if code != http.StatusOK {
		t.Fatalf("resume: %d %s", code, body)
	}
	rest := s2.rest()
	if rest[0].typ() != "RUN_STARTED" || rest[len(rest)-1].typ() != "RUN_FINISHED" {
		t.Fatalf("the resumed stream: %v", types(rest))
	}

	whole, code, body := open(t, http.MethodGet, f.url+"/agui/runs/"+runID+"?after=0", "starter-token", "", "")
	if code != http.StatusOK {
		t.Fatalf("the whole run: %d %s", code, body)
	}
	all := whole.rest()
	allIDs := ids(all)
	ordered(t, all)
	if joined := append(ids(got), ids(rest)...); !slices.Equal(joined, allIDs) {
		t.Fatalf("cut and resumed, the ids\n%v\nwant\n%v", joined, allIDs)
	}
	for i, id := range allIDs {
		r, code, body := open(t, http.MethodGet, f.url+"/agui/runs/"+runID+"?after=0", "starter-token", id, "")
		if code != http.StatusOK {
			t.Fatalf("resume from %s: %d %s", id, code, body)
		}
		if got := ids(r.rest()); !slices.Equal(got, allIDs[i+1:]) {
			t.Fatalf("resumed from %s: ids %v, want %v", id, got, allIDs[i+1:])
		}
	}
	// ?after alone resumes after a whole event.
	r, code, _ := open(t, http.MethodGet, f.url+"/agui/runs/"+runID+"?after=9", "starter-token", "", "")
	if code != http.StatusOK {
		t.Fatalf("?after=9: %d", code)
	}
	if got := ids(r.rest()); len(got) == 0 || strings.Split(got[0], ":")[0] != "10" {
		t.Fatalf("?after=9 starts at %v", got)
	}
}

// TestRefusals: what the API refuses is an HTTP error, before any event.
func TestRefusals(t *testing.T) {
	f := startFace(t)
	s, _, approval := startRefund(t, f)
	s.close()
	runID := approval["runId"].(string)
	for _, c := range []struct {
		name, method, path, token, lastEventID, body string
		want                                         int
	}{
		{"no token", http.MethodGet, "/agui/runs/" + runID, "", "", "", http.StatusUnauthorized},
		{"an unknown token", http.MethodGet, "/agui/runs/" + runID, "nobody-token", "", "", http.StatusUnauthorized},
		{"another tenant's run", http.MethodGet, "/agui/runs/" + runID, "other-token", "", "", http.StatusNotFound},
		{"a run that does not exist", http.MethodGet, "/agui/runs/run_nope", "starter-token", "", "", http.StatusNotFound},
		{"after that is not a number", http.MethodGet, "/agui/runs/" + runID + "?after=ten", "starter-token", "", "", http.StatusBadRequest},
		{"after beyond the run", http.MethodGet, "/agui/runs/" + runID + "?after=999", "starter-token", "", "", http.StatusBadRequest},
		{"a Last-Event-ID not sent", http.MethodGet, "/agui/runs/" + runID, "starter-token", "x:1", "", http.StatusBadRequest},
		{"a run with POST", http.MethodPost, "/agui/runs/" + runID, "starter-token", "", "", http.StatusMethodNotAllowed},
		{"a task not in the catalog", http.MethodPost, "/agui/tasks/nope", "starter-token", "", startBody, http.StatusNotFound},
		{"a task of no tenant's catalog with no token", http.MethodPost, "/agui/tasks/refund", "", "", startBody, http.StatusUnauthorized},
		{"a body that is not RunAgentInput", http.MethodPost, "/agui/tasks/refund", "starter-token", "", `[1, 2]`, http.StatusBadRequest},
		{"inputs that break the schema", http.MethodPost, "/agui/tasks/refund", "starter-token", "", `{"threadId": "t", "runId": "r2", "state": {"invoice_id": 42}, "messages": []}`, http.StatusBadRequest},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, code, body := open(t, c.method, f.url+c.path, c.token, c.lastEventID, c.body)
			if code != c.want {
				t.Errorf("%d %s, want %d", code, body, c.want)
			}
		})
	}
	// The success twin of the other tenant's 404: its owner reads it.
	if _, code, body := open(t, http.MethodGet, f.url+"/agui/runs/"+runID, "starter-token", "", ""); code != http.StatusOK {
		t.Errorf("the owner's stream: %d %s", code, body)
	}
}
