package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/engine"
	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/model/anthropic"
	"github.com/reinhq/rein/internal/model/cachetest"
	"github.com/reinhq/rein/internal/model/openai"
	"github.com/reinhq/rein/internal/pricing"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/tools"
)

// cacheCostSteps is the synthetic task's length: 29 searches and an answer.
const cacheCostSteps = 30

// CacheCost is what prompt caching saves: the refund and invoice examples
// (their scripted replies, read from examples/ in the working
// directory or the nearest above it) and a 30-step synthetic task with a long contract, each run
// through the engine against the stand-in Anthropic (claude-sonnet-4-5's
// prices) and OpenAI (gpt-4.1's) of internal/model/cachetest, with
// caching on and off. Figure is the USD billed with caching, Baseline
// without, summed over every task and provider; Ratio their quotient
// (lower saves more; Target is the most it may be). Extra holds each
// run's tokens billed (input, cache write, cache read, output) and USD,
// as "<provider>/<task>/<on|off>/<kind>". Rounds are not repeated: the
// stand-ins' bills do not vary.
func CacheCost(ctx context.Context, o Options) (Result, error) {
	r := Result{Scenario: "cache-cost", Unit: "USD", Target: cacheCostTarget, Rounds: 1, Extra: map[string]float64{}}
	be, err := o.backend(r.Scenario)
	if err != nil {
		return r, err
	}
	dir, err := tempDir(o, r.Scenario)
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	tasks, err := cacheCostTasks()
	if err != nil {
		return r, err
	}
	for _, p := range cacheCostProviders {
		for _, task := range tasks {
			for _, on := range []bool{true, false} {
				path := filepath.Join(dir, fmt.Sprintf("%s-%s-%v.db", p.provider, task.name, on))
				c, usd, err := cacheCostRun(ctx, be, path, p, task, on)
				if err != nil {
					return r, fmt.Errorf("%s %s (caching %v): %w", p.provider, task.name, on, err)
				}
				side := "off"
				if on {
					side = "on"
					r.Figure += usd
				} else {
					r.Baseline += usd
				}
				key := p.provider + "/" + task.name + "/" + side + "/"
				r.Extra[key+"input"] = float64(c.Input)
				r.Extra[key+"cache_write"] = float64(c.Write)
				r.Extra[key+"cache_read"] = float64(c.Read)
				r.Extra[key+"output"] = float64(c.Output)
				r.Extra[key+"usd"] = usd
				r.Runs++
			}
		}
	}
	if r.Baseline > 0 {
		r.Ratio = r.Figure / r.Baseline
	}
	r.Figures, r.Baselines, r.Ratios = []float64{r.Figure}, []float64{r.Baseline}, []float64{r.Ratio}
	r.Met = r.Ratio <= r.Target
	return r, nil
}

// cacheCostTarget is the most the cached runs may cost against the
// uncached ones.
const cacheCostTarget = 0.5

// cacheCostProvider is a stand-in provider and the model a run names.
type cacheCostProvider struct {
	provider, name, priced string
	stand                  func(cachetest.Config) cacheStandIn
	build                  func(*reinv1.ModelSpec) (model.Model, error)
}

// cacheStandIn is a caching stand-in: its HTTP API and what it billed.
type cacheStandIn interface {
	http.Handler
	Calls() []cachetest.Call
	Bill() float64
}

var cacheCostProviders = []cacheCostProvider{
	{provider: anthropic.Provider, name: "claude-sonnet-4-5", priced: "claude-sonnet-4-5",
		stand: func(c cachetest.Config) cacheStandIn { return cachetest.NewAnthropic(c) },
		build: func(spec *reinv1.ModelSpec) (model.Model, error) { return anthropic.New(spec, "sk-bench") }},
	{provider: openai.Provider, name: "gpt-4.1", priced: "gpt-4.1",
		stand: func(c cachetest.Config) cacheStandIn { return cachetest.NewOpenAI(c) },
		build: func(spec *reinv1.ModelSpec) (model.Model, error) { return openai.New(spec, "sk-bench") }},
}

// cacheCostTask is a task the scenario runs: its contract, the stand-in's
// replies and the tools' fixtures.
type cacheCostTask struct {
	name     string
	contract *reinv1.TaskContract
	answers  func(n int) cachetest.Answer
	fixtures func() (*tools.Fixtures, error)
}

// cacheCostTasks are the refund and invoice examples and the synthetic
// 30-step task.
func cacheCostTasks() ([]cacheCostTask, error) {
	var out []cacheCostTask
	for _, name := range []string{"refund", "invoice"} {
		t, err := exampleTask(name)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	synthetic := &reinv1.TaskContract{
		Goal:   "find the invoice total\n" + strings.Repeat("Read every page of the ledger before you answer. ", 400),
		Tools:  []*reinv1.ToolGrant{{Name: "search", Description: "Search the ledger.", Tier: reinv1.ToolTier_TOOL_TIER_READ}},
		Budget: &reinv1.Budget{MaxSteps: cacheCostSteps + 5},
	}
	out = append(out, cacheCostTask{name: "synthetic-30", contract: synthetic, answers: cachetest.Searches(cacheCostSteps),
		fixtures: func() (*tools.Fixtures, error) {
			return tools.ParseFixtures([]byte(`{"search": [{"output": "invoice 42: total 1,234.00 EUR"}]}`))
		}})
	return out, nil
}

// exampleTask reads examples/NAME: the task, the scripted replies (as the
// stand-in's answers; a reply that is no decision is left out, since a
// provider's text is always one) and the tools' fixtures.
func exampleTask(name string) (cacheCostTask, error) {
	dir, err := examplesDir(name)
	if err != nil {
		return cacheCostTask{}, err
	}
	task, err := os.ReadFile(filepath.Join(dir, "task.json"))
	if err != nil {
		return cacheCostTask{}, err
	}
	c := &reinv1.TaskContract{}
	if err := protojson.Unmarshal(task, c); err != nil {
		return cacheCostTask{}, fmt.Errorf("%s: %w", filepath.Join(dir, "task.json"), err)
	}
	script, err := os.ReadFile(filepath.Join(dir, "model.jsonl"))
	if err != nil {
		return cacheCostTask{}, err
	}
	var answers []cachetest.Answer
	sc := bufio.NewScanner(bytes.NewReader(script))
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		reply := &reinv1.ScriptedReply{}
		if err := protojson.Unmarshal(sc.Bytes(), reply); err != nil {
			return cacheCostTask{}, fmt.Errorf("%s: %w", filepath.Join(dir, "model.jsonl"), err)
		}
		a := cachetest.Answer{Output: reply.GetUsage().GetOutputTokens()}
		switch d := reply.GetDecision(); {
		case d.GetToolCall() != nil:
			a.Tool, a.Args = d.GetToolCall().GetTool(), d.GetToolCall().GetArguments().AsMap()
		case d.GetFinalAnswer() != nil:
			a.Text = d.GetFinalAnswer().GetText()
		default:
			continue
		}
		answers = append(answers, a)
	}
	return cacheCostTask{name: name, contract: c,
		answers: func(n int) cachetest.Answer { return answers[min(n, len(answers))-1] },
		fixtures: func() (*tools.Fixtures, error) {
			data, err := os.ReadFile(filepath.Join(dir, "tools.json"))
			if err != nil {
				return nil, err
			}
			return tools.ParseFixtures(data)
		}}, nil
}

// examplesDir is examples/NAME in the working directory or the nearest
// directory above it that has one.
func examplesDir(name string) (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		dir := filepath.Join(d, "examples", name)
		if _, err := os.Stat(filepath.Join(dir, "task.json")); err == nil {
			return dir, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no examples/%s/task.json in %s or a directory above it: the cache-cost scenario runs rein's examples; run rein-bench inside rein's repository", name, wd)
		}
	}
}

// cacheCostRun runs task once through the engine against a stand-in of p,
// with caching on or off, approving every proposal, and returns the
// tokens the stand-in billed (summed over the calls) and the USD the run
// spent, which it checks against the stand-in's bill.
func cacheCostRun(ctx context.Context, be Backend, path string, p cacheCostProvider, task cacheCostTask, on bool) (cachetest.Call, float64, error) {
	price, ok := pricing.Default().Lookup(p.provider, p.priced)
	if !ok {
		return cachetest.Call{}, 0, fmt.Errorf("no default price for %s/%s", p.provider, p.priced)
	}
	price.CacheOff = !on
	clock := cachetest.NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	f := p.stand(cachetest.Config{Price: price, Clock: clock, Answers: task.answers, NoCache: !on})
	srv := httptest.NewServer(f)
	defer srv.Close()
	fx, err := task.fixtures()
	if err != nil {
		return cachetest.Call{}, 0, err
	}
	s, err := be.Open(path, true)
	if err != nil {
		return cachetest.Call{}, 0, err
	}
	defer s.Close()
	e := engine.New(engine.Config{Store: s, Tools: fx, Clock: clock.Now, Models: p.build,
		Prices: pricing.New(map[string]pricing.Price{p.provider + "/" + p.name: price})})
	defer e.Close()
	c := proto.Clone(task.contract).(*reinv1.TaskContract)
	c.Model = &reinv1.ModelSpec{Provider: p.provider, Name: p.name, BaseUrl: srv.URL}
	st, _, err := e.Start(ctx, engine.StartRequest{RequestID: "cache-cost", Contract: c, Principal: "bench"})
	if err != nil {
		return cachetest.Call{}, 0, err
	}
	for {
		if err := e.Wait(ctx, st.RunID); err != nil {
			return cachetest.Call{}, 0, err
		}
		if st, err = s.Load(ctx, st.RunID); err != nil {
			return cachetest.Call{}, 0, err
		}
		prop := st.Pending.GetProposal()
		if st.Status != reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL || prop == nil {
			break
		}
		if _, err := e.DecideApproval(ctx, engine.Verdict{RunID: st.RunID, ProposalID: prop.GetProposalId(), ProposalHash: prop.GetHash(), Approve: true, Principal: "bench"}); err != nil {
			return cachetest.Call{}, 0, err
		}
	}
	if st.Status != reinv1.RunStatus_RUN_STATUS_COMPLETED {
		return cachetest.Call{}, 0, fmt.Errorf("the run ended %s, want completed", runstate.StatusName(st.Status))
	}
	var sum cachetest.Call
	for _, c := range f.Calls() {
		sum.Input += c.Input
		sum.Write += c.Write
		sum.Read += c.Read
		sum.Output += c.Output
	}
	if math.Abs(st.CostUSD-f.Bill()) >= 0.005 {
		return sum, st.CostUSD, fmt.Errorf("the run spent $%.6f, the stand-in billed $%.6f", st.CostUSD, f.Bill())
	}
	return sum, st.CostUSD, nil
}

// CacheCostRuns name the scenario's runs, "<provider>/<task>", in order:
// the prefixes of its Extra keys.
func CacheCostRuns() []string {
	var out []string
	for _, p := range cacheCostProviders {
		for _, t := range []string{"refund", "invoice", "synthetic-30"} {
			out = append(out, p.provider+"/"+t)
		}
	}
	return out
}
