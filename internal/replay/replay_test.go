package replay

import (
	"context"
	"crypto/sha256"
	"flag"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/engine"
	"github.com/reinhq/rein/internal/export"
	"github.com/reinhq/rein/internal/pricing"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store/mem"
	"github.com/reinhq/rein/internal/tools"
)

var update = flag.Bool("update", false, "record the runs under testdata/recordings again")

const recordings = "../../testdata/recordings"

// TestReplayRecordings replays every recorded run under testdata/recordings
// through the current harness: each must match event for event.
func TestReplayRecordings(t *testing.T) {
	if *update {
		record(t)
		recordTree(t)
	}
	files, err := filepath.Glob(filepath.Join(recordings, "*.rein"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no recordings in %s (%v); run go test ./internal/replay -update", recordings, err)
	}
	statuses := map[string]bool{}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			x := readExport(t, f)
			res, err := Run(context.Background(), x.GetEvents(), Options{Blobs: x.GetBlobs(), Children: TreeChildren(x)})
			if err != nil {
				t.Fatal(err)
			}
			if res.Divergence != nil {
				t.Fatalf("%s: %v", f, res.Divergence)
			}
			st, _ := runstate.ApplyAll(runstate.State{}, x.GetEvents())
			statuses[runstate.StatusName(st.Status)] = true
		})
	}
	// The recordings cover every status a harness-driven run reaches.
	for _, want := range []string{"completed", "needs_input", "needs_approval", "needs_budget", "budget_exhausted", "failed", "denied", "expired", "cancelled"} {
		if !statuses[want] {
			t.Errorf("no recording ends %s", want)
		}
	}
}

// TestReplayCatchesRoutingChange is the twin: when the recorded routing of
// a call is not this harness's (here a write the recording sent down the
// read path, as a harness that routed it as a read records it), the runs
// part at the exact sequence of the write's tool_requested, on its tier.
func TestReplayCatchesRoutingChange(t *testing.T) {
	x := readExport(t, filepath.Join(recordings, "approve.rein"))
	var want uint64
	for _, ev := range x.GetEvents() {
		if tr := ev.GetToolRequested(); tr != nil && tr.GetTier() == reinv1.ToolTier_TOOL_TIER_WRITE {
			tr.Tier = reinv1.ToolTier_TOOL_TIER_READ
			want = ev.GetSequence()
			break
		}
	}
	if want == 0 {
		t.Fatal("approve.rein has no write's tool_requested")
	}
	res, err := Run(context.Background(), x.GetEvents(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if d := res.Divergence; d == nil || d.Sequence != want || d.Field != "tool_requested.tier" ||
		d.Got.GetToolRequested().GetTier() != reinv1.ToolTier_TOOL_TIER_WRITE {
		t.Fatalf("divergence %v, want one at sequence %d on tool_requested.tier (the write's, routed as a write)", d, want)
	}
}

func TestReplayRefusesUnsupported(t *testing.T) {
	if _, err := Run(context.Background(), nil, Options{}); err == nil {
		t.Fatal("an empty recording was replayed")
	}
	x := readExport(t, filepath.Join(recordings, "approve.rein"))
	evs := append([]*reinv1.Event(nil), x.GetEvents()...)
	evs[1] = &reinv1.Event{RunId: "other", Sequence: 2}
	if _, err := Run(context.Background(), evs, Options{}); err == nil {
		t.Fatal("a recording mixing runs was replayed")
	}
}

func readExport(t *testing.T, path string) *reinv1.RunExport {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	x, err := export.Read(f, path)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// ---- recording ----

// fakeClock moves one second on every reading, from a fixed start.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(time.Second)
	return c.now
}

func (c *fakeClock) jump(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// seededIDs makes ULIDs whose random part comes from a generator seeded
// with name.
func seededIDs(name string) func(prefix string, now time.Time) string {
	var mu sync.Mutex
	entropy := ulid.Monotonic(rand.NewChaCha8(sha256.Sum256([]byte(name))), 0)
	return func(prefix string, now time.Time) string {
		mu.Lock()
		defer mu.Unlock()
		return prefix + ulid.MustNew(ulid.Timestamp(now), entropy).String()
	}
}

func reply(d *reinv1.Decision) *reinv1.ScriptedReply {
	return &reinv1.ScriptedReply{Reply: &reinv1.ScriptedReply_Decision{Decision: d}, Usage: &reinv1.Usage{InputTokens: 100, OutputTokens: 20}}
}

func call(tool, id string, args map[string]any) *reinv1.ScriptedReply {
	s, _ := structpb.NewStruct(args)
	return reply(&reinv1.Decision{Action: &reinv1.Decision_ToolCall{ToolCall: &reinv1.ToolCall{Tool: tool, CallId: id, Arguments: s}}})
}

func final(text string) *reinv1.ScriptedReply {
	return reply(&reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: text}}})
}

// retrying is r, failing its first n attempts as a rate limit that asks to
// wait 2s.
func retrying(r *reinv1.ScriptedReply, n uint32) *reinv1.ScriptedReply {
	r.FailAttempts, r.RetryAfterMs = n, 2000
	return r
}

func ask(q string) *reinv1.ScriptedReply {
	return reply(&reinv1.Decision{Action: &reinv1.Decision_AskHuman{AskHuman: &reinv1.AskHuman{Question: q}}})
}

func contract(budget *reinv1.Budget, script ...*reinv1.ScriptedReply) *reinv1.TaskContract {
	return &reinv1.TaskContract{
		Goal: "replay test",
		Tools: []*reinv1.ToolGrant{
			{Name: "get", Tier: reinv1.ToolTier_TOOL_TIER_READ},
			{Name: "refund", Tier: reinv1.ToolTier_TOOL_TIER_WRITE},
			{Name: "void", Tier: reinv1.ToolTier_TOOL_TIER_WRITE},
		},
		Budget:   budget,
		Approval: &reinv1.ApprovalPolicy{ProposalTtl: durationpb.New(time.Hour)},
		Model:    &reinv1.ModelSpec{Provider: "script", Script: script},
	}
}

// record runs each scenario through the real engine on an in-memory store
// with a clock that moves a second a reading, and writes its export.
func record(t *testing.T) {
	fixtures := &steering{Executor: tools.NewFixtures(map[string][]tools.FixtureResult{
		"get":    {{Output: structpb.NewStringValue("invoice INV-42: open, 1200 EUR")}, {Error: "invoice service timed out"}},
		"refund": {{Preview: structpb.NewStringValue("refund 1200 EUR"), Receipt: structpb.NewStringValue("re_1")}},
		"void":   {{Preview: structpb.NewStringValue("void INV-42"), Refused: "INV-42 was paid since the proposal"}},
	})}
	get := func(id string) *reinv1.ScriptedReply { return call("get", id, map[string]any{"id": "INV-42"}) }
	refund := call("refund", "w1", map[string]any{"amount": 1200})
	type person func(ctx context.Context, e *engine.Engine, clock *fakeClock, st runstate.State) error
	approve := func(yes, end bool) person {
		return func(ctx context.Context, e *engine.Engine, _ *fakeClock, st runstate.State) error {
			p := st.Pending.GetProposal()
			_, err := e.DecideApproval(ctx, engine.Verdict{RunID: st.RunID, ProposalID: p.GetProposalId(), ProposalHash: p.GetHash(),
				Approve: yes, Reason: "reviewed", EndRun: end, Principal: "bob"})
			return err
		}
	}
	input := func(ctx context.Context, e *engine.Engine, _ *fakeClock, st runstate.State) error {
		_, err := e.ProvideInput(ctx, st.RunID, "INV-42", "bob")
		return err
	}
	cancel := func(ctx context.Context, e *engine.Engine, _ *fakeClock, st runstate.State) error {
		_, err := e.Cancel(ctx, st.RunID, "", "principal:bob")
		return err
	}
	raise := func(ctx context.Context, e *engine.Engine, _ *fakeClock, st runstate.State) error {
		_, err := e.RaiseBudget(ctx, &reinv1.RaiseBudgetRequest{RunId: st.RunID, AddSteps: 2, Reason: "worth it"}, "bob")
		return err
	}
	extend := func(ctx context.Context, e *engine.Engine, _ *fakeClock, st runstate.State) error {
		_, err := e.RaiseBudget(ctx, &reinv1.RaiseBudgetRequest{RunId: st.RunID, ExtendDeadline: durationpb.New(time.Minute)}, "bob")
		return err
	}
	// slowFinal answers after 1.5 s of real time: a deadline 1 s after the
	// step's clock reading (the test clock ticks 1 s a reading) cuts it.
	slowFinal := final("done")
	slowFinal.DelayMs = 1500
	revise := func(ctx context.Context, e *engine.Engine, _ *fakeClock, st runstate.State) error {
		p := st.Pending.GetProposal()
		args, _ := structpb.NewStruct(map[string]any{"amount": 1000})
		_, err := e.DecideApproval(ctx, engine.Verdict{RunID: st.RunID, ProposalID: p.GetProposalId(), ProposalHash: p.GetHash(),
			Principal: "bob", Arguments: args})
		return err
	}
	pausing := &reinv1.Budget{MaxSteps: 1, OnExhausted: reinv1.BudgetAction_BUDGET_ACTION_PAUSE}
	expire := func(d time.Duration) person {
		return func(ctx context.Context, e *engine.Engine, c *fakeClock, st runstate.State) error {
			c.jump(d)
			e.Expire(ctx, st.RunID)
			return nil
		}
	}
	scenarios := []struct {
		name     string
		contract *reinv1.TaskContract
		people   []person
	}{
		{"completed", contract(nil, call("delete", "x", nil), &reinv1.ScriptedReply{Reply: &reinv1.ScriptedReply_Raw{Raw: "hmm"}}, get("c1"), get("c2"), final("open, due soon")), nil},
		{"approve", contract(nil, get("c1"), refund, final("refunded")), []person{approve(true, false)}},
		{"reject", contract(nil, refund, final("not refunded")), []person{approve(false, false)}},
		{"denied", contract(nil, refund), []person{approve(false, true)}},
		{"input", contract(nil, ask("which invoice?"), get("c1"), final("done")), []person{input}},
		{"paused_input", contract(nil, ask("which invoice?")), nil},
		{"paused_approval", contract(nil, refund), nil},
		{"max_steps", contract(&reinv1.Budget{MaxSteps: 2}, get("c1"), get("c2"), get("c3")), nil},
		{"max_tokens", contract(&reinv1.Budget{MaxTokens: 250}, get("c1"), get("c2"), get("c3")), nil},
		{"failed", contract(nil, get("c1"), &reinv1.ScriptedReply{Reply: &reinv1.ScriptedReply_Error{Error: "upstream 503"}}), nil},
		{"expired", contract(nil, refund), []person{expire(2 * time.Hour)}},
		{"deadline_paused", contract(&reinv1.Budget{Timeout: durationpb.New(10 * time.Minute)}, ask("which?")), []person{expire(time.Hour)}},
		{"cancelled", contract(nil, ask("which?")), []person{cancel}},
		{"retried", contract(nil, retrying(final("done"), 1)), nil},
		{"retry_past_deadline", contract(&reinv1.Budget{Timeout: durationpb.New(2 * time.Second)}, retrying(final("done"), 1)), nil},
		{"write_refused", contract(nil, call("void", "w2", map[string]any{"id": "INV-42"}), final("not voided")), []person{approve(true, false)}},
		{"retry_failed", contract(nil, get("c1"), retrying(final("done"), 2)), nil},
		{"compacted", contract(&reinv1.Budget{MaxContextChars: 200}, get("c1"), get("c2"), get("c3"), get("c4"), get("c5"), final("open")), nil},
		{"max_cost", contract(&reinv1.Budget{MaxCostUsd: 0.0005}, get("c1"), get("c2"), get("c3"), get("c4"), get("c5")), nil},
		// Messages come in while the first call's tool runs (steering).
		{"steered", contract(nil, get("c1"), get("c2"), final("done")), nil},
		{"budget_raised", contract(pausing, get("c1"), final("done")), []person{raise}},
		{"paused_budget", contract(pausing, get("c1"), final("done")), nil},
		// The deadline cuts the call; the raise sends it again, resumed.
		{"deadline_cut_raised", contract(&reinv1.Budget{Timeout: durationpb.New(2 * time.Second), OnExhausted: reinv1.BudgetAction_BUDGET_ACTION_PAUSE}, slowFinal), []person{extend}},
		{"revised", contract(nil, refund, final("refunded 1000")), []person{revise, approve(true, false)}},
	}
	if err := os.MkdirAll(recordings, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, sc := range scenarios {
		ctx := context.Background()
		clock := &fakeClock{now: time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)}
		st := mem.New()
		e := engine.New(engine.Config{Store: st, Tools: fixtures, Clock: clock.Now, NoTimers: true, Workers: 1,
			// The same IDs every time, so a recording changes only where
			// the harness does.
			NewID: seededIDs(sc.name),
			// Every call is priced, so replay checks each call's cost.
			Prices: pricing.New(map[string]pricing.Price{"script/*": {InputPerMTok: 1, OutputPerMTok: 2}}),
			Wait:   func(context.Context, time.Duration) error { return nil }})
		fixtures.steer = nil
		if sc.name == "steered" {
			fixtures.steer = func(runID string) {
				for _, m := range []string{"use the EUR ledger", "and skip drafts"} {
					if _, _, err := e.Steer(ctx, runID, m, "steer-"+m, "bob"); err != nil {
						t.Errorf("steer: %v", err)
					}
				}
			}
		}
		run, _, err := e.Start(ctx, engine.StartRequest{RequestID: sc.name, Contract: sc.contract, Principal: "alice", Tenant: "acme"})
		if err != nil {
			t.Fatalf("%s: %v", sc.name, err)
		}
		for _, p := range append(sc.people, nil) {
			if err := e.Wait(ctx, run.RunID); err != nil {
				t.Fatal(err)
			}
			if p == nil {
				break
			}
			cur, err := st.Load(ctx, run.RunID)
			if err != nil {
				t.Fatal(err)
			}
			if err := p(ctx, e, clock, cur); err != nil {
				t.Fatalf("%s: %v", sc.name, err)
			}
		}
		if err := e.Wait(ctx, run.RunID); err != nil {
			t.Fatal(err)
		}
		evs, err := st.Events(ctx, run.RunID, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		e.Close()
		f, err := os.Create(filepath.Join(recordings, sc.name+".rein"))
		if err != nil {
			t.Fatal(err)
		}
		x, err := export.New(ctx, run.RunID, evs, st)
		if err != nil {
			t.Fatal(err)
		}
		x.ExportedBy = "rein replay tests"
		// The text form: a changed recording is a readable diff.
		if err := export.WriteText(f, x); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	names := make([]string, 0, len(scenarios))
	for _, sc := range scenarios {
		names = append(names, sc.name)
	}
	sort.Strings(names)
	t.Logf("recorded %v", names)
}

// steering is the recordings' tools: steer, when set, sends the run
// messages during its first read, once.
type steering struct {
	tools.Executor
	steer func(runID string)
}

func (s *steering) Read(ctx context.Context, c tools.Call) (*structpb.Value, error) {
	if f := s.steer; f != nil {
		s.steer = nil
		f(c.RunID)
	}
	return s.Executor.Read(ctx, c)
}

// TestReplayChecksCostsAndCompaction: a recording whose call cost or
// compaction differs from what this harness does parts at that event. (A
// retry's wait and error are the provider's, fed back as recorded.)
func TestReplayChecksCostsAndCompaction(t *testing.T) {
	for _, tc := range []struct {
		file, payload string
		change        func(*reinv1.Event)
	}{
		{"max_cost.rein", "model_returned", func(ev *reinv1.Event) { ev.GetModelReturned().CostUsd *= 2 }},
		{"compacted.rein", "context_compacted", func(ev *reinv1.Event) { ev.GetContextCompacted().Compacted++ }},
	} {
		t.Run(tc.file, func(t *testing.T) {
			x := readExport(t, filepath.Join(recordings, tc.file))
			evs := x.GetEvents()
			var at uint64
			for _, ev := range evs {
				if runstate.PayloadName(ev) == tc.payload {
					tc.change(ev)
					at = ev.GetSequence()
					break
				}
			}
			if at == 0 {
				t.Fatalf("%s has no %s", tc.file, tc.payload)
			}
			res, err := Run(context.Background(), evs, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Divergence == nil || res.Divergence.Sequence != at {
				t.Fatalf("divergence %v, want one at sequence %d (the changed %s)", res.Divergence, at, tc.payload)
			}
		})
	}
}

// TestReplayChecksPrefixAndBreakpoints: a recording whose call's
// prefix_bytes or cache_breakpoints is not what this harness sends (here
// the first call that carries its previous input, edited) parts at that
// call, on that field; the unedited recording replays clean. (The
// recording predates prefix_bytes: replay fills a 0 in, so the edit is 1.)
func TestReplayChecksPrefixAndBreakpoints(t *testing.T) {
	for _, tc := range []struct {
		field  string
		change func(*reinv1.ModelRequested)
	}{
		{"unedited", func(*reinv1.ModelRequested) {}},
		{"model_requested.prefix_bytes", func(mr *reinv1.ModelRequested) { mr.PrefixBytes = 1 }},
		{"model_requested.cache_breakpoints", func(mr *reinv1.ModelRequested) { mr.CacheBreakpoints = []uint32{1, 3} }},
	} {
		t.Run(tc.field, func(t *testing.T) {
			x := readExport(t, filepath.Join(recordings, "steered.rein"))
			var at uint64
			for n, ev := 0, x.GetEvents(); n < len(ev); n++ {
				if mr := ev[n].GetModelRequested(); mr != nil && mr.GetCarriedBlobs() > 0 {
					tc.change(mr)
					at = ev[n].GetSequence()
					break
				}
			}
			if at == 0 {
				t.Fatal("steered.rein has no call that carries its previous input")
			}
			res, err := Run(context.Background(), x.GetEvents(), Options{Blobs: x.GetBlobs()})
			if err != nil {
				t.Fatal(err)
			}
			switch d := res.Divergence; {
			case tc.field == "unedited" && d != nil:
				t.Fatalf("the unedited recording diverged: %v", d)
			case tc.field != "unedited" && (d == nil || d.Sequence != at || d.Field != tc.field):
				t.Fatalf("divergence %v, want one at sequence %d on %s", d, at, tc.field)
			}
		})
	}
}
