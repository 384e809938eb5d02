package engine

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/secret"
	"github.com/reinhq/rein/internal/tools"
)

const testKey = "sk-test-harness-0123456789"

var testSecrets = secret.New(map[string]string{"OPENAI_API_KEY": testKey})

// leakyRun is a run whose every outside text holds the key: a tool's
// output, a tool's error, a reply that is no decision, and a model error
// (a provider echoing the key it refused), which fails the run. It
// returns the run's events, what the model was shown, and the store's
// file once the engine and the store are closed.
func leakyRun(t *testing.T, secrets *secret.Redactor) ([]*reinv1.Event, []model.Request, []byte) {
	t.Helper()
	s, path := openStore(t)
	// The replies come from the model, not from the contract's script,
	// which is the caller's text and stored as it was given.
	replies := []*reinv1.ScriptedReply{
		callReply("search", "c1", nil),
		callReply("search", "c2", nil),
		rawReply("not a decision, but a key: " + testKey),
		errorReply("Incorrect API key provided: Bearer " + testKey),
	}
	spy := &modelSpy{}
	models := spy.models(func(*reinv1.ModelSpec) (model.Model, error) { return model.NewScript(replies), nil })
	e := newEngine(t, Config{Store: s, Secrets: secrets, Models: models, Tools: searchTools(t,
		tools.FixtureResult{Output: mustValue(t, map[string]any{"env": "OPENAI_API_KEY=" + testKey})},
		tools.FixtureResult{Error: "upstream refused Bearer " + testKey},
	)})
	st, evs := runToRest(t, e, s, testContract(finalReply("unused")))
	wantStatus(t, st, evs, statusFailed, "model_error")
	e.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return evs, spy.requests(), raw
}

// holding lists the events whose encoding holds s.
func holding(t *testing.T, evs []*reinv1.Event, s string) []string {
	t.Helper()
	var out []string
	for _, ev := range evs {
		b, err := proto.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(s)) {
			out = append(out, payloadName(ev))
		}
	}
	return out
}

func payloadName(ev *reinv1.Event) string { return payloads([]*reinv1.Event{ev})[0] }

// TestSecretsNeverRecorded: with Config.Secrets, no event, no stored byte
// and no request to the model holds the key; the events that carried it
// name the secret instead.
func TestSecretsNeverRecorded(t *testing.T) {
	evs, reqs, raw := leakyRun(t, testSecrets)
	if got := holding(t, evs, testKey); len(got) > 0 {
		t.Errorf("the key is in %v:\n%s", got, dump(evs))
	}
	if bytes.Contains(raw, []byte(testKey)) {
		t.Error("the key is in the store's file")
	}
	marked := strings.Join(holding(t, evs, "[secret OPENAI_API_KEY]"), ",")
	for _, want := range []string{"tool_returned", "decision_rejected", "status_changed"} {
		if !strings.Contains(marked, want) {
			t.Errorf("no %s names the secret (those that do: %s)", want, marked)
		}
	}
	if n := strings.Count(marked, "tool_returned"); n != 2 {
		t.Errorf("%d tool_returned name the secret, want 2 (the output and the error)", n)
	}
	for i, req := range reqs {
		for _, turn := range req.Transcript {
			if o := turn.Observation; o != nil && strings.Contains(o.Text, testKey) {
				t.Errorf("call %d showed the model the key in an observation from %s", i+1, o.Source)
			}
		}
	}
}

// TestSecretsRecordedWithoutRedactor is the failure twin: without
// Config.Secrets the same run records the key (so the test above does
// look where it is).
func TestSecretsRecordedWithoutRedactor(t *testing.T) {
	evs, _, raw := leakyRun(t, nil)
	if got := holding(t, evs, testKey); len(got) == 0 || !bytes.Contains(raw, []byte(testKey)) {
		t.Errorf("without a redactor the key is in %v and the file holds it: %v; want both", got, bytes.Contains(raw, []byte(testKey)))
	}
}

// TestSecretsRedactedFromChecks: a check that prints a key its allowlist
// lets in records the marker, not the key.
func TestSecretsRedactedFromChecks(t *testing.T) {
	t.Setenv("REIN_CHECK_KEY", testKey)
	e, s := setup(t, Config{Workspace: t.TempDir(), Secrets: secret.New(map[string]string{"REIN_CHECK_KEY": testKey})})
	t.Setenv("REIN_CHECK_PLAIN", "an ordinary value")
	// The check prints the key less its first byte, which no redaction
	// could catch:
	// the key never reaches it. The twin: an ordinary variable does.
	c := checkContract([]*reinv1.Check{{Name: "env", Argv: []string{"sh", "-c", "printenv REIN_CHECK_KEY | cut -c2-; env"}, Env: []string{"REIN_CHECK_KEY", "REIN_CHECK_PLAIN"}}}, finalReply("done"))
	st, evs := runToRest(t, e, s, c)
	wantStatus(t, st, evs, statusCompleted, "final_answer")
	tail := checksOf(t, evs)[0].GetResults()[0].GetOutputTail()
	if strings.Contains(tail, "REIN_CHECK_KEY") || strings.Contains(tail, testKey[1:]) {
		t.Errorf("the check's output is %q: the server's secret reached the check", tail)
	}
	if !strings.Contains(tail, "REIN_CHECK_PLAIN=an ordinary value") {
		t.Errorf("the check's output is %q, want the ordinary variable", tail)
	}
}

// lookingTools is an executor that looks writes up, and whose every answer
// holds the key.
type lookingTools struct{ tools.Executor }

func (lookingTools) Lookup(context.Context, tools.Call, string) (*structpb.Value, bool, error) {
	return structpb.NewStringValue("receipt " + testKey), true, nil
}

// uncounted is a model that cannot count tokens.
type uncounted struct{}

func (uncounted) Next(context.Context, *model.Request) (*model.Reply, error) {
	return nil, errors.New("unused")
}

// TestRedactedWrappersKeepWhatTheyWrap: a redacted model that counts
// tokens still does, one that does not still does not; a redacted
// executor looks writes up when its own does and says tools.ErrNoLookup
// when not; errors still are what they wrap; no tools stay no tools.
func TestRedactedWrappersKeepWhatTheyWrap(t *testing.T) {
	build := redactModels(model.New, testSecrets)
	m, err := build(&reinv1.ModelSpec{Provider: "script", Script: []*reinv1.ScriptedReply{errorReply("Bearer " + testKey)}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.(model.TokenCounter); !ok {
		t.Error("the redacted scripted model no longer counts tokens")
	}
	if _, err := m.Next(testCtx(t), &model.Request{Step: 1}); err == nil || err.Error() != "Bearer [secret OPENAI_API_KEY]" {
		t.Errorf("Next's error is %v, want the key's marker", err)
	}
	plain, _ := redactModels(func(*reinv1.ModelSpec) (model.Model, error) { return uncounted{}, nil }, testSecrets)(nil)
	if _, ok := plain.(redactedModel); !ok {
		t.Errorf("a model that counts no tokens became %T", plain)
	}
	if _, err := build(&reinv1.ModelSpec{Provider: "nope " + testKey}); !errors.Is(err, model.ErrUnknownProvider) || strings.Contains(err.Error(), testKey) {
		t.Errorf("building an unknown model: %v; want ErrUnknownProvider, redacted", err)
	}

	if redactTools(nil, testSecrets) != nil {
		t.Error("no tools became an executor")
	}
	fix := tools.NewFixtures(map[string][]tools.FixtureResult{"w": {{Preview: mustValue(t, "would write "+testKey)}}})
	x := redactTools(fix, testSecrets).(tools.Looker)
	ctx := testCtx(t)
	if _, _, err := x.Lookup(ctx, tools.Call{Tool: "w"}, "op"); err != nil {
		t.Errorf("the fixtures' Lookup through the wrapper: %v", err)
	}
	if p, err := x.(tools.Executor).Propose(ctx, tools.Call{Tool: "w"}); err != nil || p.GetStringValue() != "would write [secret OPENAI_API_KEY]" {
		t.Errorf("Propose = %v, %v; want the preview with the key's marker", p, err)
	}
	if _, err := x.(tools.Executor).Read(ctx, tools.Call{Tool: "missing " + testKey}); !errors.Is(err, tools.ErrNoTool) || strings.Contains(err.Error(), testKey) {
		t.Errorf("Read of a missing tool: %v; want ErrNoTool, redacted", err)
	}
	looks := redactTools(lookingTools{fix}, testSecrets).(tools.Looker)
	if r, ok, err := looks.Lookup(ctx, tools.Call{}, "op"); err != nil || !ok || r.GetStringValue() != "receipt [secret OPENAI_API_KEY]" {
		t.Errorf("Lookup = %v, %v, %v; want the receipt with the key's marker", r, ok, err)
	}
	if _, _, err := redactTools(&countingTools{inner: fix}, testSecrets).(tools.Looker).Lookup(ctx, tools.Call{}, "op"); !errors.Is(err, tools.ErrNoLookup) {
		t.Errorf("Lookup on an executor without one: %v, want ErrNoLookup", err)
	}
}

// TestRedactedModelStreams: the text a call streams is redacted as its
// reply is, a key cut across two pieces too, and all of it is passed on
// before Next returns; without secrets it passes as written.
func TestRedactedModelStreams(t *testing.T) {
	half := len(testKey) / 2
	reply := finalReply("done")
	reply.Chunks = []*reinv1.ScriptedChunk{{Text: "the key is " + testKey[:half]}, {Text: testKey[half:] + ", done"}}
	spec := &reinv1.ModelSpec{Provider: "script", Script: []*reinv1.ScriptedReply{reply}}
	for _, tc := range []struct {
		name    string
		secrets *secret.Redactor
		want    string
	}{
		{"with secrets", testSecrets, "the key is [secret OPENAI_API_KEY], done"},
		{"without", nil, "the key is " + testKey + ", done"},
	} {
		m, err := redactModels(model.New, tc.secrets)(spec)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		if _, err := m.Next(testCtx(t), &model.Request{Step: 1, Output: func(s string) { got = append(got, s) }}); err != nil {
			t.Fatal(err)
		}
		if joined := strings.Join(got, ""); joined != tc.want {
			t.Errorf("%s: streamed %q, want %q", tc.name, joined, tc.want)
		}
	}
}

// TestRedactedModelCutStreamsNoKeyStart is the twin: a call that fails
// after writing the start of a key passes none of it on.
func TestRedactedModelCutStreamsNoKeyStart(t *testing.T) {
	half := len(testKey) / 2
	reply := &reinv1.ScriptedReply{Reply: &reinv1.ScriptedReply_Error{Error: "upstream 503"},
		Chunks: []*reinv1.ScriptedChunk{{Text: "the key is " + testKey[:half]}}}
	m, err := redactModels(model.New, testSecrets)(&reinv1.ModelSpec{Provider: "script", Script: []*reinv1.ScriptedReply{reply}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	if _, err := m.Next(testCtx(t), &model.Request{Step: 1, Output: func(s string) { got = append(got, s) }}); err == nil {
		t.Fatal("the call did not fail")
	}
	if joined := strings.Join(got, ""); strings.Contains(joined, testKey[:half]) {
		t.Fatalf("a cut call streamed the start of the key: %q", joined)
	}
}
