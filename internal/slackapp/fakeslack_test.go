package slackapp_test

// The fake Slack workspace of handler_test.go: it signs and posts clicks,
// and receives what the handler posts to its response_urls.

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/slackapp"
	"github.com/reinhq/rein/server"
	"github.com/reinhq/rein/server/facetest"
)

const (
	secret = "8f742231b10e8888abcd99yyyzzz85a5"
	team   = "T0REIN"
)

// The Slack users of the tests and the principals they map to: starter
// (operator, approver), alice and carol (approvers), vic (operator, no
// approver role), all of tenant acme, and gus, an approver of globex.
var slackUsers = map[string]string{"U_STARTER": "starter", "U_ALICE": "alice", "U_CAROL": "carol", "U_VIC": "vic", "U_GUS": "gus"}

// fakeSlack is a Slack workspace: it posts clicks, signed, to the handler,
// and receives what the handler posts to its response_urls.
type fakeSlack struct {
	t       *testing.T
	handler string // the handler's URL
	hooks   *httptest.Server
	posts   chan post
	runs    reinv1.RunServiceClient
	n       atomic.Int64
}

// post is what the handler posted to a response_url.
type post struct {
	path string
	msg  slackMessage
}

type slackMessage struct {
	ResponseType    string            `json:"response_type"`
	ReplaceOriginal *bool             `json:"replace_original"`
	Text            string            `json:"text"`
	Blocks          []json.RawMessage `json:"blocks"`
}

// newSlack serves the refund task, edited by edit, on a node, and the
// handler in front of it, with opts edited by each of with.
func newSlack(t *testing.T, edit func(task map[string]any), with ...func(*slackapp.Options)) *fakeSlack {
	t.Helper()
	task := facetest.RefundTask(t)
	if edit != nil {
		edit(task)
	}
	_, tasks := facetest.Catalog(t, map[string]string{"refund.json": facetest.JSON(t, task)})
	dir := facetest.Directory(t,
		facetest.Principal{ID: "starter", Tenant: "acme", Roles: []string{"operator", "approver"}},
		facetest.Principal{ID: "alice", Tenant: "acme", Roles: []string{"approver"}},
		facetest.Principal{ID: "carol", Tenant: "acme", Roles: []string{"approver"}},
		facetest.Principal{ID: "vic", Tenant: "acme", Roles: []string{"operator"}},
		facetest.Principal{ID: "gus", Tenant: "globex", Roles: []string{"approver"}})
	node, cc := facetest.Node(t, server.Config{Tools: facetest.RefundTools(t), Directory: dir, Tasks: tasks, Resume: true})

	var file struct {
		Contact string           `json:"contact"`
		Users   []map[string]any `json:"users"`
	}
	file.Contact = "#rein-admins"
	for user, principal := range slackUsers {
		tenant := "acme"
		if principal == "gus" {
			tenant = "globex"
		}
		file.Users = append(file.Users, map[string]any{"team_id": team, "user_id": user, "principal": principal, "tenant": tenant})
	}
	path := filepath.Join(t.TempDir(), "slack-users.json")
	if err := os.WriteFile(path, []byte(facetest.JSON(t, file)), 0o600); err != nil {
		t.Fatal(err)
	}
	known := func(tenant, id string) bool { _, ok := dir.Principal(tenant, id); return ok }
	users, err := slackapp.LoadUsers(path, known)
	if err != nil {
		t.Fatal(err)
	}

	s := &fakeSlack{t: t, posts: make(chan post, 16), runs: reinv1.NewRunServiceClient(cc)}
	s.hooks = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m slackMessage
		if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
			t.Errorf("the handler posted a body that is not JSON: %v", err)
		}
		s.posts <- post{path: r.URL.Path, msg: m}
	}))
	t.Cleanup(s.hooks.Close)
	opts := slackapp.Options{
		SigningSecret: []byte(secret), Users: users, Principal: dir.Principal, Runs: node,
		ResponseURLs: []string{s.hooks.URL + "/"}, Client: s.hooks.Client(),
	}
	for _, w := range with {
		w(&opts)
	}
	h, err := slackapp.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(slackapp.Path, h)
	hs := httptest.NewServer(mux)
	t.Cleanup(func() { hs.Close(); h.Close() })
	s.handler = hs.URL + slackapp.Path
	return s
}

func deadline(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// start starts the refund task as starter and waits for it to pause for
// approval.
func (s *fakeSlack) start(t *testing.T) *reinv1.Run {
	t.Helper()
	ctx := facetest.As(deadline(t), "starter")
	in, _ := structpb.NewStruct(map[string]any{"invoice_id": "INV-42"})
	resp, err := s.runs.StartRun(ctx, &reinv1.StartRunRequest{RequestId: t.Name(), Task: "refund", Inputs: in})
	if err != nil {
		t.Fatal(err)
	}
	return s.waitFor(t, resp.GetRun().GetRunId(), reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL, 0)
}

// waitFor watches run id after sequence after until it changes to want.
func (s *fakeSlack) waitFor(t *testing.T, id string, want reinv1.RunStatus, after uint64) *reinv1.Run {
	t.Helper()
	ctx := facetest.As(deadline(t), "starter")
	stream, err := s.runs.WatchRun(ctx, &reinv1.WatchRunRequest{RunId: id, AfterSequence: after})
	if err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatalf("the watch of %s ended before it was %v: %v", id, want, err)
		}
		if ev.GetEvent().GetStatusChanged().GetTo() == want {
			return s.get(t, id)
		}
	}
}

func (s *fakeSlack) get(t *testing.T, id string) *reinv1.Run {
	t.Helper()
	resp, err := s.runs.GetRun(facetest.As(deadline(t), "starter"), &reinv1.GetRunRequest{RunId: id})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetRun()
}

// message is the Slack message rein renders for run, as Slack would keep
// it: its blocks, and the value its buttons carry.
func message(t *testing.T, run *reinv1.Run) (blocks []json.RawMessage, value string) {
	t.Helper()
	p, ok := slackapp.PauseOf(run, "https://rein.example/console/runs/"+run.GetRunId())
	if !ok {
		t.Fatalf("run %s does not wait for approval", run.GetRunId())
	}
	body, err := slackapp.Render(p)
	if err != nil {
		t.Fatal(err)
	}
	var m slackMessage
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	return m.Blocks, buttonValue(t, m.Blocks)
}

// buttonValue is the value of the Approve button of blocks ("" without).
func buttonValue(t *testing.T, blocks []json.RawMessage) string {
	t.Helper()
	for _, b := range blocks {
		var actions struct {
			Type     string `json:"type"`
			Elements []struct {
				ActionID string `json:"action_id"`
				Value    string `json:"value"`
			} `json:"elements"`
		}
		if err := json.Unmarshal(b, &actions); err != nil {
			t.Fatal(err)
		}
		for _, e := range actions.Elements {
			if actions.Type == "actions" && e.ActionID == slackapp.ActionApprove {
				return e.Value
			}
		}
	}
	return ""
}

// click is a Slack block_actions post of user clicking action on a
// message of blocks whose buttons carry value.
type click struct {
	user, action, value string
	blocks              []json.RawMessage
	responseURL         string // "" means the fake's
}

// body is the click's form body, as Slack sends it.
func (s *fakeSlack) body(c click) []byte {
	if c.responseURL == "" {
		c.responseURL = fmt.Sprintf("%s/actions/T0REIN/%d/hook", s.hooks.URL, s.n.Add(1))
	}
	payload := map[string]any{
		"type": "block_actions",
		"user": map[string]any{"id": c.user, "username": strings.ToLower(c.user), "team_id": team},
		"team": map[string]any{"id": team, "domain": "rein-test"},
		"actions": []any{map[string]any{
			"action_id": c.action, "block_id": "rein_decision", "type": "button", "value": c.value, "action_ts": "1700000000.000100",
		}},
		"response_url": c.responseURL,
		"container":    map[string]any{"type": "message", "message_ts": "1700000000.000001"},
		"message":      map[string]any{"type": "message", "text": "Approval needed", "blocks": c.blocks},
	}
	data, err := json.Marshal(payload)
	if err != nil {
		s.t.Fatal(err)
	}
	return []byte(url.Values{"payload": {string(data)}}.Encode())
}

// sign is Slack's signature, computed as Slack's documentation says.
func sign(key, ts string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(key))
	fmt.Fprintf(mac, "v0:%s:%s", ts, body)
	return "v0=" + hex.EncodeToString(mac.Sum(nil))
}

// send posts body to the handler with headers, and returns the status.
func (s *fakeSlack) send(t *testing.T, body []byte, headers map[string]string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(deadline(t), http.MethodPost, s.handler, strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// signed are the headers Slack sends with body at time at.
func signed(body []byte, at time.Time) map[string]string {
	ts := strconv.FormatInt(at.Unix(), 10)
	return map[string]string{"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": sign(secret, ts, body)}
}

// clickNow sends c signed now and returns what the handler posted to its
// response_url.
func (s *fakeSlack) clickNow(t *testing.T, c click) post {
	t.Helper()
	body := s.body(c)
	if code := s.send(t, body, signed(body, time.Now())); code != http.StatusOK {
		t.Fatalf("a signed click of %s by %s: HTTP %d, want 200", c.action, c.user, code)
	}
	return s.next(t)
}

// next is the next post to a response_url.
func (s *fakeSlack) next(t *testing.T) post {
	t.Helper()
	select {
	case p := <-s.posts:
		return p
	case <-deadline(t).Done():
		t.Fatal("the handler posted nothing to the response_url")
		return post{}
	}
}

// nothingPosted fails if the handler posted to a response_url.
func (s *fakeSlack) nothingPosted(t *testing.T, what string) {
	t.Helper()
	select {
	case p := <-s.posts:
		t.Errorf("%s: the handler posted %q to %s", what, p.msg.Text, p.path)
	default:
	}
}

// mark is what a refused click must leave alone.
type mark struct {
	run    *reinv1.Run
	events int
}

func (s *fakeSlack) mark(t *testing.T, id string) mark {
	t.Helper()
	resp, err := s.runs.ListEvents(facetest.As(deadline(t), "starter"), &reinv1.ListEventsRequest{RunId: id, PageSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return mark{run: s.get(t, id), events: len(resp.GetEvents())}
}

func (s *fakeSlack) unchanged(t *testing.T, what string, m mark) {
	t.Helper()
	now := s.mark(t, m.run.GetRunId())
	if now.events != m.events || !proto.Equal(now.run, m.run) {
		t.Errorf("%s changed the run: version %d → %d, %d → %d events", what, m.run.GetVersion(), now.run.GetVersion(), m.events, now.events)
	}
}

// outcome is the text of a message's outcome block ("" without).
func outcome(t *testing.T, m slackMessage) string {
	t.Helper()
	for _, b := range m.Blocks {
		var ctx struct {
			BlockID  string `json:"block_id"`
			Elements []struct {
				Text string `json:"text"`
			} `json:"elements"`
		}
		if err := json.Unmarshal(b, &ctx); err != nil {
			t.Fatal(err)
		}
		if ctx.BlockID == "rein_outcome" && len(ctx.Elements) > 0 {
			return ctx.Elements[0].Text
		}
	}
	return ""
}

func replaces(m slackMessage) bool { return m.ReplaceOriginal != nil && *m.ReplaceOriginal }
