package openai_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/model/openai"
)

// streamer is a local Chat Completions server that answers a request that
// streams with server-sent events, each written and flushed in turn, then
// [DONE]; and any other request with a JSON body.
type streamer struct {
	t      *testing.T
	json   string
	events []string
	// after, when set, runs in place of [DONE] once the body is written: it
	// cuts the connection, or waits, or ends the response early.
	after func(r *http.Request)

	mu     sync.Mutex
	bodies []map[string]any
}

func (s *streamer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		s.t.Errorf("request body: %v", err)
	}
	s.mu.Lock()
	s.bodies = append(s.bodies, body)
	s.mu.Unlock()
	if body["stream"] != true {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, s.json)
	} else {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, e := range s.events {
			_, _ = fmt.Fprintf(w, "data: %s\n\n", e)
			w.(http.Flusher).Flush()
		}
	}
	if s.after != nil {
		w.(http.Flusher).Flush()
		s.after(r)
		return
	}
	if body["stream"] == true {
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}
}

// cut ends the connection without ending the response, as a network that
// fails mid-reply does.
func cut(*http.Request) { panic(http.ErrAbortHandler) }

func serveStream(t *testing.T, s *streamer) *openai.Model {
	t.Helper()
	s.t = t
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	m, err := openai.New(&reinv1.ModelSpec{Provider: "openai", Name: "gpt-test", BaseUrl: srv.URL + "/v1", MaxOutputTokens: 500}, testKey)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// chunk is one streamed chunk holding the given choices; usage is null, as
// OpenAI sends it on every chunk but the last.
func chunk(choices ...string) string {
	return `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-test","choices":[` +
		strings.Join(choices, ",") + `],"usage":null}`
}

func choice(delta, finish string) string {
	return `{"index":0,"delta":` + delta + `,"logprobs":null,"finish_reason":` + finish + `}`
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func content(s string) string { return chunk(choice(`{"content":`+quote(s)+`}`, "null")) }

func arguments(index int, s string) string {
	return chunk(choice(fmt.Sprintf(`{"tool_calls":[{"index":%d,"function":{"arguments":%s}}]}`, index, quote(s)), "null"))
}

func callStart(index int, id, name string) string {
	return chunk(choice(fmt.Sprintf(`{"tool_calls":[{"index":%d,"id":%q,"type":"function","function":{"name":%q,"arguments":""}}]}`, index, id, name), "null"))
}

func finish(reason string) string { return chunk(choice(`{}`, quote(reason))) }

// usageChunk is the last chunk include_usage asks for: no choices, and the
// usage of the whole reply.
const usageChunk = `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-test","choices":[],` +
	`"usage":{"prompt_tokens":120,"completion_tokens":30,"total_tokens":150}}`

var roleChunk = chunk(choice(`{"role":"assistant","content":""}`, "null"))

func withUsage(chunk string, prompt, completion int) string {
	return strings.Replace(chunk, `"usage":null`, fmt.Sprintf(`"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}`,
		prompt, completion, prompt+completion), 1)
}

func finishedAs(body, reason string) string {
	return strings.Replace(body, `"finish_reason":"stop"`, `"finish_reason":"`+reason+`"`, 1)
}

// streamed sends req with an Output that collects what it is given.
func streamed(ctx context.Context, m *openai.Model, req *model.Request) (*model.Reply, []string, error) {
	var pieces []string
	req.Output = func(s string) { pieces = append(pieces, s) }
	r, err := m.Next(ctx, req)
	return r, pieces, err
}

// TestStream: a streamed call gives Output the reply's text as it comes (the
// content, a refusal, a tool call's arguments' JSON) and returns the reply
// the same response, not streamed, maps to; it asks for streaming and for
// the usage, and is otherwise the request that does not stream.
func TestStream(t *testing.T) {
	for _, tc := range []struct {
		name   string
		json   string
		events []string
		pieces []string
	}{
		{
			name:   "text",
			json:   completion(`{"role":"assistant","content":"Refunds take 5 days."}`),
			events: []string{roleChunk, content("Refunds "), content("take 5 days."), finish("stop"), usageChunk},
			pieces: []string{"Refunds ", "take 5 days."},
		},
		{
			name: "tool call",
			json: finishedAs(completion(`{"role":"assistant","content":null,"tool_calls":[`+toolCall("call_x", "search", `{"q":"refund policy"}`)+`]}`), "tool_calls"),
			events: []string{roleChunk, callStart(0, "call_x", "search"), arguments(0, `{"q":`), arguments(0, `"refund policy"}`),
				finish("tool_calls"), usageChunk},
			pieces: []string{`{"q":`, `"refund policy"}`},
		},
		{
			name: "two tool calls",
			json: finishedAs(completion(`{"role":"assistant","content":null,"tool_calls":[`+
				toolCall("c1", "search", `{"q":"a"}`)+`,`+toolCall("c2", "search", `{"q":"b"}`)+`]}`), "tool_calls"),
			events: []string{roleChunk, callStart(0, "c1", "search"), arguments(0, `{"q":"a"}`),
				callStart(1, "c2", "search"), arguments(1, `{"q":"b"}`), finish("tool_calls"), usageChunk},
			pieces: []string{`{"q":"a"}`, `{"q":"b"}`},
		},
		{
			// As some compatible servers send it: usage on every chunk, the
			// count so far, and a last chunk for the choice after its finish.
			name: "usage so far on every chunk",
			json: completion(`{"role":"assistant","content":"Refunds take 5 days."}`),
			events: []string{
				withUsage(roleChunk, 120, 0), withUsage(content("Refunds "), 120, 10), withUsage(content("take 5 days."), 120, 29),
				withUsage(finish("stop"), 120, 30), withUsage(chunk(choice(`{}`, "null")), 120, 30),
			},
			pieces: []string{"Refunds ", "take 5 days."},
		},
		{
			name: "refusal",
			json: completion(`{"role":"assistant","content":null,"refusal":"I can't help with that."}`),
			events: []string{chunk(choice(`{"role":"assistant","content":null,"refusal":""}`, "null")),
				chunk(choice(`{"refusal":"I can't"}`, "null")), chunk(choice(`{"refusal":" help with that."}`, "null")),
				finish("stop"), usageChunk},
			pieces: []string{"I can't", " help with that."},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &streamer{json: tc.json, events: tc.events}
			m := serveStream(t, s)
			want, err := m.Next(context.Background(), request())
			if err != nil {
				t.Fatal(err)
			}
			if want.ResponseID != "chatcmpl-1" || want.Usage.GetOutputTokens() != 30 {
				t.Fatalf("the reply not streamed is %+v", want)
			}
			got, pieces, err := streamed(context.Background(), m, request())
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(pieces, tc.pieces) {
				t.Errorf("Output was given %q, want %q", pieces, tc.pieces)
			}
			if d := cmp.Diff(want, got, protocmp.Transform()); d != "" {
				t.Errorf("the streamed reply differs from the one not streamed (-want +got):\n%s", d)
			}
			if text := got.Decision.GetFinalAnswer().GetText(); text != "" && text != strings.Join(pieces, "") {
				t.Errorf("final answer %q, Output was given %q", text, strings.Join(pieces, ""))
			}
			plain, stream := s.bodies[0], s.bodies[1]
			if _, ok := plain["stream"]; ok {
				t.Errorf("the call without Output asked for streaming: %v", plain)
			}
			opts, _ := stream["stream_options"].(map[string]any)
			if stream["stream"] != true || opts["include_usage"] != true {
				t.Errorf("stream %v, stream_options %v; want true and include_usage true", stream["stream"], stream["stream_options"])
			}
			delete(stream, "stream")
			delete(stream, "stream_options")
			if !maps.EqualFunc(plain, stream, func(a, b any) bool { return cmp.Equal(a, b) }) {
				t.Errorf("the streamed request differs beyond streaming:\n%s", cmp.Diff(plain, stream))
			}
		})
	}
}

// The failure twin of TestStream: a streamed call the API refuses is
// classified as one not streamed (a wait passed on, a refused key named),
// and nothing is given to Output.
func TestStreamRefused(t *testing.T) {
	for _, tc := range []struct {
		status    int
		header    http.Header
		retryable bool
		wait      time.Duration
	}{
		{429, http.Header{"Retry-After": {"7"}}, true, 7 * time.Second},
		{500, nil, true, 0},
		{401, nil, false, 0},
		{400, nil, false, 0},
	} {
		m, f := serve(t, &fake{status: tc.status, header: tc.header, body: `{"error":{"message":"no","type":"x"}}`})
		r, pieces, err := streamed(context.Background(), m, request())
		if r != nil || len(pieces) != 0 {
			t.Fatalf("HTTP %d: reply %v, Output given %q", tc.status, r, pieces)
		}
		wait, retryable := model.RetryAfter(err)
		var he *model.HTTPError
		if !errors.As(err, &he) || he.StatusCode != tc.status || retryable != tc.retryable || wait != tc.wait {
			t.Fatalf("HTTP %d: err %v (retryable %v, wait %v), want an HTTPError, retryable %v, wait %v", tc.status, err, retryable, wait, tc.retryable, tc.wait)
		}
		if tc.status == 401 && !strings.Contains(err.Error(), openai.KeyEnv) {
			t.Fatalf("err %v does not name %s", err, openai.KeyEnv)
		}
		if n := f.calls.Load(); n != 1 || !strings.Contains(string(f.bodies[0]), `"stream":true`) {
			t.Fatalf("HTTP %d: %d requests (%s), want 1 that streams", tc.status, n, f.bodies[0])
		}
	}
}

// TestStreamCut: a stream cut mid-reply is an error and no reply, classified
// as a reply not streamed that is cut mid-body; what Output was given stays
// given.
func TestStreamCut(t *testing.T) {
	text := completion(`{"role":"assistant","content":"Refunds take 5 days."}`)
	s := &streamer{json: text[:len(text)/2], events: []string{roleChunk, content("Refunds ")}, after: cut}
	m := serveStream(t, s)
	r, pieces, err := streamed(context.Background(), m, request())
	if err == nil || r != nil {
		t.Fatalf("reply %v, err %v; want an error and no reply", r, err)
	}
	if !slices.Equal(pieces, []string{"Refunds "}) {
		t.Fatalf("Output was given %q, want what came before the cut", pieces)
	}
	_, plainErr := m.Next(context.Background(), request())
	if plainErr == nil || errors.Is(err, model.ErrRetryable) != errors.Is(plainErr, model.ErrRetryable) {
		t.Fatalf("streamed: %v; not streamed: %v; want both classified alike", err, plainErr)
	}
}

// TestStreamMalformed: a stream that ends cleanly before the reply finished,
// or that mixes in another reply's chunks, is an error and no reply.
func TestStreamMalformed(t *testing.T) {
	other := strings.Replace(content("take 5 days."), "chatcmpl-1", "chatcmpl-2", 1)
	for name, s := range map[string]*streamer{
		"ends early":    {events: []string{roleChunk, content("Refunds ")}, after: func(*http.Request) {}},
		"another reply": {events: []string{roleChunk, content("Refunds "), other, finish("stop"), usageChunk}},
	} {
		m := serveStream(t, s)
		r, pieces, err := streamed(context.Background(), m, request())
		if err == nil || r != nil || !slices.Equal(pieces, []string{"Refunds "}) {
			t.Fatalf("%s: reply %v, err %v, Output given %q; want an error, no reply, and the text before", name, r, err, pieces)
		}
	}
}

// TestStreamErrorEvent: an error sent as an event mid-stream is classified as
// the HTTP error it stands for: a server error is retryable, a refused
// request is not.
func TestStreamErrorEvent(t *testing.T) {
	for _, tc := range []struct {
		event  string
		status int
	}{
		{`{"error":{"message":"The server had an error","type":"server_error","param":null,"code":null}}`, 500},
		{`{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`, 429},
		{`{"error":{"message":"bad","type":"invalid_request_error","code":null}}`, 400},
		{`{"error":{"object":"error","message":"bad","type":"BadRequestError","code":400}}`, 400},
	} {
		s := &streamer{events: []string{roleChunk, content("Refunds "), tc.event}, after: func(*http.Request) {}}
		m := serveStream(t, s)
		r, pieces, err := streamed(context.Background(), m, request())
		var he *model.HTTPError
		if r != nil || !errors.As(err, &he) || he.StatusCode != tc.status || he.Message == "" {
			t.Fatalf("%s: reply %v, err %#v; want an HTTPError %d with the message", tc.event, r, err, tc.status)
		}
		if errors.Is(err, model.ErrRetryable) != (model.Classify(tc.status) == model.ClassRetryable) {
			t.Fatalf("%s: err %v, retryable %v", tc.event, err, errors.Is(err, model.ErrRetryable))
		}
		if !slices.Equal(pieces, []string{"Refunds "}) {
			t.Fatalf("Output was given %q", pieces)
		}
	}
}

// TestStreamCancelled: a call cancelled mid-stream returns the context's
// error, not a retryable one, and its connection ends.
func TestStreamCancelled(t *testing.T) {
	done := make(chan struct{})
	s := &streamer{events: []string{roleChunk, content("Refunds ")}, after: func(r *http.Request) {
		<-r.Context().Done()
		close(done)
	}}
	m := serveStream(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var pieces []string
	req := request()
	req.Output = func(p string) {
		pieces = append(pieces, p)
		cancel()
	}
	r, err := m.Next(ctx, req)
	if r != nil || !errors.Is(err, context.Canceled) || errors.Is(err, model.ErrRetryable) {
		t.Fatalf("reply %v, err %v; want context.Canceled, not retryable", r, err)
	}
	if !slices.Equal(pieces, []string{"Refunds "}) {
		t.Fatalf("Output was given %q", pieces)
	}
	<-done
}

// TestStreamWithoutUsage: a compatible server that ignores include_usage
// reports no usage, and the reply says so (Usage nil: the harness counts
// the call at its estimate) rather than that the call cost nothing; one
// that reports it is taken at its word.
func TestStreamWithoutUsage(t *testing.T) {
	for _, tc := range []struct {
		name   string
		events []string
		want   *reinv1.Usage
	}{
		{"no usage", []string{roleChunk, content("done"), finish("stop")}, nil},
		{"usage", []string{roleChunk, content("done"), finish("stop"), usageChunk}, &reinv1.Usage{InputTokens: 120, OutputTokens: 30}},
	} {
		m := serveStream(t, &streamer{events: tc.events})
		r, _, err := streamed(context.Background(), m, &model.Request{Step: 1, Goal: "g"})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if (r.Usage == nil) != (tc.want == nil) || (tc.want != nil && (r.Usage.GetInputTokens() != tc.want.GetInputTokens() || r.Usage.GetOutputTokens() != tc.want.GetOutputTokens())) {
			t.Errorf("%s: usage %v, want %v", tc.name, r.Usage, tc.want)
		}
	}
}
