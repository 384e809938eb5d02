package secret

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// TestHandler: the message, string and error attributes, groups and
// attributes given With are redacted before the line is formatted, in
// text and JSON alike; a line without a secret is written as it would be
// without the Handler.
func TestHandler(t *testing.T) {
	r := keys()
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			var got, plain bytes.Buffer
			newLog := func(w *bytes.Buffer, r *Redactor) *slog.Logger {
				h := slog.Handler(slog.NewTextHandler(w, nil))
				if format == "json" {
					h = slog.NewJSONHandler(w, nil)
				}
				return slog.New(Handler(h, r))
			}
			log := newLog(&got, r).With("principal", "p "+openaiKey)
			log.WithGroup("run").Warn("run ended with "+openaiKey,
				"error", errors.New(`refused "`+openaiKey+`"`),
				"reason", anthropicKey,
				slog.Group("call", "header", "Bearer "+openaiKey),
				"detail", struct{ Body string }{"Bearer " + openaiKey},
				"steps", 3)
			line := got.String()
			if strings.Contains(line, openaiKey) || strings.Contains(line, anthropicKey) {
				t.Fatalf("a key was logged:\n%s", line)
			}
			if n := strings.Count(line, "[secret OPENAI_API_KEY]"); n != 5 {
				t.Errorf("%d markers of OPENAI_API_KEY, want 5:\n%s", n, line)
			}
			if !strings.Contains(line, "[secret ANTHROPIC_API_KEY]") {
				t.Errorf("no marker of ANTHROPIC_API_KEY:\n%s", line)
			}
			// The failure twin: a line without a secret is as it was.
			got.Reset()
			for _, l := range []*slog.Logger{newLog(&got, r), newLog(&plain, nil)} {
				l.Info("finished call", "grpc.code", "OK", "error", errors.New("openai answered HTTP 500"), "steps", 3, "detail", struct{ N int }{4})
			}
			if strip(got.String()) != strip(plain.String()) {
				t.Errorf("a line without a secret changed:\n%s\nwant\n%s", got.String(), plain.String())
			}
		})
	}
}

// strip removes a log line's time, which differs between two lines.
func strip(line string) string {
	if i := strings.Index(line, "level"); i >= 0 {
		return line[i:]
	}
	return line
}

func TestHandlerNil(t *testing.T) {
	h := slog.NewTextHandler(&bytes.Buffer{}, nil)
	if Handler(h, nil) != slog.Handler(h) {
		t.Error("Handler with a nil Redactor is not the handler itself")
	}
}
