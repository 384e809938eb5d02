package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/taskcontract"
)

// checkContract is testContract with checks.
func checkContract(checks []*reinv1.Check, script ...*reinv1.ScriptedReply) *reinv1.TaskContract {
	c := testContract(script...)
	c.Checks = checks
	return c
}

func checksOf(t *testing.T, evs []*reinv1.Event) []*reinv1.ChecksCompleted {
	t.Helper()
	var out []*reinv1.ChecksCompleted
	for _, ev := range ofType(evs, "checks_completed") {
		out = append(out, ev.GetChecksCompleted())
	}
	return out
}

var hex64 = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Checks that pass complete the run, and checks_completed records each
// result and the workspace's hash.
func TestChecksPassComplete(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "done.txt"), []byte("ok"), 0o600); err != nil {
		t.Fatal(err)
	}
	e, s := setup(t, Config{Workspace: root})
	c := checkContract([]*reinv1.Check{
		{Name: "true", Argv: []string{"true"}},
		{Name: "file", Argv: []string{"test", "-f", "done.txt"}},
	}, finalReply("done"))
	st, evs := runToRest(t, e, s, c)
	wantStatus(t, st, evs, statusCompleted, "final_answer")
	cc := checksOf(t, evs)
	if len(cc) != 1 {
		t.Fatalf("%d checks_completed, want 1; log:\n%s", len(cc), dump(evs))
	}
	if got := len(cc[0].GetResults()); got != 2 {
		t.Fatalf("%d results, want 2", got)
	}
	for _, r := range cc[0].GetResults() {
		if !r.GetPassed() || r.GetExitCode() != 0 {
			t.Errorf("result %v, want passed with exit 0", r)
		}
	}
	if !hex64.MatchString(cc[0].GetWorkspaceHash()) {
		t.Errorf("workspace_hash %q, want 64 hex digits", cc[0].GetWorkspaceHash())
	}
	// The final answer's step is two commits: model_requested, then
	// model_returned with the checks and the status change.
	got := payloads(evs)
	want := []string{"run_started", "model_requested", "model_returned", "checks_completed", "status_changed"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("log %v, want %v", got, want)
	}
}

// A failing check keeps the run going: the model's next call sees the
// failure's output tail, and a later pass completes the run.
func TestChecksFailThenPass(t *testing.T) {
	root := t.TempDir()
	marker := filepath.Join(root, "marker")
	// The check passes once marker exists: the model's first final answer
	// fails it, and the file appears before the second call.
	spy := &modelSpy{before: func(_ context.Context, req *model.Request) {
		if req.Step == 2 {
			_ = os.WriteFile(marker, []byte("here\n"), 0o600)
		}
	}}
	e, s := setup(t, Config{Workspace: root, Models: spy.models(nil)})
	c := checkContract([]*reinv1.Check{{Name: "marker", Argv: []string{"cat", "marker"}}},
		finalReply("first try"), finalReply("second try"))
	st, evs := runToRest(t, e, s, c)
	wantStatus(t, st, evs, statusCompleted, "final_answer")
	cc := checksOf(t, evs)
	if len(cc) != 2 || cc[0].GetResults()[0].GetPassed() || !cc[1].GetResults()[0].GetPassed() {
		t.Fatalf("checks %v, want a failure then a pass; log:\n%s", cc, dump(evs))
	}
	if cc[0].GetWorkspaceHash() == cc[1].GetWorkspaceHash() {
		t.Errorf("the workspace changed between the checks but its hash did not")
	}
	first := cc[0].GetResults()[0]
	if first.GetExitCode() != 1 || !strings.Contains(first.GetOutputTail(), "marker") {
		t.Errorf("failing result %v: want exit 1 and cat's complaint about marker", first)
	}
	reqs := spy.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model calls, want 2", len(reqs))
	}
	o := lastObservation(t, reqs[1])
	if o.Source != "harness" || !strings.Contains(o.Text, "completion checks failed: marker (exit 1):") ||
		!strings.Contains(o.Text, strings.TrimRight(first.GetOutputTail(), "\n")) {
		t.Errorf("second call's last observation %+v, want the check's failure and output tail", o)
	}
	// The failing step commits model_returned and checks_completed together.
	want := "run_started,model_requested,model_returned,checks_completed,model_requested,model_returned,checks_completed,status_changed"
	if got := strings.Join(payloads(evs), ","); got != want {
		t.Errorf("log %s, want %s", got, want)
	}
}

// The same failure NoProgressSteps times in a row with no committed write
// ends the run as budget_exhausted (no_progress), after exactly that many
// model calls.
func TestChecksNoProgress(t *testing.T) {
	for _, n := range []int{0, 2} {
		want := n
		if want == 0 {
			want = 3
		}
		t.Run(fmt.Sprintf("steps=%d", want), func(t *testing.T) {
			spy := &modelSpy{}
			e, s := setup(t, Config{Workspace: t.TempDir(), Models: spy.models(nil), NoProgressSteps: n})
			var script []*reinv1.ScriptedReply
			for range 10 {
				script = append(script, finalReply("done"))
			}
			c := checkContract([]*reinv1.Check{{Name: "false", Argv: []string{"false"}}}, script...)
			st, evs := runToRest(t, e, s, c)
			wantStatus(t, st, evs, statusExhausted, "no_progress")
			if got := int(spy.calls.Load()); got != want {
				t.Errorf("%d model calls, want %d", got, want)
			}
			wantCount(t, evs, "checks_completed", want)
			br := ofType(evs, "budget_reached")
			if len(br) != 1 || br[0].GetBudgetReached().GetLimit() != "no_progress" {
				t.Errorf("budget_reached %v, want one with limit no_progress", br)
			}
			got := payloads(evs)
			if tail := strings.Join(got[len(got)-3:], ","); tail != "checks_completed,budget_reached,status_changed" {
				t.Errorf("log ends %s, want checks_completed,budget_reached,status_changed", tail)
			}
		})
	}
}

// A different failure restarts the count.
func TestChecksNoProgressNeedsIdenticalResults(t *testing.T) {
	root := t.TempDir()
	spy := &modelSpy{before: func(_ context.Context, req *model.Request) {
		// Each call changes what the check prints.
		_ = os.WriteFile(filepath.Join(root, "out"), []byte(fmt.Sprintf("attempt %d\n", req.Step)), 0o600)
	}}
	e, s := setup(t, Config{Workspace: root, Models: spy.models(nil)})
	c := checkContract([]*reinv1.Check{{Name: "cat", Argv: []string{"cat", "out", "missing"}}},
		finalReply("1"), finalReply("2"), finalReply("3"), finalReply("4"))
	c.Budget = &reinv1.Budget{MaxSteps: 4}
	st, evs := runToRest(t, e, s, c)
	wantStatus(t, st, evs, statusExhausted, "max_steps")
	wantCount(t, evs, "checks_completed", 4)
}

// A check sees only the environment variables its allowlist names.
func TestChecksEnvAllowlist(t *testing.T) {
	t.Setenv("REIN_CHECK_ALLOWED", "yes")
	t.Setenv("REIN_CHECK_SECRET", "hunter2")
	e, s := setup(t, Config{Workspace: t.TempDir()})
	c := checkContract([]*reinv1.Check{{Name: "env", Argv: []string{"env"}, Env: []string{"REIN_CHECK_ALLOWED", "REIN_CHECK_UNSET"}}},
		finalReply("done"))
	st, evs := runToRest(t, e, s, c)
	wantStatus(t, st, evs, statusCompleted, "final_answer")
	tail := checksOf(t, evs)[0].GetResults()[0].GetOutputTail()
	if got := strings.TrimRight(tail, "\n"); got != "REIN_CHECK_ALLOWED=yes" {
		t.Errorf("env printed %q, want only REIN_CHECK_ALLOWED=yes", got)
	}
}

// A check that runs past its timeout is killed and fails.
func TestChecksTimeout(t *testing.T) {
	e, s := setup(t, Config{Workspace: t.TempDir(), NoProgressSteps: 1})
	c := checkContract([]*reinv1.Check{{Name: "slow", Argv: []string{"sleep", "5"}, Timeout: durationpb.New(100 * time.Millisecond)}},
		finalReply("done"))
	st, evs := runToRest(t, e, s, c)
	wantStatus(t, st, evs, statusExhausted, "no_progress")
	r := checksOf(t, evs)[0].GetResults()[0]
	if r.GetPassed() || r.GetExitCode() != -1 || !strings.Contains(r.GetOutputTail(), "timed out after 100ms") {
		t.Errorf("result %v, want failed, exit -1, timed out after 100ms", r)
	}
}

// The output tail is the last 40 lines.
func TestChecksOutputTail(t *testing.T) {
	root := t.TempDir()
	var b strings.Builder
	for i := 1; i <= 100; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	if err := os.WriteFile(filepath.Join(root, "log"), []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	e, s := setup(t, Config{Workspace: root, NoProgressSteps: 1})
	c := checkContract([]*reinv1.Check{{Name: "cat", Argv: []string{"cat", "log", "missing"}}}, finalReply("done"))
	_, evs := runToRest(t, e, s, c)
	tail := checksOf(t, evs)[0].GetResults()[0].GetOutputTail()
	lines := strings.Split(strings.TrimRight(tail, "\n"), "\n")
	if len(lines) != 40 || lines[0] != "line 62" || !strings.Contains(lines[39], "missing") {
		t.Errorf("tail has %d lines, first %q, last %q; want 40 lines from \"line 62\" to cat's error", len(lines), lines[0], lines[len(lines)-1])
	}
}

// Checks that cannot run safely are refused at start.
func TestChecksRefusedAtStart(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(root, "out")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		workspace string
		check     *reinv1.Check
		field     string
	}{
		{"no workspace", "", &reinv1.Check{Name: "t", Argv: []string{"true"}}, "contract.checks"},
		{"dir climbs out", root, &reinv1.Check{Name: "t", Argv: []string{"true"}, Dir: "../x"}, "contract.checks[0].dir"},
		{"dir absolute", root, &reinv1.Check{Name: "t", Argv: []string{"true"}, Dir: "/tmp"}, "contract.checks[0].dir"},
		{"dir links out", root, &reinv1.Check{Name: "t", Argv: []string{"true"}, Dir: "out"}, "contract.checks[0].dir"},
		{"no name", root, &reinv1.Check{Argv: []string{"true"}}, "contract.checks[0].name"},
		{"no argv", root, &reinv1.Check{Name: "t"}, "contract.checks[0].argv"},
		{"zero timeout", root, &reinv1.Check{Name: "t", Argv: []string{"true"}, Timeout: durationpb.New(0)}, "contract.checks[0].timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, s := setup(t, Config{Workspace: tc.workspace})
			c := checkContract([]*reinv1.Check{tc.check}, finalReply("done"))
			_, _, err := e.Start(testCtx(t), StartRequest{RequestID: "req", Contract: c, Principal: "alice", Tenant: "acme"})
			var fe *taskcontract.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("Start: %v, want a FieldError on %s", err, tc.field)
			}
			if got := listRuns(t, s); len(got) != 0 {
				t.Errorf("a refused Start stored %d runs", len(got))
			}
		})
	}
	// A duplicate name.
	c := checkContract([]*reinv1.Check{{Name: "t", Argv: []string{"true"}}, {Name: "t", Argv: []string{"true"}}}, finalReply("done"))
	var fe *taskcontract.FieldError
	if err := taskcontract.Validate(c); !errors.As(err, &fe) || fe.Field != "contract.checks[1].name" {
		t.Errorf("taskcontract.Validate: %v, want a FieldError on contract.checks[1].name", err)
	}
}
