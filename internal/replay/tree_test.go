package replay

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/engine"
	"github.com/reinhq/rein/internal/export"
	"github.com/reinhq/rein/internal/pricing"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store/mem"
	"github.com/reinhq/rein/internal/tools"
)

// treeRecording is the recorded delegation tree: a parent that delegates
// two reads, then answers from the reports.
const treeRecording = "delegate_tree.rein"

// treeRaisedRecording is a tree whose child reaches the budget lent to
// it: the child pauses, the root pauses for it, and a person raises the
// root, which lends the raise on.
const treeRaisedRecording = "delegate_tree_raised.rein"

// recordTree records the trees under testdata/recordings, with their
// children's logs in the exports' children.
func recordTree(t *testing.T) {
	t.Helper()
	task := func(q string) *reinv1.DelegatedTask {
		return &reinv1.DelegatedTask{Question: q, Tools: []*reinv1.DelegatedTool{{Name: "get"}}, Evidence: "the invoice"}
	}
	childScript := []*reinv1.ScriptedReply{call("get", "c1", map[string]any{"id": "INV-42"}), final("open, 1200 EUR")}
	c := contract(nil, reply(&reinv1.Decision{Action: &reinv1.Decision_Delegate{Delegate: &reinv1.Delegate{Tasks: []*reinv1.DelegatedTask{
		task("is INV-42 open?"), task("what does INV-42 cost?"),
	}}}}), final("INV-42 is open, 1200 EUR"))
	c.Tools = c.Tools[:1] // get
	c.Delegation = &reinv1.DelegationPolicy{MaxChildren: 2, ChildModels: []*reinv1.ModelSpec{{Provider: "script", Name: "test", Script: childScript}}}
	recordTreeAs(t, treeRecording, c, nil)

	// One step lent to the child, which needs two.
	small := task("is INV-42 open?")
	small.Budget = &reinv1.DelegatedBudget{MaxSteps: 1}
	c = contract(&reinv1.Budget{MaxSteps: 5, OnExhausted: reinv1.BudgetAction_BUDGET_ACTION_PAUSE},
		reply(&reinv1.Decision{Action: &reinv1.Decision_Delegate{Delegate: &reinv1.Delegate{Tasks: []*reinv1.DelegatedTask{small}}}}), final("INV-42 is open"))
	c.Tools = c.Tools[:1]
	c.Delegation = &reinv1.DelegationPolicy{MaxChildren: 1, ChildModels: []*reinv1.ModelSpec{{Provider: "script", Name: "test", Script: childScript}}}
	recordTreeAs(t, treeRaisedRecording, c, func(ctx context.Context, e *engine.Engine, rootID string) error {
		_, err := e.RaiseBudget(ctx, &reinv1.RaiseBudgetRequest{RunId: rootID, AddSteps: 1, Reason: "finish it"}, "bob")
		return err
	})
}

// recordTreeAs records the tree c starts as name; raise, when set, is
// what a person does each time the root pauses on its budget.
func recordTreeAs(t *testing.T, name string, c *reinv1.TaskContract, raise func(context.Context, *engine.Engine, string) error) {
	t.Helper()
	ctx := context.Background()
	fixtures := tools.NewFixtures(map[string][]tools.FixtureResult{"get": {{Output: structpb.NewStringValue("invoice INV-42: open, 1200 EUR")}}})
	clock := &fakeClock{now: time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)}
	st := mem.New()
	var mu sync.Mutex
	rested := map[string]bool{}
	done := make(chan struct{}, 16)
	e := engine.New(engine.Config{Store: st, Tools: fixtures, Clock: clock.Now, NoTimers: true, Workers: 1, NewID: seededIDs(name),
		Prices: pricing.New(map[string]pricing.Price{"script/*": {InputPerMTok: 1, OutputPerMTok: 2}}),
		Published: func(s runstate.State, _ []*reinv1.Event) {
			if runstate.Terminal(s.Status) || s.Status == reinv1.RunStatus_RUN_STATUS_NEEDS_BUDGET {
				mu.Lock()
				rested[s.RunID] = true
				mu.Unlock()
				select {
				case done <- struct{}{}:
				default:
				}
			}
		}})
	defer e.Close()
	run, _, err := e.Start(ctx, engine.StartRequest{RequestID: "tree", Contract: c, Principal: "alice", Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for {
		cur, err := st.Load(ctx, run.RunID)
		if err != nil {
			t.Fatal(err)
		}
		if runstate.Terminal(cur.Status) {
			break
		}
		if cur.Status == reinv1.RunStatus_RUN_STATUS_NEEDS_BUDGET && raise != nil {
			if err := raise(ctx, e, run.RunID); err != nil {
				t.Fatalf("%s: raise: %v", name, err)
			}
			continue
		}
		select {
		case <-done:
		case <-deadline.C:
			t.Fatalf("%s: the tree did not end", name)
		}
	}
	exportOf := func(id string) *reinv1.RunExport {
		evs, err := st.Events(ctx, id, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		x, err := export.New(ctx, id, evs, st)
		if err != nil {
			t.Fatal(err)
		}
		x.ExportedBy = "rein replay tests"
		return x
	}
	x := exportOf(run.RunID)
	for _, ev := range x.GetEvents() {
		for _, ch := range ev.GetDelegationStarted().GetChildren() {
			x.Children = append(x.Children, exportOf(ch.GetRunId()))
		}
	}
	if err := export.Check(x); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(recordings, name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := export.WriteText(f, x); err != nil {
		t.Fatal(err)
	}
}

// TestReplayTree replays the recorded trees: each parent with its
// children's recorded results, and each child on its own; in the second,
// the child pauses on the budget lent to it, the root pauses for it and a
// raise of the root is lent on.
func TestReplayTree(t *testing.T) {
	for name, children := range map[string]int{treeRecording: 2, treeRaisedRecording: 1} {
		x := readExport(t, filepath.Join(recordings, name))
		if len(x.GetChildren()) != children {
			t.Fatalf("%s has %d children, want %d", name, len(x.GetChildren()), children)
		}
		res, err := Run(context.Background(), x.GetEvents(), Options{Blobs: x.GetBlobs(), Children: TreeChildren(x)})
		if err != nil || res.Divergence != nil {
			t.Fatalf("%s: parent: %v %v", name, err, res.Divergence)
		}
		for _, c := range x.GetChildren() {
			res, err := Run(context.Background(), c.GetEvents(), Options{Blobs: c.GetBlobs()})
			if err != nil || res.Divergence != nil {
				t.Fatalf("%s: child %s: %v %v", name, c.GetRunId(), err, res.Divergence)
			}
		}
	}
	x := readExport(t, filepath.Join(recordings, treeRecording))
	// Without its children's recordings the parent cannot be replayed.
	if _, err := Run(context.Background(), x.GetEvents(), Options{Blobs: x.GetBlobs()}); err == nil {
		t.Fatal("a delegating run replayed without its children's recordings")
	}
}

// TestReplayTreeCatchesChangedChild is the twin: when a child's recorded
// result is not what the parent recorded of it, the parent's replay parts
// at that child's delegation_returned, on its answer.
func TestReplayTreeCatchesChangedChild(t *testing.T) {
	x := readExport(t, filepath.Join(recordings, treeRecording))
	partsAtChangedAnswer(t, x, x.GetChildren()[1])
}

// partsAtChangedAnswer changes child's recorded answer and replays x, the
// parent: the replay must part at the parent's report of that child, on
// its answer.
func partsAtChangedAnswer(t *testing.T, x, child *reinv1.RunExport) {
	t.Helper()
	for _, ev := range child.GetEvents() {
		if r := ev.GetStatusChanged().GetResult(); r != nil {
			r.Text = "closed"
		}
	}
	var want uint64
	for _, ev := range x.GetEvents() {
		if ev.GetDelegationReturned().GetRunId() == child.GetRunId() {
			want = ev.GetSequence()
		}
	}
	res, err := Run(context.Background(), x.GetEvents(), Options{Blobs: x.GetBlobs(), Children: TreeChildren(x)})
	if err != nil {
		t.Fatal(err)
	}
	if d := res.Divergence; d == nil || d.Sequence != want || d.Field != "delegation_returned.answer.text" {
		t.Fatalf("divergence %v, want one at sequence %d on delegation_returned.answer.text", d, want)
	}
}

// TestReplayTreeRaisedNeedsTheChildsRaise is the twin of the raised tree:
// a child's recording that stops at its pause, without the raise its
// parent lent it, does not replay the parent as recorded.
func TestReplayTreeRaisedNeedsTheChildsRaise(t *testing.T) {
	x := readExport(t, filepath.Join(recordings, treeRaisedRecording))
	child := x.GetChildren()[0]
	for i, ev := range child.GetEvents() {
		if ev.GetBudgetRaised() != nil {
			child.Events = child.GetEvents()[:i]
			break
		}
	}
	res, err := Run(context.Background(), x.GetEvents(), Options{Blobs: x.GetBlobs(), Children: TreeChildren(x)})
	if err == nil && res.Divergence == nil {
		t.Fatal("the parent replayed as recorded with a child that was never given its raise")
	}
}

// endedBefore makes the tree's second reported child end, by its clock,
// before the first: as when a child reads the clock for its end, its
// sibling ends and commits, the parent wakes and takes that report, and
// only then does the first child's end commit.
func endedBefore(t *testing.T, x *reinv1.RunExport) (first, second *reinv1.RunExport) {
	t.Helper()
	var order []string
	for _, ev := range x.GetEvents() {
		if id := ev.GetDelegationReturned().GetRunId(); id != "" {
			order = append(order, id)
		}
	}
	byID := map[string]*reinv1.RunExport{}
	for _, c := range x.GetChildren() {
		byID[c.GetRunId()] = c
	}
	if len(order) != 2 || byID[order[0]] == nil || byID[order[1]] == nil {
		t.Fatalf("the tree reports %v, want its two children", order)
	}
	first, second = byID[order[0]], byID[order[1]]
	firstEnd := first.GetEvents()[len(first.GetEvents())-1].GetRecordedAt().AsTime()
	secondEvs := second.GetEvents()
	secondEvs[len(secondEvs)-1].RecordedAt = timestamppb.New(firstEnd.Add(-time.Millisecond))
	return first, second
}

// TestReplayTreeTakesReportsAsRecorded: a parent that took its children's
// reports in an order their clocks do not tell replays as recorded: the
// replay shows each child ended when the recording's parent takes its
// report next, not all at once sorted by their clocks.
func TestReplayTreeTakesReportsAsRecorded(t *testing.T) {
	x := readExport(t, filepath.Join(recordings, treeRecording))
	endedBefore(t, x)
	res, err := Run(context.Background(), x.GetEvents(), Options{Blobs: x.GetBlobs(), Children: TreeChildren(x)})
	if err != nil || res.Divergence != nil {
		t.Fatalf("the parent of children that ended against their clocks' order: %v %v", err, res.Divergence)
	}
}

// TestReplayTreeTakesReportsAsRecordedCatchesChange is its twin: the
// order kept does not hide a report that changed; the replay parts at
// the second report, on its answer.
func TestReplayTreeTakesReportsAsRecordedCatchesChange(t *testing.T) {
	x := readExport(t, filepath.Join(recordings, treeRecording))
	_, second := endedBefore(t, x)
	partsAtChangedAnswer(t, x, second)
}
