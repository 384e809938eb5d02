package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/reinhq/rein/client"
	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/export"
	"github.com/reinhq/rein/internal/runstate"
)

// A delegation tree is composed by the client: a run's children are the
// runs ListRuns finds with parent_run_id, and theirs in turn. WatchRun
// follows one run; rein watch --tree follows a parent and starts following
// each child as the parent's delegation_started names it.

// treeNode is a run and the runs it delegated to.
type treeNode struct {
	run      *reinv1.Run
	children []*treeNode
}

// fetchTree reads runID and its descendants.
func fetchTree(ctx context.Context, runs reinv1.RunServiceClient, runID string) (*treeNode, error) {
	got, err := runs.GetRun(ctx, &reinv1.GetRunRequest{RunId: runID})
	if err != nil {
		return nil, err
	}
	n := &treeNode{run: got.GetRun()}
	ids, err := childIDs(ctx, runs, runID)
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		c, err := fetchTree(ctx, runs, id)
		if err != nil {
			return nil, err
		}
		n.children = append(n.children, c)
	}
	return n, nil
}

// childIDs are the runs runID delegated to, oldest first.
func childIDs(ctx context.Context, runs reinv1.RunServiceClient, runID string) ([]string, error) {
	var ids []string
	req := &reinv1.ListRunsRequest{ParentRunId: runID, PageSize: 1000}
	for {
		resp, err := runs.ListRuns(ctx, req)
		if err != nil {
			return nil, err
		}
		for _, r := range resp.GetRuns() {
			ids = append(ids, r.GetRunId())
		}
		if resp.GetNextPageToken() == "" {
			break
		}
		req.PageToken = resp.GetNextPageToken()
	}
	// ListRuns is newest first.
	for i, j := 0, len(ids)-1; i < j; i, j = i+1, j-1 {
		ids[i], ids[j] = ids[j], ids[i]
	}
	return ids, nil
}

// spend is what a tree's runs spent themselves, summed.
func (n *treeNode) spend() (s runstate.Spend, runs int) {
	r := n.run
	s = runstate.Spend{Steps: r.GetSteps(), Tokens: runstate.UsageTokens(r.GetUsage()), CostUSD: r.GetCostUsd(), ToolCalls: r.GetToolCalls()}
	runs = 1
	for _, c := range n.children {
		cs, cr := c.spend()
		s, runs = s.Add(cs), runs+cr
	}
	return s, runs
}

// treeJSON is a tree as --json prints it.
type treeJSON struct {
	summary
	Tree     spendJSON  `json:"tree"`
	Children []treeJSON `json:"children"`
}

type spendJSON struct {
	Runs      int     `json:"runs"`
	Steps     uint32  `json:"steps"`
	Tokens    uint64  `json:"tokens"`
	CostUSD   float64 `json:"cost_usd"`
	ToolCalls uint32  `json:"tool_calls"`
}

func (n *treeNode) json() treeJSON {
	s, runs := n.spend()
	out := treeJSON{summary: summarize(n.run), Tree: spendJSON{runs, s.Steps, s.Tokens, s.CostUSD, s.ToolCalls}, Children: []treeJSON{}}
	for _, c := range n.children {
		out.Children = append(out.Children, c.json())
	}
	return out
}

// printTree prints one line per run, indented by depth: its status, steps,
// and its own and its subtree's spend.
func printTree(w io.Writer, root *treeNode) error {
	tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN_ID\tSTATUS\tSTEPS\tTOKENS\tCOST\tTREE TOKENS\tTREE COST\tGOAL")
	var walk func(n *treeNode, depth int)
	walk = func(n *treeNode, depth int) {
		r := n.run
		s, _ := n.spend()
		fmt.Fprintf(tw, "%s%s\t%s\t%d\t%d\t$%.6f\t%d\t$%.6f\t%s\n", strings.Repeat("  ", depth), r.GetRunId(),
			runstate.StatusName(r.GetStatus()), r.GetSteps(), runstate.UsageTokens(r.GetUsage()), r.GetCostUsd(),
			s.Tokens, s.CostUSD, clip(firstLine(r.GetContract().GetGoal()), 50))
		for _, c := range n.children {
			walk(c, depth+1)
		}
	}
	walk(root, 0)
	return tw.Flush()
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// inspectTree prints runID's tree.
func inspectTree(ctx context.Context, e *env, runID string) error {
	if isExportFile(runID) {
		return usageError("--tree reads a stored run's tree; for a file, rein inspect FILE shows its root")
	}
	cn, err := reader(ctx, &e.target, e.stderr)
	if err != nil {
		return err
	}
	defer cn.close()
	root, err := fetchTree(ctx, cn.runs, runID)
	if err != nil {
		return err
	}
	if e.json {
		return writeJSON(e.stdout, root.json(), false)
	}
	return printTree(e.stdout, root)
}

// delegationLines are inspect's lines for a run in a tree: its parent, its
// children, and its tree's spend beside its own.
func delegationLines(w io.Writer, r *reinv1.Run) {
	if by := r.GetDelegatedBy(); by != nil {
		fmt.Fprintf(w, "parent\t%s (task %d of its event %d, depth %d, root %s)\n", by.GetParentRunId(), by.GetTaskIndex(), by.GetSequence(), by.GetDepth(), by.GetRootRunId())
	}
	d := r.GetDelegation()
	if d == nil {
		return
	}
	own := runstate.Spend{Steps: r.GetSteps(), Tokens: runstate.UsageTokens(r.GetUsage()), CostUSD: r.GetCostUsd(), ToolCalls: r.GetToolCalls()}
	tree := own.Add(runstate.SpendFrom(d.GetReturned()))
	fmt.Fprintf(w, "children\t%d started, %d open\n", d.GetChildrenStarted(), len(d.GetOpenChildren()))
	fmt.Fprintf(w, "tree spend\t%d steps, %d tokens, $%.6f, %d tool calls (its own and its returned children's)\n", tree.Steps, tree.Tokens, tree.CostUSD, tree.ToolCalls)
	if l := runstate.SpendFrom(d.GetLent()); !l.IsZero() {
		fmt.Fprintf(w, "lent\t%d steps, %d tokens, $%.6f, %d tool calls (to its open children)\n", l.Steps, l.Tokens, l.CostUSD, l.ToolCalls)
	}
}

// treeExport is runID's export with its children's, recursively.
func treeExport(ctx context.Context, e *env, runID string) (*reinv1.RunExport, int, error) {
	x, err := storedExport(ctx, e, runID)
	if err != nil {
		return nil, 0, err
	}
	runs := 1
	for _, ev := range x.GetEvents() {
		for _, c := range ev.GetDelegationStarted().GetChildren() {
			cx, n, err := treeExport(ctx, e, c.GetRunId())
			if err != nil {
				return nil, 0, fmt.Errorf("export child %s of run %s: %w", c.GetRunId(), runID, err)
			}
			x.Children = append(x.Children, cx)
			runs += n
		}
	}
	return x, runs, export.Check(x)
}

// watchTree follows runID and every run it delegates to, each line
// prefixed with its run, until all of them have ended (or, on the embedded
// server, paused).
func (o *watchOptions) watchTree(ctx context.Context, e *env, runID string) error {
	cn, err := reader(ctx, &e.target, e.stderr)
	if err != nil {
		return err
	}
	defer cn.close()
	var (
		mu    sync.Mutex
		wg    sync.WaitGroup
		first error
	)
	var follow func(id string, after uint64)
	follow = func(id string, after uint64) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := watchChild(ctx, id != runID, func() error {
				return cn.Watch(ctx, id, after, func(ev *reinv1.Event) error {
					mu.Lock()
					var err error
					if e.json {
						m := eventJSON(ev)
						err = writeJSON(e.stdout, m, false)
					} else {
						_, err = fmt.Fprintf(e.stdout, "%s  %s\n", id, eventLine(ev))
					}
					mu.Unlock()
					if err != nil {
						return err
					}
					for _, c := range ev.GetDelegationStarted().GetChildren() {
						follow(c.GetRunId(), 0)
					}
					return pausedHere(ctx, cn, id, ev)
				})
			})
			if err != nil && !errors.Is(err, errPaused) && ctx.Err() == nil {
				mu.Lock()
				if first == nil {
					first = fmt.Errorf("watch run %s: %w", id, err)
				}
				mu.Unlock()
			}
		}()
	}
	follow(runID, o.after)
	wg.Wait()
	if ctx.Err() != nil {
		return &exitErr{code: exitCancelled}
	}
	if first != nil {
		return first
	}
	got, err := cn.runs.GetRun(context.WithoutCancel(ctx), &reinv1.GetRunRequest{RunId: runID})
	if err != nil {
		return err
	}
	if code := statusExit(got.GetRun().GetStatus()); code != exitOK {
		return &exitErr{code: code}
	}
	return nil
}

// parentChain is the runs above a child, from its parent to the root.
func parentChain(ctx context.Context, runs reinv1.RunServiceClient, parent string) ([]string, error) {
	var chain []string
	for parent != "" && len(chain) < 64 {
		chain = append(chain, parent)
		got, err := runs.GetRun(ctx, &reinv1.GetRunRequest{RunId: parent})
		if err != nil {
			return nil, fmt.Errorf("read parent run %s: %w", parent, err)
		}
		parent = got.GetRun().GetDelegatedBy().GetParentRunId()
	}
	return chain, nil
}

// chainNote is a pending line's note of the runs above it.
func chainNote(chain []string) string {
	if len(chain) == 0 {
		return ""
	}
	return ", delegated by " + strings.Join(chain, " < ")
}

// errChildPaused stops following a run one of whose descendants paused
// for a person.
var errChildPaused = errors.New("a delegated run waits for a person")

// childWatch follows a followed run's children for a pause.
type childWatch struct {
	c    *client.Client
	w    io.Writer
	stop context.CancelCauseFunc
	mu   sync.Mutex
	wg   sync.WaitGroup
}

func (k *childWatch) follow(ctx context.Context, runID string) {
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		_ = watchChild(ctx, true, func() error {
			return k.c.Watch(ctx, runID, 0, func(ev *reinv1.Event) error { return k.seen(ctx, runID, ev) })
		})
	}()
}

// watchChild runs watch, and again while it ends NotFound when child is
// set: a parent's delegation_started names its children before the engine
// creates them (and a server that crashed between creates them when it
// resumes the parent), so a child named may not exist yet.
// It waits up to childWait for it.
func watchChild(ctx context.Context, child bool, watch func() error) error {
	deadline := time.Now().Add(childWait)
	for {
		err := watch()
		if !child || status.Code(err) != codes.NotFound {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("its parent named it a child %v ago and it does not exist yet: %w", childWait, err)
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(childPoll):
		}
	}
}

// childWait bounds how long a named child that does not exist yet is
// waited for.
var childWait = time.Minute

// childPoll is how often a child named but not created yet is looked for.
const childPoll = 25 * time.Millisecond

// seen is one event of a followed child: its own children are followed
// too, and a pause that holds now stops the following.
func (k *childWatch) seen(ctx context.Context, runID string, ev *reinv1.Event) error {
	for _, ch := range ev.GetDelegationStarted().GetChildren() {
		k.follow(ctx, ch.GetRunId())
	}
	if !mayWait(ev) {
		return nil
	}
	// The history replays old pauses too: only one that holds now stops
	// the following.
	run, waits, err := waitsAt(ctx, k.c, runID, ev.GetSequence())
	if err != nil || !waits {
		return nil
	}
	k.mu.Lock()
	fmt.Fprintf(k.w, "rein: delegated run %s is %s: it waits for a person (rein pending; approve or answer it with its run ID)\n",
		runID, runstate.StatusName(run.GetStatus()))
	k.mu.Unlock()
	k.stop(errChildPaused)
	return errChildPaused
}

func (k *childWatch) wait() { k.wg.Wait() }

// waitsForChildren reports whether a run followed to its rest is running
// with children still open: one of them waits for a person.
func waitsForChildren(r *reinv1.Run) bool {
	return r.GetStatus() == reinv1.RunStatus_RUN_STATUS_RUNNING && len(r.GetDelegation().GetOpenChildren()) > 0
}
