package engine

// Tests of how a call's input is estimated for a model that cannot count
// it: 4 bytes a token, never below the provider's report of the previous
// call plus the estimate of what the input gained since, so that after the
// first call neither max_tokens nor max_cost_usd can be passed by a
// provider that bills consistently.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/model/openai"
	"github.com/reinhq/rein/internal/pricing"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/tools"
)

// bytesTokens is the step's estimate of a text's tokens: 4 bytes a token,
// rounded up.
func bytesTokens(n int) uint64 { return uint64(n+3) / 4 }

// billModel cannot count tokens. It asks for a search at every call and
// reports input tokens for each (0: no usage) and output tokens cut to
// the cap it is given.
type billModel struct {
	input, output uint64
	// askFirst makes the first call ask a person instead.
	askFirst bool

	mu    sync.Mutex
	calls int
}

func (m *billModel) Next(_ context.Context, req *model.Request) (*model.Reply, error) {
	m.mu.Lock()
	m.calls++
	m.mu.Unlock()
	out := m.output
	if req.MaxOutputTokens > 0 && out > req.MaxOutputTokens {
		out = req.MaxOutputTokens
	}
	d := callDecision("search", fmt.Sprintf("call-%d", req.Step), nil)
	if m.askFirst && req.Step == 1 {
		d = &reinv1.Decision{Action: &reinv1.Decision_AskHuman{AskHuman: &reinv1.AskHuman{Question: "which invoice?"}}}
	}
	return &model.Reply{Decision: d, Usage: usage(m.input, out)}, nil
}

func (m *billModel) Calls() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls
}

// billPrice charges $1,000 a million tokens, input and output: $0.001 a
// token.
var billPrice = pricing.Price{InputPerMTok: 1000, OutputPerMTok: 1000}

// billRun runs a contract on test/bill with budget b against m, and
// returns its state, its log and the size of each call's input.
func billRun(t *testing.T, m model.Model, b *reinv1.Budget) (runstate.State, []*reinv1.Event, []int) {
	t.Helper()
	e, s := setup(t, Config{Tools: searchTools(t), Prices: pricing.New(map[string]pricing.Price{"test/bill": billPrice}),
		Models: func(*reinv1.ModelSpec) (model.Model, error) { return m, nil }})
	c := testContract()
	c.Model = &reinv1.ModelSpec{Provider: "test", Name: "bill"}
	c.Budget = b
	st, evs := runToRest(t, e, s, c)
	return st, evs, inputSizes(t, s, evs)
}

// inputSizes is the size in bytes of each model call's input, read back
// from the blobs its model_requested names: what rein's 4-bytes-a-token
// estimate is taken from.
func inputSizes(t *testing.T, s Store, evs []*reinv1.Event) []int {
	t.Helper()
	var sizes []int
	var prev []string
	for _, ev := range ofType(evs, "model_requested") {
		mr := ev.GetModelRequested()
		full := append(append([]string{}, prev[:mr.GetCarriedBlobs()]...), mr.GetInputBlobs()...)
		prev = full
		n := 0
		for _, h := range full {
			b, err := blobOf(t, s, ev.GetRunId(), h)
			if err != nil {
				t.Fatalf("model_requested %d: blob %.12s…: %v", ev.GetSequence(), h, err)
			}
			n += len(b)
		}
		sizes = append(sizes, n)
	}
	return sizes
}

// wantEstimates checks each call's recorded input against the rule: the
// first is 4 bytes a token; each later one is that, or the previous call's
// reported input plus the estimate of what was added since, whichever is
// more.
func wantEstimates(t *testing.T, evs []*reinv1.Event, sizes []int, reported uint64) {
	t.Helper()
	for i, ev := range ofType(evs, "model_requested") {
		want := bytesTokens(sizes[i])
		if i > 0 {
			// Signed: a compaction can make the input smaller.
			if learned := int64(reported) + int64(bytesTokens(sizes[i])) - int64(bytesTokens(sizes[i-1])); learned > int64(want) {
				want = uint64(learned)
			}
		}
		if got := ev.GetModelRequested().GetInputTokens(); got != want {
			t.Errorf("call %d (input of %d bytes, previous reported %d tokens): input_tokens %d, want %d",
				i+1, sizes[i], reported, got, want)
		}
	}
}

// A provider that bills 120 input tokens a call for a tiny input: the
// estimate learns from its first report, so the call that would pass a
// limit is not made. Before, each call's input was estimated at 4 bytes a
// token (tens of tokens), and a fourth call was made past both limits.
func TestEstimateLearnsFromReports(t *testing.T) {
	for _, tc := range []struct {
		name   string
		budget *reinv1.Budget
		limit  string
	}{
		// $0.13 a call (120 + 10 tokens at $0.001): three calls are $0.39,
		// and a fourth's 120 input tokens alone cost more than the $0.11 left.
		{"max_cost_usd", &reinv1.Budget{MaxCostUsd: 0.5}, "max_cost_usd"},
		// 130 tokens a call: three calls are 390, and a fourth's 120 input
		// tokens leave no room for output in the 110 left.
		{"max_tokens", &reinv1.Budget{MaxTokens: 500}, "max_tokens"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &billModel{input: 120, output: 10}
			st, evs, sizes := billRun(t, m, tc.budget)

			wantStatus(t, st, evs, statusExhausted, tc.limit)
			if m.Calls() != 3 {
				t.Errorf("%d model calls, want 3: a fourth would pass the limit", m.Calls())
			}
			if max := tc.budget.GetMaxCostUsd(); max > 0 && st.CostUSD > max {
				t.Errorf("the run spent $%.6f of its $%.2f", st.CostUSD, max)
			}
			if max := tc.budget.GetMaxTokens(); max > 0 && st.Tokens() > max {
				t.Errorf("the run used %d of its %d tokens", st.Tokens(), max)
			}
			wantEstimates(t, evs, sizes, 120)
			// The first call has no report to learn from: it is estimated.
			if first := ofType(evs, "model_requested")[0].GetModelRequested().GetInputTokens(); first != bytesTokens(sizes[0]) || first >= 120 {
				t.Errorf("the first call's input is estimated at %d tokens, want 4 bytes a token of %d bytes", first, sizes[0])
			}
		})
	}
}

// A compaction between two calls makes the input smaller: the estimate is
// the report less the estimate of what was compacted away, and still never
// below 4 bytes a token.
func TestEstimateAcrossCompaction(t *testing.T) {
	m := &billModel{input: 2000, output: 10}
	ex := searchTools(t, tools.FixtureResult{Output: mustValue(t, strings.Repeat("invoice 42: total 1,234.00 EUR. ", 30))})
	e, s := setup(t, Config{Tools: ex, Models: func(*reinv1.ModelSpec) (model.Model, error) { return m, nil }})
	c := testContract()
	c.Model = &reinv1.ModelSpec{Provider: "test", Name: "bill"}
	c.Budget = &reinv1.Budget{MaxSteps: 6, MaxTokens: 1_000_000, MaxContextChars: 3000}
	st, evs := runToRest(t, e, s, c)

	wantStatus(t, st, evs, statusExhausted, "max_steps")
	sizes := inputSizes(t, s, evs)
	shrank := false
	for i := 1; i < len(sizes); i++ {
		shrank = shrank || sizes[i] < sizes[i-1]
	}
	if len(ofType(evs, "context_compacted")) == 0 || !shrank {
		t.Fatalf("no call's input shrank (sizes %v); the test needs a compaction between two calls:\n%s", sizes, dump(evs))
	}
	wantEstimates(t, evs, sizes, 2000)
}

// What the estimate learned is rebuilt from the log: a run paused for a
// person and carried on by a new engine estimates its next call from the
// report of the call before the pause.
func TestEstimateLearnedSurvivesRestart(t *testing.T) {
	bs, _ := openStore(t)
	m := &billModel{input: 120, output: 10, askFirst: true}
	cfg := Config{Store: bs, Tools: searchTools(t), Models: func(*reinv1.ModelSpec) (model.Model, error) { return m, nil }}
	c := testContract()
	c.Model = &reinv1.ModelSpec{Provider: "test", Name: "bill"}
	c.Budget = &reinv1.Budget{MaxSteps: 2, MaxTokens: 100_000}
	e1 := newEngine(t, cfg)
	st := startRun(t, e1, c)
	waitRun(t, e1, st.RunID)
	e1.Close()

	e2 := newEngine(t, cfg)
	if _, err := e2.ProvideInput(testCtx(t), st.RunID, "invoice 42", "alice"); err != nil {
		t.Fatal(err)
	}
	waitRun(t, e2, st.RunID)
	got, evs := stored(t, bs, st.RunID)
	wantStatus(t, got, evs, statusExhausted, "max_steps")
	wantCount(t, evs, "model_requested", 2)
	wantEstimates(t, evs, inputSizes(t, bs, evs), 120)
}

// The twin: a provider that reports fewer input tokens than rein estimates
// (or none) does not lower the estimate below 4 bytes a token, and the run
// goes on to its step limit.
func TestEstimateNeverBelowBytes(t *testing.T) {
	for _, reported := range []uint64{1, 0} {
		t.Run(fmt.Sprint("reported ", reported), func(t *testing.T) {
			m := &billModel{input: reported, output: 10}
			st, evs, sizes := billRun(t, m, &reinv1.Budget{MaxSteps: 4, MaxTokens: 100_000})

			wantStatus(t, st, evs, statusExhausted, "max_steps")
			for i, ev := range ofType(evs, "model_requested") {
				if got, want := ev.GetModelRequested().GetInputTokens(), bytesTokens(sizes[i]); got != want {
					t.Errorf("call %d: input_tokens %d, want %d, 4 bytes a token of its %d bytes", i+1, got, want, sizes[i])
				}
			}
		})
	}
}

// oaiBiller is an OpenAI-compatible server that answers every chat
// completion with a search and bills 120 prompt and 12 completion tokens.
type oaiBiller struct {
	mu    sync.Mutex
	calls int
}

func (b *oaiBiller) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	b.mu.Lock()
	b.calls++
	n := b.calls
	b.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = fmt.Fprintf(w, `{"id":"chatcmpl-%d","object":"chat.completion","created":1,"model":"gpt-test","choices":[{"index":0,"finish_reason":"tool_calls",`+
		`"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_%d","type":"function","function":{"name":"search","arguments":"{}"}}]}}],`+
		`"usage":{"prompt_tokens":120,"completion_tokens":12,"total_tokens":132}}`, n, n)
}

// The run: max_cost_usd 0.50 against an OpenAI-compatible server
// that bills 120 input tokens a call, at $0.001 a token: $0.132 a call.
// Estimated at 4 bytes a token, the fourth call was made and the run spent
// $0.528; learning from the first report, it stops after three ($0.396).
func TestEstimateLearnsFromOpenAICompatibleServer(t *testing.T) {
	b := &oaiBiller{}
	srv := httptest.NewServer(b)
	t.Cleanup(srv.Close)
	spec := &reinv1.ModelSpec{Provider: openai.Provider, Name: "gpt-test", BaseUrl: srv.URL + "/v1"}
	e, s := setup(t, Config{Tools: searchTools(t), Prices: pricing.New(map[string]pricing.Price{"openai/gpt-test": billPrice}),
		Models: func(spec *reinv1.ModelSpec) (model.Model, error) { return openai.New(spec, "sk-test") }})
	c := testContract()
	c.Model = spec
	c.Budget = &reinv1.Budget{MaxCostUsd: 0.5}
	st, evs := runToRest(t, e, s, c)

	wantStatus(t, st, evs, statusExhausted, "max_cost_usd")
	if st.CostUSD > 0.5 {
		t.Errorf("the run spent $%.6f of its $0.50", st.CostUSD)
	}
	b.mu.Lock()
	calls := b.calls
	b.mu.Unlock()
	if calls != 3 {
		t.Errorf("%d calls to the server, want 3 ($0.396): a fourth would pass $0.50", calls)
	}
	wantEstimates(t, evs, inputSizes(t, s, evs), 120)
	br := ofType(evs, "budget_reached")
	if len(br) != 1 || !strings.Contains(br[0].GetBudgetReached().GetDetail(), "input tokens cost") {
		t.Errorf("budget_reached = %v, want the next call's input named as what does not fit", br)
	}
}
