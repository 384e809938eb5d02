package replay

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

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

// recordTree records the tree under testdata/recordings, with its
// children's logs in the export's children.
func recordTree(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	fixtures := tools.NewFixtures(map[string][]tools.FixtureResult{"get": {{Output: structpb.NewStringValue("invoice INV-42: open, 1200 EUR")}}})
	task := func(q string) *reinv1.DelegatedTask {
		return &reinv1.DelegatedTask{Question: q, Tools: []*reinv1.DelegatedTool{{Name: "get"}}, Evidence: "the invoice"}
	}
	c := contract(nil, reply(&reinv1.Decision{Action: &reinv1.Decision_Delegate{Delegate: &reinv1.Delegate{Tasks: []*reinv1.DelegatedTask{
		task("is INV-42 open?"), task("what does INV-42 cost?"),
	}}}}), final("INV-42 is open, 1200 EUR"))
	c.Tools = c.Tools[:1] // get
	c.Delegation = &reinv1.DelegationPolicy{MaxChildren: 2, ChildModels: []*reinv1.ModelSpec{{Provider: "script", Name: "test", Script: []*reinv1.ScriptedReply{
		call("get", "c1", map[string]any{"id": "INV-42"}), final("open, 1200 EUR"),
	}}}}
	clock := &fakeClock{now: time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)}
	st := mem.New()
	var mu sync.Mutex
	ended := map[string]bool{}
	done := make(chan struct{}, 16)
	e := engine.New(engine.Config{Store: st, Tools: fixtures, Clock: clock.Now, NoTimers: true, Workers: 1, NewID: seededIDs(treeRecording),
		Prices: pricing.New(map[string]pricing.Price{"script/*": {InputPerMTok: 1, OutputPerMTok: 2}}),
		Published: func(s runstate.State, _ []*reinv1.Event) {
			if runstate.Terminal(s.Status) {
				mu.Lock()
				ended[s.RunID] = true
				mu.Unlock()
				done <- struct{}{}
			}
		}})
	defer e.Close()
	run, _, err := e.Start(ctx, engine.StartRequest{RequestID: "tree", Contract: c, Principal: "alice", Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	for {
		mu.Lock()
		ok := ended[run.RunID]
		mu.Unlock()
		if ok {
			break
		}
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("the tree did not end")
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
	f, err := os.Create(filepath.Join(recordings, treeRecording))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := export.WriteText(f, x); err != nil {
		t.Fatal(err)
	}
}

// TestReplayTree replays the recorded tree: the parent with its children's
// recorded results, and each child on its own.
func TestReplayTree(t *testing.T) {
	x := readExport(t, filepath.Join(recordings, treeRecording))
	if len(x.GetChildren()) != 2 {
		t.Fatalf("%s has %d children, want 2", treeRecording, len(x.GetChildren()))
	}
	res, err := Run(context.Background(), x.GetEvents(), Options{Blobs: x.GetBlobs(), Children: TreeChildren(x)})
	if err != nil || res.Divergence != nil {
		t.Fatalf("parent: %v %v", err, res.Divergence)
	}
	for _, c := range x.GetChildren() {
		res, err := Run(context.Background(), c.GetEvents(), Options{Blobs: c.GetBlobs()})
		if err != nil || res.Divergence != nil {
			t.Fatalf("child %s: %v %v", c.GetRunId(), err, res.Divergence)
		}
	}
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
	child := x.GetChildren()[1]
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
