package secret

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

const (
	openaiKey    = "sk-proj-0123456789abcdef"
	anthropicKey = "sk-ant-api03-fedcba9876543210"
)

func keys() *Redactor {
	return New(map[string]string{"OPENAI_API_KEY": openaiKey, "ANTHROPIC_API_KEY": anthropicKey})
}

func TestRedact(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"every occurrence, each named", "Bearer " + openaiKey + " then " + anthropicKey + " and " + openaiKey + ".",
			"Bearer [secret OPENAI_API_KEY] then [secret ANTHROPIC_API_KEY] and [secret OPENAI_API_KEY]."},
		{"the whole text", openaiKey, "[secret OPENAI_API_KEY]"},
		{"inside a word", "x" + openaiKey + "y", "x[secret OPENAI_API_KEY]y"},
		// The failure twins: text without a value is left as it is.
		{"no secret", "Incorrect API key provided: sk-proj-****cdef.", "Incorrect API key provided: sk-proj-****cdef."},
		{"a value cut short", openaiKey[:len(openaiKey)-1], openaiKey[:len(openaiKey)-1]},
		{"empty", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := keys()
			if got := r.Redact(tc.in); got != tc.want {
				t.Errorf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if got := r.Holds(tc.in); got != (tc.in != tc.want) {
				t.Errorf("Holds(%q) = %v", tc.in, got)
			}
		})
	}
}

// TestNewSkipsShortValues: an empty or short value (under MinLen) is not
// redacted, so that it cannot mangle ordinary text; the values beside it
// still are.
func TestNewSkipsShortValues(t *testing.T) {
	r := New(map[string]string{"EMPTY": "", "PORT": "8080", "FLAG": "true", "SEVEN": "abcdefg", "KEY": openaiKey})
	in := "port 8080 is true; abcdefg; " + openaiKey
	if got, want := r.Redact(in), "port 8080 is true; abcdefg; [secret KEY]"; got != want {
		t.Errorf("Redact = %q, want %q", got, want)
	}
	if r := New(map[string]string{"EMPTY": "", "PORT": "8080"}); r != nil {
		t.Errorf("New of short values only = %v, want nil", r)
	}
	if r := New(); r != nil {
		t.Errorf("New() = %v, want nil", r)
	}
}

// TestNewLongestValueWins: a value that holds another is redacted whole,
// and one value under several names names them all; a name with two
// values (a --secrets file's and the environment's) has both redacted.
func TestNewLongestValueWins(t *testing.T) {
	r := New(map[string]string{"SHORT": "sk-abcdefgh", "LONG": "sk-abcdefgh-ijklmnop", "ALSO": "sk-abcdefgh-ijklmnop"},
		map[string]string{"SHORT": "another-value-1"})
	in := "sk-abcdefgh-ijklmnop sk-abcdefgh another-value-1"
	if got, want := r.Redact(in), "[secret ALSO, LONG] [secret SHORT] [secret SHORT]"; got != want {
		t.Errorf("Redact = %q, want %q", got, want)
	}
}

func TestNilRedactsNothing(t *testing.T) {
	var r *Redactor
	in := "Bearer " + openaiKey
	if r.Redact(in) != in || r.Holds(in) {
		t.Error("a nil Redactor changed or found something")
	}
	err := errors.New(in)
	if r.Error(err) != err {
		t.Error("a nil Redactor's Error is not the error itself")
	}
	v := structpb.NewStringValue(in)
	if Message(r, v) != v {
		t.Error("a nil Redactor's Message is not the message itself")
	}
}

// TestError: the redacted error says which secret it held, and still is
// what it wraps; an error without a secret is returned as it is.
func TestError(t *testing.T) {
	r := keys()
	cause := fmt.Errorf("openai refused the API key (Incorrect API key provided: Bearer %s): %w", openaiKey, fs.ErrPermission)
	err := r.Error(cause)
	if want := "openai refused the API key (Incorrect API key provided: Bearer [secret OPENAI_API_KEY]): permission denied"; err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
	if !errors.Is(err, fs.ErrPermission) || !errors.Is(err, cause) {
		t.Error("the redacted error does not wrap its cause")
	}
	if wrapped := fmt.Errorf("the model call failed: %w", err); strings.Contains(wrapped.Error(), openaiKey) {
		t.Errorf("wrapping the redacted error brought the key back: %s", wrapped)
	}
	plain := errors.New("openai answered HTTP 500")
	if r.Error(plain) != plain {
		t.Error("an error without a secret was replaced")
	}
	if r.Error(nil) != nil {
		t.Error("Error(nil) is not nil")
	}
}

// TestMessage: every string of a message is redacted, in a copy; the
// original is left as it was. A message without a secret is returned
// itself.
func TestMessage(t *testing.T) {
	r := keys()
	out, err := structpb.NewValue(map[string]any{
		"text":        "OPENAI_API_KEY=" + openaiKey,
		"list":        []any{"fine", anthropicKey, 42.0},
		openaiKey:     "a key as a key",
		"nested":      map[string]any{"deep": []any{map[string]any{"k": "x " + openaiKey}}},
		"untouched":   "ok",
		"not a value": true,
	})
	if err != nil {
		t.Fatal(err)
	}
	before := proto.Clone(out)
	got := Message(r, out)
	if !proto.Equal(out, before) {
		t.Error("Message modified its argument")
	}
	want, _ := structpb.NewValue(map[string]any{
		"text":                    "OPENAI_API_KEY=[secret OPENAI_API_KEY]",
		"list":                    []any{"fine", "[secret ANTHROPIC_API_KEY]", 42.0},
		"[secret OPENAI_API_KEY]": "a key as a key",
		"nested":                  map[string]any{"deep": []any{map[string]any{"k": "x [secret OPENAI_API_KEY]"}}},
		"untouched":               "ok",
		"not a value":             true,
	})
	if !proto.Equal(got, want) {
		t.Errorf("Message =\n%v\nwant\n%v", got, want)
	}
	d := &reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: "the key is " + openaiKey}}}
	if got := Message(r, d).GetFinalAnswer().GetText(); got != "the key is [secret OPENAI_API_KEY]" {
		t.Errorf("a decision's answer redacted to %q", got)
	}
	// The failure twin: nothing to redact, no copy.
	clean, _ := structpb.NewValue(map[string]any{"text": "invoice 42: total 1,234.00 EUR", "n": 1.0})
	if Message(r, clean) != clean {
		t.Error("a message without a secret was copied")
	}
	var none *structpb.Value
	if Message(r, none) != nil {
		t.Error("a nil message came back set")
	}
}

// BenchmarkRedactClean is the cost of Redact on a log-sized text without a
// secret, the common case: no copy.
func BenchmarkRedactClean(b *testing.B) {
	r := keys()
	s := strings.Repeat("finished call grpc.method=GetRun grpc.code=OK ", 8)
	b.ReportAllocs()
	for b.Loop() {
		_ = r.Redact(s)
	}
}
