package anthropic_test

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

	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/model/anthropic"
)

// streamer is a local Messages API server that answers a request that
// streams with server-sent events, each written and flushed in turn; and any
// other request with a JSON body.
type streamer struct {
	t      *testing.T
	json   string
	events []string
	// after, when set, runs once the body is written: it cuts the
	// connection, or waits.
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
			_, _ = io.WriteString(w, e)
			w.(http.Flusher).Flush()
		}
	}
	if s.after != nil {
		w.(http.Flusher).Flush()
		s.after(r)
	}
}

// cut ends the connection without ending the response, as a network that
// fails mid-reply does.
func cut(*http.Request) { panic(http.ErrAbortHandler) }

func serveStream(t *testing.T, s *streamer) *anthropic.Model {
	t.Helper()
	s.t = t
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	spec := defaultSpec()
	spec.BaseUrl = srv.URL
	m, err := anthropic.New(spec, testKey)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func event(typ, data string) string { return "event: " + typ + "\ndata: " + data + "\n\n" }

// start is the stream's first event: the message without content, with the
// input's usage (output_tokens is the count so far).
var start = event("message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-test",`+
	`"content":[],"stop_reason":null,"stop_sequence":null,`+
	`"usage":{"input_tokens":100,"cache_creation_input_tokens":20,"cache_read_input_tokens":5,"output_tokens":1}}}`)

var ping = event("ping", `{"type":"ping"}`)

func blockStart(i int, block string) string {
	return event("content_block_start", fmt.Sprintf(`{"type":"content_block_start","index":%d,"content_block":%s}`, i, block))
}

func textStart(i int) string { return blockStart(i, `{"type":"text","text":""}`) }

func blockDelta(i int, delta string) string {
	return event("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":%s}`, i, delta))
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func textDelta(i int, s string) string {
	return blockDelta(i, `{"type":"text_delta","text":`+quote(s)+`}`)
}

func inputDelta(i int, s string) string {
	return blockDelta(i, `{"type":"input_json_delta","partial_json":`+quote(s)+`}`)
}

func blockStop(i int) string {
	return event("content_block_stop", fmt.Sprintf(`{"type":"content_block_stop","index":%d}`, i))
}

// end is the stream's last events: why the message stopped and its output
// usage, then message_stop.
func end(stop string) []string {
	return []string{
		event("message_delta", `{"type":"message_delta","delta":{"stop_reason":"`+stop+`","stop_sequence":null},"usage":{"output_tokens":30}}`),
		event("message_stop", `{"type":"message_stop"}`),
	}
}

func events(evs ...any) []string {
	var out []string
	for _, e := range evs {
		switch e := e.(type) {
		case string:
			out = append(out, e)
		case []string:
			out = append(out, e...)
		}
	}
	return out
}

// streamed sends req with an Output that collects what it is given.
func streamed(ctx context.Context, m *anthropic.Model, req *model.Request) (*model.Reply, []string, error) {
	var pieces []string
	req.Output = func(s string) { pieces = append(pieces, s) }
	r, err := m.Next(ctx, req)
	return r, pieces, err
}

// TestStream: a streamed call gives Output the reply's text as it comes (its
// text, a tool use's input JSON) and returns the reply the same message, not
// streamed, maps to; it asks for streaming and is otherwise the request that
// does not stream.
func TestStream(t *testing.T) {
	for _, tc := range []struct {
		name   string
		json   string
		events []string
		pieces []string
	}{
		{
			name: "two texts",
			json: message("end_turn", textBlock("Refunds take 5 days."), textBlock("Anything else?")),
			events: events(start, textStart(0), ping, textDelta(0, "Refunds "), textDelta(0, "take 5 days."), blockStop(0),
				textStart(1), textDelta(1, "Anything else?"), blockStop(1), end("end_turn")),
			// The blank line is the one the final answer joins its texts with.
			pieces: []string{"Refunds ", "take 5 days.", "\n\n", "Anything else?"},
		},
		{
			name: "tool use",
			json: message("tool_use", textBlock("Let me search."), toolUse("toolu_x", "search", `{"q":"refund policy"}`)),
			events: events(start, textStart(0), textDelta(0, "Let me search."), blockStop(0),
				blockStart(1, `{"type":"tool_use","id":"toolu_x","name":"search","input":{}}`),
				inputDelta(1, ""), inputDelta(1, `{"q":`), inputDelta(1, `"refund policy"}`), blockStop(1), end("tool_use")),
			pieces: []string{"Let me search.", `{"q":`, `"refund policy"}`},
		},
		{
			name:   "cut at max_tokens",
			json:   message("max_tokens", textBlock("Refunds take")),
			events: events(start, textStart(0), textDelta(0, "Refunds take"), blockStop(0), end("max_tokens")),
			pieces: []string{"Refunds take"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &streamer{json: tc.json, events: tc.events}
			m := serveStream(t, s)
			want, err := m.Next(context.Background(), request())
			if err != nil {
				t.Fatal(err)
			}
			if want.ResponseID != "msg_1" || want.Usage.GetInputTokens() != 100 || want.Usage.GetOutputTokens() != 30 {
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
			if _, ok := plain["stream"]; ok || stream["stream"] != true {
				t.Errorf("stream %v without Output, %v with it; want none, then true", plain["stream"], stream["stream"])
			}
			delete(stream, "stream")
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
		typ       string
		header    http.Header
		retryable bool
		wait      time.Duration
	}{
		{429, "rate_limit_error", http.Header{"Retry-After": {"3"}}, true, 3 * time.Second},
		{529, "overloaded_error", nil, true, 0},
		{401, "authentication_error", nil, false, 0},
		{400, "invalid_request_error", nil, false, 0},
	} {
		m, f := serve(t, &fake{status: tc.status, header: tc.header, body: apiError(tc.typ, "no")}, nil)
		r, pieces, err := streamed(context.Background(), m, request())
		if r != nil || len(pieces) != 0 {
			t.Fatalf("HTTP %d: reply %v, Output given %q", tc.status, r, pieces)
		}
		wait, retryable := model.RetryAfter(err)
		var he *model.HTTPError
		if !errors.As(err, &he) || he.StatusCode != tc.status || retryable != tc.retryable || wait != tc.wait {
			t.Fatalf("HTTP %d: err %v (retryable %v, wait %v), want an HTTPError, retryable %v, wait %v", tc.status, err, retryable, wait, tc.retryable, tc.wait)
		}
		if tc.status == 401 && !strings.Contains(err.Error(), anthropic.KeyEnv) {
			t.Fatalf("err %v does not name %s", err, anthropic.KeyEnv)
		}
		if req := f.request(); !strings.Contains(string(req.body), `"stream":true`) {
			t.Fatalf("HTTP %d: the request %s does not stream", tc.status, req.body)
		}
	}
}

// TestStreamCut: a stream cut mid-reply is an error and no reply, classified
// as a reply not streamed that is cut mid-body; what Output was given stays
// given.
func TestStreamCut(t *testing.T) {
	msg := message("end_turn", textBlock("Refunds take 5 days."))
	s := &streamer{json: msg[:len(msg)/2], events: events(start, textStart(0), textDelta(0, "Refunds ")), after: cut}
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

// TestStreamMalformed: a stream that ends cleanly before message_stop, or
// whose events do not add up to a message, is an error and no reply.
func TestStreamMalformed(t *testing.T) {
	for name, evs := range map[string][]string{
		"ends early":      events(start, textStart(0), textDelta(0, "Refunds ")),
		"a missing block": events(start, textStart(0), textDelta(0, "Refunds "), textDelta(1, "take"), end("end_turn")),
	} {
		m := serveStream(t, &streamer{events: evs})
		r, pieces, err := streamed(context.Background(), m, request())
		if err == nil || r != nil || !slices.Equal(pieces, []string{"Refunds "}) {
			t.Fatalf("%s: reply %v, err %v, Output given %q; want an error, no reply, and the text before", name, r, err, pieces)
		}
	}
}

// TestStreamErrorEvent: an error event mid-stream (the response began with
// 200) is classified as the HTTP error its type stands for: overloaded and
// rate limited are retryable, a refused request is not.
func TestStreamErrorEvent(t *testing.T) {
	for _, tc := range []struct {
		typ    string
		status int
	}{
		{"overloaded_error", 529},
		{"rate_limit_error", 429},
		{"api_error", 500},
		{"invalid_request_error", 400},
	} {
		evs := events(start, textStart(0), textDelta(0, "Refunds "), event("error", apiError(tc.typ, "stopped")))
		m := serveStream(t, &streamer{events: evs})
		r, pieces, err := streamed(context.Background(), m, request())
		var he *model.HTTPError
		if r != nil || !errors.As(err, &he) || he.StatusCode != tc.status || he.Message != "stopped" {
			t.Fatalf("%s: reply %v, err %#v; want an HTTPError %d with the message", tc.typ, r, err, tc.status)
		}
		if errors.Is(err, model.ErrRetryable) != (model.Classify(tc.status) == model.ClassRetryable) {
			t.Fatalf("%s: err %v, retryable %v", tc.typ, err, errors.Is(err, model.ErrRetryable))
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
	s := &streamer{events: events(start, textStart(0), textDelta(0, "Refunds ")), after: func(r *http.Request) {
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
