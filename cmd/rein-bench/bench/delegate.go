package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/engine"
	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/tools"
)

// delegateTrees is how many delegations one round of the delegate
// scenario makes, one after the other, at scale 1.
const delegateTrees = 200

// delegateChildren is how many children each delegation starts.
const delegateChildren = 2

// Delegate measures what a delegation costs through the engine, durable:
// trees of a parent whose scripted model (no delay) delegates two tasks and
// then answers from the reports, and two children that answer at once. The
// figure counts trees from the first Start to the last tree's end, one
// after the other. The baseline does the same model calls in the same runs
// without a tree: a run of two calls (a read, then the answer), then two
// runs of one call started together; so the ratio is what the delegation
// itself (the loans, the creation from the event, the wake-up and the
// reports) costs against the same work as independent runs.
//
// Extra reports the delegation's overhead in milliseconds, over every tree
// of every round: fan-out, from the parent's delegate reply to the last
// child's first model call; fan-in, from the last child's end (its final
// status committed) to the parent's next model call; p50 and max of each.
func Delegate(ctx context.Context, o Options) (Result, error) {
	r := Result{Scenario: "delegate", Unit: "trees/s", Target: 0.5, Runs: 1 + delegateChildren, Extra: map[string]float64{}}
	be, err := o.backend(r.Scenario)
	if err != nil {
		return r, err
	}
	dir, err := tempDir(o, r.Scenario)
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	trees := o.scaled(delegateTrees, 3)
	var fanOut, fanIn []float64
	figure := func(round int) (measure, error) {
		path := filepath.Join(dir, fmt.Sprintf("figure-%d.db", round))
		defer os.Remove(path)
		m, out, in, err := delegateFigure(ctx, be, path, trees)
		fanOut, fanIn = append(fanOut, out...), append(fanIn, in...)
		return m, err
	}
	baseline := func(round int) (measure, error) {
		path := filepath.Join(dir, fmt.Sprintf("baseline-%d.db", round))
		defer os.Remove(path)
		return delegateBaseline(ctx, be, path, trees)
	}
	if err := alternate(ctx, &r, o.rounds(), figure, baseline); err != nil {
		return r, err
	}
	r.Events = trees
	x := r.Extra
	x["trees"] = float64(trees)
	x["children_per_tree"] = delegateChildren
	x["fanout_ms_p50"], x["fanout_ms_max"] = percentile(fanOut, 0.5), percentile(fanOut, 1)
	x["fanin_ms_p50"], x["fanin_ms_max"] = percentile(fanIn, 0.5), percentile(fanIn, 1)
	return r, nil
}

// percentile is the q-quantile of vs (q=1: the largest), 0 for none.
func percentile(vs []float64, q float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	i := int(q*float64(len(s)-1) + 0.5)
	return s[min(i, len(s)-1)]
}

func scripted(d *reinv1.Decision) *reinv1.ScriptedReply {
	return &reinv1.ScriptedReply{Reply: &reinv1.ScriptedReply_Decision{Decision: d}, Usage: &reinv1.Usage{InputTokens: 100, OutputTokens: 10}}
}

func finalDecision(text string) *reinv1.Decision {
	return &reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: text}}}
}

func delegateContract() *reinv1.TaskContract {
	var tasks []*reinv1.DelegatedTask
	for i := range delegateChildren {
		tasks = append(tasks, &reinv1.DelegatedTask{Question: fmt.Sprintf("child task %d", i)})
	}
	return &reinv1.TaskContract{
		Goal: "delegate, then answer",
		Model: &reinv1.ModelSpec{Provider: "script", Name: "bench", Script: []*reinv1.ScriptedReply{
			scripted(&reinv1.Decision{Action: &reinv1.Decision_Delegate{Delegate: &reinv1.Delegate{Tasks: tasks}}}),
			scripted(finalDecision("done")),
		}},
		Delegation: &reinv1.DelegationPolicy{MaxChildren: delegateChildren, ChildModels: []*reinv1.ModelSpec{
			{Provider: "script", Name: "bench", Script: []*reinv1.ScriptedReply{scripted(finalDecision("child done"))}},
		}},
	}
}

// clocked records when each run's model calls start and return.
type clocked struct {
	mu       sync.Mutex
	starts   map[string][]time.Time
	returns  map[string][]time.Time
	ends     map[string]time.Time
	finished chan string
}

type clockedModel struct {
	inner model.Model
	c     *clocked
}

func (m clockedModel) Next(ctx context.Context, req *model.Request) (*model.Reply, error) {
	start := time.Now()
	reply, err := m.inner.Next(ctx, req)
	done := time.Now()
	m.c.mu.Lock()
	m.c.starts[req.RunID] = append(m.c.starts[req.RunID], start)
	m.c.returns[req.RunID] = append(m.c.returns[req.RunID], done)
	m.c.mu.Unlock()
	return reply, err
}

func (m clockedModel) CountTokens(ctx context.Context, req *model.Request) (uint64, error) {
	return m.inner.(model.TokenCounter).CountTokens(ctx, req)
}

func (c *clocked) published(st runstate.State, _ []*reinv1.Event) {
	if !runstate.Terminal(st.Status) {
		return
	}
	c.mu.Lock()
	c.ends[st.RunID] = time.Now()
	c.mu.Unlock()
	c.finished <- st.RunID
}

func newClocked(n int) *clocked {
	return &clocked{starts: map[string][]time.Time{}, returns: map[string][]time.Time{}, ends: map[string]time.Time{}, finished: make(chan string, n)}
}

func (c *clocked) models(spec *reinv1.ModelSpec) (model.Model, error) {
	m, err := model.New(spec)
	if err != nil {
		return nil, err
	}
	return clockedModel{inner: m, c: c}, nil
}

// waitEnded waits until runID has ended.
func (c *clocked) waitEnded(ctx context.Context, runID string) error {
	for {
		c.mu.Lock()
		_, ok := c.ends[runID]
		c.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-c.finished:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func delegateFigure(ctx context.Context, be Backend, path string, trees int) (measure, []float64, []float64, error) {
	s, err := be.Open(path, false)
	if err != nil {
		return measure{}, nil, nil, err
	}
	defer s.Close()
	c := newClocked(trees * (1 + delegateChildren))
	e := engine.New(engine.Config{Store: s, Models: c.models, Published: c.published})
	defer e.Close()
	contract := delegateContract()
	var fanOut, fanIn []float64
	t0 := time.Now()
	for i := range trees {
		st, _, err := e.Start(ctx, engine.StartRequest{RequestID: fmt.Sprintf("tree-%d", i), Contract: contract, Principal: "bench"})
		if err != nil {
			return measure{}, nil, nil, err
		}
		if err := c.waitEnded(ctx, st.RunID); err != nil {
			return measure{}, nil, nil, err
		}
		final, err := s.Load(ctx, st.RunID)
		if err != nil {
			return measure{}, nil, nil, err
		}
		if final.Status != reinv1.RunStatus_RUN_STATUS_COMPLETED || final.ChildrenStarted != delegateChildren {
			return measure{}, nil, nil, fmt.Errorf("tree %d ended %s with %d children, want completed with %d", i, runstate.StatusName(final.Status), final.ChildrenStarted, delegateChildren)
		}
		kids, err := s.List(ctx, storeFilterParent(st.RunID))
		if err != nil {
			return measure{}, nil, nil, err
		}
		c.mu.Lock()
		decided := c.returns[st.RunID][0]
		next := c.starts[st.RunID][1]
		var lastFirst, lastEnd time.Time
		for _, k := range kids.Runs {
			if t := c.starts[k.RunID][0]; t.After(lastFirst) {
				lastFirst = t
			}
			if t := c.ends[k.RunID]; t.After(lastEnd) {
				lastEnd = t
			}
		}
		c.mu.Unlock()
		fanOut = append(fanOut, ms(lastFirst.Sub(decided)))
		fanIn = append(fanIn, ms(next.Sub(lastEnd)))
	}
	return measure{units: float64(trees), elapsed: time.Since(t0)}, fanOut, fanIn, nil
}

// delegateBaseline makes the figure's model calls in as many runs, with no
// tree: a run of a read and an answer, then the children's runs together.
func delegateBaseline(ctx context.Context, be Backend, path string, trees int) (measure, error) {
	s, err := be.Open(path, false)
	if err != nil {
		return measure{}, err
	}
	defer s.Close()
	c := newClocked(trees * (1 + delegateChildren))
	fx := benchReads()
	e := engine.New(engine.Config{Store: s, Models: c.models, Published: c.published, Tools: fx})
	defer e.Close()
	parent := &reinv1.TaskContract{
		Goal:  "read, then answer",
		Tools: []*reinv1.ToolGrant{{Name: "read_file", Description: "read a file", Tier: reinv1.ToolTier_TOOL_TIER_READ}},
		Model: &reinv1.ModelSpec{Provider: "script", Name: "bench", Script: []*reinv1.ScriptedReply{
			scripted(&reinv1.Decision{Action: &reinv1.Decision_ToolCall{ToolCall: &reinv1.ToolCall{Tool: "read_file", CallId: "c1"}}}),
			scripted(finalDecision("done")),
		}},
	}
	child := &reinv1.TaskContract{Goal: "child task", Model: &reinv1.ModelSpec{Provider: "script", Name: "bench", Script: []*reinv1.ScriptedReply{scripted(finalDecision("child done"))}}}
	t0 := time.Now()
	for i := range trees {
		st, _, err := e.Start(ctx, engine.StartRequest{RequestID: fmt.Sprintf("base-%d", i), Contract: parent, Principal: "bench"})
		if err != nil {
			return measure{}, err
		}
		if err := c.waitEnded(ctx, st.RunID); err != nil {
			return measure{}, err
		}
		var ids []string
		for j := range delegateChildren {
			k, _, err := e.Start(ctx, engine.StartRequest{RequestID: fmt.Sprintf("base-%d-%d", i, j), Contract: child, Principal: "bench"})
			if err != nil {
				return measure{}, err
			}
			ids = append(ids, k.RunID)
		}
		for _, id := range ids {
			if err := c.waitEnded(ctx, id); err != nil {
				return measure{}, err
			}
		}
	}
	return measure{units: float64(trees), elapsed: time.Since(t0)}, nil
}

func storeFilterParent(runID string) store.Filter {
	return store.Filter{Parent: runID, Limit: 100}
}

// benchReads is a fixture read tool for the baseline's read.
func benchReads() tools.Executor {
	return tools.NewFixtures(map[string][]tools.FixtureResult{"read_file": {{Output: structpb.NewStringValue(fixtureText())}}})
}
