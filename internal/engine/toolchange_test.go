package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/policy"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/step"
	"github.com/reinhq/rein/internal/storeformat"
	"github.com/reinhq/rein/internal/taskcontract"
	"github.com/reinhq/rein/internal/tools"
)

// changingTools is searchTools whose definitions a test changes under its
// runs, as a deploy of a tool service does: a tool's listed schema, tier
// or server, or the tool removed (then no call of it reaches a tool).
type changingTools struct {
	*countingTools
	mu      sync.Mutex
	changed map[string]tools.Spec
	removed map[string]bool
}

func newChangingTools(t *testing.T, out ...tools.FixtureResult) *changingTools {
	return &changingTools{countingTools: searchTools(t, out...), changed: map[string]tools.Spec{}, removed: map[string]bool{}}
}

// change sets tool's listed definition: f edits its spec as listed now.
func (c *changingTools) change(tool string, f func(*tools.Spec)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sp, ok := c.changed[tool]
	if !ok {
		sp = tools.Spec{Name: tool, Description: "fixture", Server: "fixture"}
	}
	f(&sp)
	c.changed[tool] = sp
}

func (c *changingTools) remove(tool string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removed[tool] = true
}

func (c *changingTools) List(ctx context.Context) ([]tools.Spec, error) {
	specs, err := c.countingTools.List(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []tools.Spec
	for _, sp := range specs {
		if c.removed[sp.Name] {
			continue
		}
		if ch, ok := c.changed[sp.Name]; ok {
			sp = ch
		}
		out = append(out, sp)
	}
	return out, nil
}

func (c *changingTools) gone(tool string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.removed[tool] {
		return fmt.Errorf("%w: %q", tools.ErrNoTool, tool)
	}
	return nil
}

func (c *changingTools) Read(ctx context.Context, call tools.Call) (*structpb.Value, error) {
	if err := c.gone(call.Tool); err != nil {
		return nil, err
	}
	return c.countingTools.Read(ctx, call)
}

func (c *changingTools) Propose(ctx context.Context, call tools.Call) (*structpb.Value, error) {
	if err := c.gone(call.Tool); err != nil {
		return nil, err
	}
	return c.countingTools.Propose(ctx, call)
}

func (c *changingTools) Commit(ctx context.Context, call tools.Call, op string) (*structpb.Value, error) {
	if err := c.gone(call.Tool); err != nil {
		return nil, err
	}
	return c.countingTools.Commit(ctx, call, op)
}

// newSchema is a schema for send_email's and search's arguments that
// differs from none.
func newSchema(t *testing.T) *structpb.Struct {
	return mustStruct(t, map[string]any{"type": "object", "properties": map[string]any{"to": map[string]any{"type": "string"}, "q": map[string]any{"type": "string"}}})
}

// A run records, in run_started, the digest of each granted tool served
// (an ask_human grant has none) and of the server's policy; inspect reads
// them from the run.
func TestRunRecordsToolDigests(t *testing.T) {
	ex := newChangingTools(t)
	e, s := setup(t, Config{Tools: ex})
	st, evs := runToRest(t, e, s, testContract(finalReply("done")))
	rs := evs[0].GetRunStarted()
	want := []string{"search", "send_email"}
	var got []string
	for _, d := range rs.GetToolDigests() {
		got = append(got, d.GetName())
		if d.GetServer() != "fixture" || len(d.GetDigest()) != 64 {
			t.Errorf("digest of %s = %v, want served by fixture, a SHA-256", d.GetName(), d)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("run_started digests tools %q, want %q (none for the ask_human grant)", got, want)
	}
	if rs.GetPolicyDigest() != (*policy.Server)(nil).Digest() {
		t.Errorf("policy digest = %q, want that of no rules", rs.GetPolicyDigest())
	}
	if len(st.ToolDigests) != 2 || st.PolicyDigest != rs.GetPolicyDigest() {
		t.Errorf("the run holds %v and %q, want run_started's", st.ToolDigests, st.PolicyDigest)
	}
}

// The failure twin: a tool whose definition did not change is called as
// before, and nothing about its definition is recorded.
func TestUnchangedToolRecordsNothing(t *testing.T) {
	ex := newChangingTools(t)
	ex.change("send_email", func(sp *tools.Spec) { sp.Description = "reworded: not part of the definition" })
	e, s := setup(t, Config{Tools: ex})
	st, evs := runToRest(t, e, s, testContract(callReply("search", "c1", nil), finalReply("done")))
	wantStatus(t, st, evs, statusCompleted, "final_answer")
	wantCount(t, evs, "tool_changed", 0)
	wantCount(t, evs, "tool_adopted", 0)
	ex.wantCalls(t, 1, 0, 0)
}

// pausedOnQuestion runs c (whose first reply asks a person) until it waits
// for input, so that a test changes a tool before the next call.
func pausedOnQuestion(t *testing.T, e *Engine, s Store, c *reinv1.TaskContract) runstate.State {
	t.Helper()
	st, evs := runToRest(t, e, s, c)
	wantStatus(t, st, evs, statusNeedsInput, "question")
	return st
}

// A tool whose definition changed before a call: pause asks a person
// (needs_input, tool_changed), who resumes the run on the new definition;
// adopt records the move and calls the tool; fail ends the run. Under
// pause and fail the tool is never called on its old definition.
func TestToolChangeBeforeCall(t *testing.T) {
	for _, tc := range []struct {
		action     step.ToolChangeAction
		edit       func(t *testing.T, ex *changingTools)
		changes    []string
		wantStatus reinv1.RunStatus
		wantReason string
		reads      int32
	}{
		{step.ToolChangePause, func(t *testing.T, ex *changingTools) {
			ex.change("search", func(sp *tools.Spec) { sp.InputSchema = newSchema(t) })
		}, []string{"schema"}, statusNeedsInput, runstate.ReasonToolChanged, 0},
		{step.ToolChangeAdopt, func(t *testing.T, ex *changingTools) {
			ex.change("search", func(sp *tools.Spec) { sp.InputSchema = newSchema(t) })
		}, []string{"schema"}, statusCompleted, "final_answer", 1},
		{step.ToolChangeFail, func(t *testing.T, ex *changingTools) {
			ex.change("search", func(sp *tools.Spec) { sp.InputSchema = newSchema(t) })
		}, []string{"schema"}, statusFailed, runstate.ReasonToolChanged, 0},
		{step.ToolChangePause, func(t *testing.T, ex *changingTools) {
			ex.change("search", func(sp *tools.Spec) { sp.Tier = tierWrite })
		}, []string{"tier"}, statusNeedsInput, runstate.ReasonToolChanged, 0},
		{step.ToolChangeFail, func(t *testing.T, ex *changingTools) {
			ex.change("search", func(sp *tools.Spec) { sp.Server = "tool-server other" })
		}, []string{"server"}, statusFailed, runstate.ReasonToolChanged, 0},
		{step.ToolChangePause, func(t *testing.T, ex *changingTools) { ex.remove("search") },
			[]string{"removed"}, statusNeedsInput, runstate.ReasonToolChanged, 0},
	} {
		t.Run(tc.action.String()+"_"+strings.Join(tc.changes, "_"), func(t *testing.T) {
			ex := newChangingTools(t, tools.FixtureResult{Output: mustValue(t, "found")})
			e, s := setup(t, Config{Tools: ex, OnToolChange: tc.action})
			st := pausedOnQuestion(t, e, s, testContract(askReply("which invoice?"),
				callReply("search", "c1", mustStruct(t, map[string]any{"q": "invoice"})), finalReply("done")))
			tc.edit(t, ex)
			if _, err := e.ProvideInput(testCtx(t), st.RunID, "the March one", "bob"); err != nil {
				t.Fatalf("ProvideInput: %v", err)
			}
			waitRun(t, e, st.RunID)
			st, evs := stored(t, s, st.RunID)
			wantStatus(t, st, evs, tc.wantStatus, tc.wantReason)
			ex.wantCalls(t, tc.reads, 0, 0)
			switch tc.action {
			case step.ToolChangeAdopt:
				wantCount(t, evs, "tool_changed", 0)
				ta := ofType(evs, "tool_adopted")
				if len(ta) != 1 || !slices.Equal(ta[0].GetToolAdopted().GetChanges(), tc.changes) {
					t.Fatalf("tool_adopted = %v, want one naming %q:\n%s", ta, tc.changes, dump(evs))
				}
				if d := st.ToolDigest("search"); d.GetDigest() != ta[0].GetToolAdopted().GetAdopted().GetDigest() {
					t.Errorf("the run holds %v of search, want the adopted definition", d)
				}
			default:
				wantCount(t, evs, "tool_adopted", 0)
				wantCount(t, evs, "tool_requested", 0)
				tcs := ofType(evs, "tool_changed")
				if len(tcs) != 1 {
					t.Fatalf("%d tool_changed, want 1:\n%s", len(tcs), dump(evs))
				}
				got := tcs[0].GetToolChanged()
				if got.GetTool() != "search" || got.GetCallId() != "c1" || got.GetAction() != tc.action.String() || !slices.Equal(got.GetChanges(), tc.changes) {
					t.Errorf("tool_changed = %v, want search, call c1, %s, %q", got, tc.action, tc.changes)
				}
				refused := ofType(evs, "tool_refused")
				if len(refused) != 1 || !strings.Contains(refused[0].GetToolRefused().GetReason(), "changed since the run was granted it") {
					t.Errorf("tool_refused = %v, want the call refused as changed", refused)
				}
			}
			if tc.action == step.ToolChangeFail && !strings.Contains(st.LastError, "--on-tool-change fail") {
				t.Errorf("last error = %q, want it to name --on-tool-change fail", st.LastError)
			}
		})
	}
}

// A run paused on a tool change resumes, by a person's input, on the
// definitions served now (tool_adopted with the input), and calls the tool
// again on them; the failure twin: a tool that changed back before the
// resume moves nothing.
func TestResumeAfterToolChangeAdopts(t *testing.T) {
	ex := newChangingTools(t, tools.FixtureResult{Output: mustValue(t, "found")})
	e, s := setup(t, Config{Tools: ex})
	st := pausedOnQuestion(t, e, s, testContract(askReply("which invoice?"),
		callReply("search", "c1", mustStruct(t, map[string]any{"q": "invoice"})),
		callReply("search", "c2", mustStruct(t, map[string]any{"q": "invoice"})), finalReply("done")))
	ex.remove("search")
	if _, err := e.ProvideInput(testCtx(t), st.RunID, "the March one", "bob"); err != nil {
		t.Fatalf("ProvideInput: %v", err)
	}
	waitRun(t, e, st.RunID)
	st, evs := stored(t, s, st.RunID)
	wantStatus(t, st, evs, statusNeedsInput, runstate.ReasonToolChanged)
	// The tool is back, as it was: a person resumes, and nothing moves.
	ex.mu.Lock()
	delete(ex.removed, "search")
	ex.mu.Unlock()
	if _, err := e.ProvideInput(testCtx(t), st.RunID, "go on", "bob"); err != nil {
		t.Fatalf("ProvideInput: %v", err)
	}
	waitRun(t, e, st.RunID)
	st, evs = stored(t, s, st.RunID)
	wantStatus(t, st, evs, statusCompleted, "final_answer")
	wantCount(t, evs, "tool_adopted", 0)
	ex.wantCalls(t, 1, 0, 0)

	// Once more, with the schema changed: the resume adopts it.
	ex2 := newChangingTools(t, tools.FixtureResult{Output: mustValue(t, "found")})
	e2, s2 := setup(t, Config{Tools: ex2})
	st = pausedOnQuestion(t, e2, s2, testContract(askReply("which invoice?"),
		callReply("search", "c1", mustStruct(t, map[string]any{"q": "invoice"})),
		callReply("search", "c2", mustStruct(t, map[string]any{"q": "invoice"})), finalReply("done")))
	ex2.change("search", func(sp *tools.Spec) { sp.InputSchema = newSchema(t) })
	if _, err := e2.ProvideInput(testCtx(t), st.RunID, "the March one", "bob"); err != nil {
		t.Fatalf("ProvideInput: %v", err)
	}
	waitRun(t, e2, st.RunID)
	if _, err := e2.ProvideInput(testCtx(t), st.RunID, "resume on the new search", "bob"); err != nil {
		t.Fatalf("ProvideInput: %v", err)
	}
	waitRun(t, e2, st.RunID)
	st, evs = stored(t, s2, st.RunID)
	wantStatus(t, st, evs, statusCompleted, "final_answer")
	ta := ofType(evs, "tool_adopted")
	if len(ta) != 1 || ta[0].GetActor() != "principal:bob" || ta[0].GetToolAdopted().GetAdopted() == nil {
		t.Fatalf("tool_adopted = %v, want one by the person who resumed the run:\n%s", ta, dump(evs))
	}
	ex2.wantCalls(t, 1, 0, 0)
}

// pausedOnProposal runs a send_email write to its approval.
func pausedOnProposal(t *testing.T, e *Engine, s Store) (runstate.State, *reinv1.Proposal) {
	t.Helper()
	st, evs := runToRest(t, e, s, testContract(callReply("send_email", "c1", mustStruct(t, map[string]any{"to": "bob@example.com"})), finalReply("sent")))
	wantStatus(t, st, evs, statusNeedsApproval, "write_proposed")
	return st, st.Pending.GetProposal()
}

func approve(t *testing.T, e *Engine, runID string, p *reinv1.Proposal) (runstate.State, error) {
	t.Helper()
	return e.DecideApproval(testCtx(t), Verdict{RunID: runID, ProposalID: p.GetProposalId(), ProposalHash: p.GetHash(), Approve: true, Principal: "carol"})
}

// A tool whose schema changes under a paused proposal: the approval of
// the old hash never commits. pause records the change and previews the
// proposal again, whose approval moves the run to the new definition and
// commits; adopt moves the run at once and previews again; fail ends the
// run with nothing committed.
func TestToolChangeUnderPausedProposal(t *testing.T) {
	for _, action := range []step.ToolChangeAction{step.ToolChangePause, step.ToolChangeAdopt, step.ToolChangeFail} {
		t.Run(action.String(), func(t *testing.T) {
			ex := newChangingTools(t)
			e, s := setup(t, Config{Tools: ex, OnToolChange: action})
			st, old := pausedOnProposal(t, e, s)
			ex.change("send_email", func(sp *tools.Spec) { sp.InputSchema = newSchema(t) })

			// The proposal is previewed again on the new tool, unless the
			// run fails.
			proposes := int32(2)
			if action == step.ToolChangeFail {
				proposes = 1
			}
			_, err := approve(t, e, st.RunID, old)
			if !errors.Is(err, ErrNotWaiting) || !strings.Contains(err.Error(), "changed since proposal") {
				t.Fatalf("approving the old hash: err = %v, want ErrNotWaiting naming the change", err)
			}
			ex.wantCalls(t, 0, proposes, 0)
			// The old hash never commits, however often it is approved.
			if _, err := approve(t, e, st.RunID, old); !errors.Is(err, ErrNotWaiting) {
				t.Fatalf("approving the old hash again: err = %v, want ErrNotWaiting", err)
			}
			ex.wantCalls(t, 0, proposes, 0)
			st, evs := stored(t, s, st.RunID)
			if action == step.ToolChangeFail {
				wantStatus(t, st, evs, statusFailed, runstate.ReasonToolChanged)
				tcs := ofType(evs, "tool_changed")
				if len(tcs) != 1 || tcs[0].GetToolChanged().GetProposalId() != old.GetProposalId() || tcs[0].GetToolChanged().GetAction() != "fail" {
					t.Fatalf("tool_changed = %v, want one naming the proposal, fail:\n%s", tcs, dump(evs))
				}
				return
			}
			wantStatus(t, st, evs, statusNeedsApproval, "write_proposed")
			revised := ofType(evs, "proposal_revised")
			if len(revised) != 1 || revised[0].GetActor() != "harness" {
				t.Fatalf("proposal_revised = %v, want one by the harness:\n%s", revised, dump(evs))
			}
			p := revised[0].GetProposalRevised().GetProposal()
			if p.GetHash() == old.GetHash() || p.GetToolDigest() == "" || !proto.Equal(st.Pending.GetProposal(), p) {
				t.Errorf("the proposal previewed again has hash %s (old %s), tool digest %q; pending %v", p.GetHash(), old.GetHash(), p.GetToolDigest(), st.Pending.GetProposal())
			}
			first := map[step.ToolChangeAction]string{step.ToolChangePause: "tool_changed", step.ToolChangeAdopt: "tool_adopted"}[action]
			wantCount(t, evs, first, 1)

			st, err = approve(t, e, st.RunID, p)
			if err != nil {
				t.Fatalf("approving the proposal previewed again: %v", err)
			}
			waitRun(t, e, st.RunID)
			st, evs = stored(t, s, st.RunID)
			wantStatus(t, st, evs, statusCompleted, "final_answer")
			ex.wantCalls(t, 0, 2, 1)
			committed := ofType(evs, "write_committed")
			if len(committed) != 1 || committed[0].GetWriteCommitted().GetProposalId() != p.GetProposalId() {
				t.Errorf("write_committed = %v, want the new proposal's only", committed)
			}
			wantCount(t, evs, "tool_adopted", 1)
			if d := st.ToolDigest("send_email"); d.GetDigest() != p.GetToolDigest() {
				t.Errorf("the run holds %v of send_email, want the definition the proposal was previewed on (%s)", d, p.GetToolDigest())
			}
		})
	}
}

// A write to a tool removed under its proposal is refused, and nothing is
// recorded (pause); the failure twin of the previews again above.
func TestRemovedToolUnderProposalIsRefused(t *testing.T) {
	ex := newChangingTools(t)
	e, s := setup(t, Config{Tools: ex})
	st, old := pausedOnProposal(t, e, s)
	ex.remove("send_email")
	if _, err := approve(t, e, st.RunID, old); !errors.Is(err, ErrNoExecutor) {
		t.Fatalf("approving a write to a removed tool: err = %v, want ErrNoExecutor", err)
	}
	after, evs := stored(t, s, st.RunID)
	if after.Version != st.Version {
		t.Errorf("the refusal recorded events:\n%s", dump(evs[st.Version:]))
	}
	ex.wantCalls(t, 0, 1, 0)
}

// A run recorded before rein kept digests (run_started holds none) is not
// checked: its call goes to the changed tool as it always did.
func TestRunWithoutDigestsIsNotChecked(t *testing.T) {
	ex := newChangingTools(t, tools.FixtureResult{Output: mustValue(t, "found")})
	e, s := setup(t, Config{Tools: ex, OnToolChange: step.ToolChangeFail})
	c := taskcontract.WithDefaults(testContract(callReply("search", "c1", nil), finalReply("done")))
	first := &reinv1.Event{RunId: "run_old", Sequence: 1, RecordedAt: timestamppb.New(t0), Actor: "principal:alice",
		Payload: &reinv1.Event_RunStarted{RunStarted: &reinv1.RunStarted{Contract: c, Principal: "alice", Tenant: "acme", RequestId: "req-old"}}}
	ex.change("search", func(sp *tools.Spec) { sp.InputSchema = newSchema(t) })
	if _, _, err := s.Create(testCtx(t), first); err != nil {
		t.Fatal(err)
	}
	if err := e.Resume(testCtx(t), "run_old"); err != nil {
		t.Fatal(err)
	}
	waitRun(t, e, "run_old")
	st, evs := stored(t, s, "run_old")
	wantStatus(t, st, evs, statusCompleted, "final_answer")
	wantCount(t, evs, "tool_changed", 0)
	ex.wantCalls(t, 1, 0, 0)
}

// Each policy_decided names the digest of the server's rules it was
// decided by: run_started's, until a reload changes the rules, after
// which the run's next decision names the new digest.
func TestPolicyDigestFollowsReload(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.toml")
	write := func(msg string) {
		body := fmt.Sprintf("[[rules]]\nname = \"searches\"\ntools = [\"search\"]\neffect = \"allow\"\nwhen = \"true\"\nmessage = %q\n", msg)
		if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("searches are fine")
	holder, err := policy.NewHolder(file)
	if err != nil {
		t.Fatal(err)
	}
	ex := newChangingTools(t, tools.FixtureResult{Output: mustValue(t, "a")}, tools.FixtureResult{Output: mustValue(t, "b")})
	e, s := setup(t, Config{Tools: ex, Policy: &policy.Checker{Server: holder}})
	st := pausedOnQuestion(t, e, s, testContract(callReply("search", "c1", nil), askReply("more?"), callReply("search", "c2", nil), finalReply("done")))
	write("searches are still fine")
	if _, err := holder.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ProvideInput(testCtx(t), st.RunID, "yes", "bob"); err != nil {
		t.Fatal(err)
	}
	waitRun(t, e, st.RunID)
	st, evs := stored(t, s, st.RunID)
	wantStatus(t, st, evs, statusCompleted, "final_answer")
	pds := ofType(evs, "policy_decided")
	if len(pds) != 2 {
		t.Fatalf("%d policy_decided, want 2:\n%s", len(pds), dump(evs))
	}
	before, after := pds[0].GetPolicyDecided().GetPolicyDigest(), pds[1].GetPolicyDecided().GetPolicyDigest()
	if before != evs[0].GetRunStarted().GetPolicyDigest() || before == "" {
		t.Errorf("the first decision names digest %q, want run_started's %q", before, evs[0].GetRunStarted().GetPolicyDigest())
	}
	if after == before || after != holder.Current().Digest() {
		t.Errorf("the decision after the reload names digest %q, want the reloaded rules' %q (not %q)", after, holder.Current().Digest(), before)
	}
	if st.PolicyDigest != before {
		t.Errorf("the run holds policy digest %q, want its start's %q: a reload applies at the next decision, not to the run's record", st.PolicyDigest, before)
	}
}

// A run started while the store's active format is older than the one
// that holds tool digests (a cluster mid-upgrade) records none, so no
// replica of the older build ever folds a tool_changed: a tool changed
// under it is called as before. Its twin: once the format is finalized,
// the next run records them and pauses on the same change.
func TestToolDigestsWaitForTheirFormat(t *testing.T) {
	contract := func() *reinv1.TaskContract {
		return testContract(askReply("which invoice?"), callReply("search", "c1", mustStruct(t, map[string]any{"q": "invoice"})), finalReply("done"))
	}
	gate := storeformat.NewGate(storeformat.This(), toolDigestsFormat-1, nil)
	t.Run("before", func(t *testing.T) {
		ex := newChangingTools(t, tools.FixtureResult{Output: mustValue(t, "found")})
		e, s := setup(t, Config{Tools: ex, Formats: gate})
		st := pausedOnQuestion(t, e, s, contract())
		if len(st.ToolDigests) != 0 || st.PolicyDigest == "" {
			t.Fatalf("under format %d the run holds digests %v (policy %q), want none of its tools and the policy's", gate.Active(), st.ToolDigests, st.PolicyDigest)
		}
		if got := gate.Off(); !slices.Equal(got, []string{"tool digests"}) {
			t.Errorf("the gate lists %q off, want the tool digests", got)
		}
		ex.change("search", func(sp *tools.Spec) { sp.InputSchema = newSchema(t) })
		if _, err := e.ProvideInput(testCtx(t), st.RunID, "the March one", "bob"); err != nil {
			t.Fatalf("ProvideInput: %v", err)
		}
		waitRun(t, e, st.RunID)
		st, evs := stored(t, s, st.RunID)
		wantStatus(t, st, evs, statusCompleted, "final_answer")
		wantCount(t, evs, "tool_changed", 0)
	})
	t.Run("finalized", func(t *testing.T) {
		gate.SetActive(toolDigestsFormat)
		ex := newChangingTools(t, tools.FixtureResult{Output: mustValue(t, "found")})
		e, s := setup(t, Config{Tools: ex, Formats: gate})
		st := pausedOnQuestion(t, e, s, contract())
		if len(st.ToolDigests) != 2 || len(gate.Off()) != 0 {
			t.Fatalf("once the format is active the run holds %v (off: %q), want its two tools' digests", st.ToolDigests, gate.Off())
		}
		ex.change("search", func(sp *tools.Spec) { sp.InputSchema = newSchema(t) })
		if _, err := e.ProvideInput(testCtx(t), st.RunID, "the March one", "bob"); err != nil {
			t.Fatalf("ProvideInput: %v", err)
		}
		waitRun(t, e, st.RunID)
		st, evs := stored(t, s, st.RunID)
		wantStatus(t, st, evs, statusNeedsInput, runstate.ReasonToolChanged)
	})
}
