package main

// End-to-end runs against real model providers' wire formats, served by a
// local HTTP server: rein run --model openai:NAME --base-url URL (and the
// anthropic twin), the one retry, the refusals that fail a run, a hang cut
// by the deadline, Ctrl+C mid-request, and keys from a --secrets file that
// never reach the output or the store.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// wireReply is one answer of the fake provider.
type wireReply struct {
	status int
	header map[string]string
	body   string
	// hang holds the request until the client goes away.
	hang bool
}

// fakeProvider answers each model call with its next reply (the last one
// repeats) and records what it was sent.
type fakeProvider struct {
	t       *testing.T
	mu      sync.Mutex
	replies []wireReply
	bodies  []string
	headers []http.Header
	// arrived is closed at the first request; gone when a hanging request's
	// client went away.
	arrived, gone  chan struct{}
	once, goneOnce sync.Once
}

func newFakeProvider(t *testing.T, replies ...wireReply) (*fakeProvider, string) {
	f := &fakeProvider{t: t, replies: replies, arrived: make(chan struct{}), gone: make(chan struct{})}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv.URL
}

func (f *fakeProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	if strings.HasSuffix(r.URL.Path, "/count_tokens") {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"input_tokens": 90}`)
		return
	}
	f.mu.Lock()
	f.bodies = append(f.bodies, string(b))
	f.headers = append(f.headers, r.Header.Clone())
	n := len(f.bodies)
	rep := f.replies[min(n, len(f.replies))-1]
	f.mu.Unlock()
	f.once.Do(func() { close(f.arrived) })
	if rep.hang {
		<-r.Context().Done()
		f.goneOnce.Do(func() { close(f.gone) })
		return
	}
	for k, v := range rep.header {
		w.Header().Set(k, v)
	}
	w.Header().Set("Content-Type", "application/json")
	if rep.status == 0 {
		rep.status = http.StatusOK
	}
	w.WriteHeader(rep.status)
	_, _ = io.WriteString(w, rep.body)
}

func (f *fakeProvider) calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.bodies)
}

const (
	modelTask    = `{"goal": "find the invoice total", "tools": [{"name": "search", "tier": "TOOL_TIER_READ"}]}`
	modelTools   = `{"search": [{"output": "invoice 42: total 1,234.00 EUR"}]}`
	openaiKey    = "sk-test-e2e-0123456789"
	anthropicKey = "sk-ant-test-e2e-0123456789"
)

func oaiCompletion(message string) wireReply {
	return wireReply{body: `{"id":"c","object":"chat.completion","created":1,"model":"gpt-test","choices":[{"index":0,"finish_reason":"stop","message":` +
		message + `}],"usage":{"prompt_tokens":120,"completion_tokens":30,"total_tokens":150}}`}
}

var (
	oaiSearch = oaiCompletion(`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"search","arguments":"{\"q\":\"invoice 42\"}"}}]}`)
	oaiAnswer = oaiCompletion(`{"role":"assistant","content":"The total is 1,234.00 EUR."}`)
)

func antMessage(stop, content string) wireReply {
	return wireReply{body: `{"id":"msg_1","type":"message","role":"assistant","model":"claude-test","stop_reason":"` + stop +
		`","content":[` + content + `],"usage":{"input_tokens":100,"output_tokens":20}}`}
}

// secretsFile writes a secrets file with mode perm.
func secretsFile(t *testing.T, perm os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secrets.env")
	body := "# model keys\nOPENAI_API_KEY=" + openaiKey + "\nexport ANTHROPIC_API_KEY=\"" + anthropicKey + "\"\n"
	if err := os.WriteFile(p, []byte(body), perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, perm); err != nil {
		t.Fatal(err)
	}
	return p
}

// providerRun runs the task against the fake provider at url.
func providerRun(t *testing.T, db, provider, url string, extra ...string) result {
	t.Helper()
	args := []string{"run", writeFile(t, "task.json", modelTask), "--db", db,
		"--model", provider + ":" + map[string]string{"openai": "gpt-test", "anthropic": "claude-test"}[provider],
		"--base-url", url, "--tools", "fixture:" + writeFile(t, "tools.json", modelTools),
		"--secrets", secretsFile(t, 0o600)}
	return cli(t, append(args, extra...)...)
}

// noKeyLeaks checks that a key appears in no output and no stored byte.
func noKeyLeaks(t *testing.T, db string, r result, key string) {
	t.Helper()
	raw, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	for what, s := range map[string]string{"stdout": r.stdout, "stderr": r.stderr, "the store": string(raw)} {
		if strings.Contains(s, key) {
			t.Errorf("the API key is in %s", what)
		}
	}
}

func eventTypes(evs []map[string]any) string {
	var names []string
	for _, ev := range evs {
		names = append(names, ev["type"].(string))
	}
	return strings.Join(names, ",")
}

func TestRunOpenAIEndToEnd(t *testing.T) {
	t.Parallel()
	f, url := newFakeProvider(t, oaiSearch, oaiAnswer)
	db := newDB(t)
	prices := writeFile(t, "prices.json", `{"openai/gpt-test": {"input_per_mtok": 1, "output_per_mtok": 2}}`)
	r := providerRun(t, db, "openai", url+"/v1", "--prices", prices, "--json").mustExit(t, exitOK)
	s := decodeOne(t, r.stdout)
	if s["status"] != "completed" || obj(t, s["result"], "result")["text"] != "The total is 1,234.00 EUR." {
		t.Fatalf("summary %v, want completed with the model's text", s)
	}
	// Two calls of 120 input and 30 output tokens at $1 and $2 a million.
	if cost, _ := s["cost_usd"].(float64); cost < 0.00035999 || cost > 0.00036001 {
		t.Fatalf("cost_usd %v, want 0.00036", s["cost_usd"])
	}
	if f.calls() != 2 || f.headers[0].Get("Authorization") != "Bearer "+openaiKey {
		t.Fatalf("%d calls, Authorization %q; want 2 with the key from --secrets", f.calls(), f.headers[0].Get("Authorization"))
	}
	mustContain(t, "the second request", f.bodies[1], "invoice 42: total 1,234.00 EUR", `"tool_call_id":"call_1"`)
	noKeyLeaks(t, db, r, openaiKey)
	inspect := cli(t, "inspect", s["run_id"].(string), "--db", db).mustExit(t, exitOK)
	mustContain(t, "inspect", inspect.stdout, "cost", "$0.000360")
}

func TestRunAnthropicEndToEnd(t *testing.T) {
	t.Parallel()
	f, url := newFakeProvider(t,
		antMessage("tool_use", `{"type":"tool_use","id":"toolu_1","name":"search","input":{"q":"invoice 42"}}`),
		antMessage("end_turn", `{"type":"text","text":"The total is 1,234.00 EUR."}`))
	db := newDB(t)
	r := providerRun(t, db, "anthropic", url, "--json").mustExit(t, exitOK)
	s := decodeOne(t, r.stdout)
	if s["status"] != "completed" {
		t.Fatalf("summary %v, want completed", s)
	}
	if f.calls() != 2 || f.headers[0].Get("X-Api-Key") != anthropicKey {
		t.Fatalf("%d calls, x-api-key %q; want 2 with the key from --secrets", f.calls(), f.headers[0].Get("X-Api-Key"))
	}
	mustContain(t, "the second request", f.bodies[1], "tool_result", "toolu_1", "invoice 42: total 1,234.00 EUR")
	// The count endpoint's 90 tokens are what model_requested records.
	evs := events(t, db, s["run_id"].(string))
	if mr := obj(t, evs[1]["model_requested"], "model_requested"); mr["input_tokens"] != "90" && mr["input_tokens"] != 90.0 {
		t.Errorf("model_requested input_tokens %v, want the count endpoint's 90", mr["input_tokens"])
	}
	noKeyLeaks(t, db, r, anthropicKey)
}

func TestRunRetriesOnceAfterRetryAfter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		provider, path string
		rateLimit      string
		answer         wireReply
	}{
		{"openai", "/v1", `{"error":{"message":"slow down"}}`, oaiAnswer},
		{"anthropic", "", `{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`,
			antMessage("end_turn", `{"type":"text","text":"The total is 1,234.00 EUR."}`)},
	} {
		t.Run(tc.provider, func(t *testing.T) {
			t.Parallel()
			f, url := newFakeProvider(t,
				wireReply{status: 429, header: map[string]string{"Retry-After": "0.05"}, body: tc.rateLimit},
				tc.answer)
			db := newDB(t)
			r := providerRun(t, db, tc.provider, url+tc.path, "--json").mustExit(t, exitOK)
			s := decodeOne(t, r.stdout)
			evs := events(t, db, s["run_id"].(string))
			if got := eventTypes(evs); got != "run_started,model_requested,model_retried,model_returned,status_changed" {
				t.Fatalf("events %s, want one model_retried between the request and the reply", got)
			}
			if w := obj(t, evs[2]["model_retried"], "model_retried")["wait"]; w != "0.050s" {
				t.Errorf("model_retried wait %v, want Retry-After's 0.050s", w)
			}
			if f.calls() != 2 {
				t.Fatalf("%d calls, want 2", f.calls())
			}
		})
	}
}

func TestRunProviderRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		replies []wireReply
		calls   int
		want    []string
	}{
		{"500 twice", []wireReply{{status: 500, body: `{"error":{"message":"upstream"}}`}}, 2, []string{"500", "after one retry"}},
		{"401", []wireReply{{status: 401, body: `{"error":{"message":"bad key"}}`}}, 1, []string{"401", "OPENAI_API_KEY"}},
		{"quota", []wireReply{{status: 402, body: `{"error":{"message":"no credit"}}`}}, 1, []string{"402", "quota or billing"}},
		{"malformed JSON", []wireReply{{body: `{"id": "c", "choices": [`}}, 1, []string{"the model call failed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, url := newFakeProvider(t, tc.replies...)
			db := newDB(t)
			r := providerRun(t, db, "openai", url+"/v1", "--json").mustExit(t, exitFailed)
			s := decodeOne(t, r.stdout)
			mustContain(t, "last_error", s["last_error"].(string), tc.want...)
			if f.calls() != tc.calls {
				t.Fatalf("%d calls, want %d", f.calls(), tc.calls)
			}
			noKeyLeaks(t, db, r, openaiKey)
		})
	}
}

func TestRunProviderHangHitsDeadline(t *testing.T) {
	t.Parallel()
	f, url := newFakeProvider(t, wireReply{hang: true})
	db := newDB(t)
	task := writeFile(t, "task.json", `{"goal": "x", "budget": {"timeout": "1s"}}`)
	r := cli(t, "run", task, "--db", db, "--model", "openai:gpt-test", "--base-url", url+"/v1",
		"--secrets", secretsFile(t, 0o600), "--json").mustExit(t, exitBudget)
	if s := decodeOne(t, r.stdout); s["status_reason"] != "deadline" {
		t.Fatalf("summary %v, want budget_exhausted by the deadline", s)
	}
	select {
	case <-f.gone:
	case <-time.After(30 * time.Second):
		t.Fatal("the provider's request was never cut")
	}
}

func TestRunCtrlCCancelsTheModelRequest(t *testing.T) {
	t.Parallel()
	f, url := newFakeProvider(t, wireReply{hang: true})
	db := newDB(t)
	args := []string{"run", writeFile(t, "task.json", `{"goal": "x"}`), "--db", db, "--model", "openai:gpt-test",
		"--base-url", url + "/v1", "--secrets", secretsFile(t, 0o600), "--json"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- Run(ctx, args, strings.NewReader(""), &stdout, &stderr) }()
	select {
	case <-f.arrived:
	case <-time.After(30 * time.Second):
		t.Fatal("no model request after 30s")
	}
	cancel()
	select {
	case <-f.gone:
	case <-time.After(30 * time.Second):
		t.Fatal("Ctrl+C did not cancel the HTTP request")
	}
	if code := <-done; code != exitCancelled {
		t.Fatalf("exit %d, want %d\n%s", code, exitCancelled, stderr.String())
	}
	var s map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &s); err != nil || s["status"] != "cancelled" {
		t.Fatalf("summary %s (%v), want cancelled", stdout.String(), err)
	}
}

func TestSecretsFileRefusals(t *testing.T) {
	t.Parallel()
	_, url := newFakeProvider(t, oaiAnswer)
	task := writeFile(t, "task.json", modelTask)
	base := []string{"run", task, "--model", "openai:gpt-test", "--base-url", url + "/v1"}
	open := secretsFile(t, 0o644)
	db := newDB(t)
	r := cli(t, append(base, "--db", db, "--secrets", open)...).mustExit(t, exitUsage)
	mustContain(t, "stderr", r.stderr, "--secrets", "readable by others", "chmod 600")
	bad := writeFile(t, "bad.env", "OPENAI_API_KEY "+openaiKey+"\n")
	r = cli(t, append(base, "--db", db, "--secrets", bad)...).mustExit(t, exitUsage)
	mustContain(t, "stderr", r.stderr, "line 1", "KEY=VALUE")
	if strings.Contains(r.stderr, openaiKey) {
		t.Fatal("a malformed secrets line was printed with its key")
	}
	if _, err := os.Stat(db); err == nil {
		t.Fatal("a refused run created the store")
	}
}
