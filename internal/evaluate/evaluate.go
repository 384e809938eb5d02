// Package evaluate is `rein evaluate` without its server: the suite file's
// format, grading one trial against a case's expectations, copying a case's
// workspace for a trial and grading the workspace a trial leaves, and the
// figures reported per case and overall (pass rate, median tokens and cost,
// p95 wall time, refused tool attempts). Running the trials is the CLI's job.
//
// Invariants: a suite that parses names only workspace paths that stay
// inside the workspace (relative, no ".."), and only a case with a
// workspace grades one. Grade is pure; GradeWorkspace reads files through
// an os.Root and runs the suite's own commands.
package evaluate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/reinhq/rein/internal/runstate"
)

// Suite is an evaluation suite file:
//
//	{"min_pass_rate": 0.9, "cases": [{"name": "…", "task": "task.json",
//	  "model": "script:model.jsonl", "tools": "fixture:tools.json",
//	  "workspace": "dir",
//	  "expect": {"status": "completed", "result_text_contains": "…",
//	    "result_data": {…}, "tools_called": ["…"], "tools_not_called": ["…"],
//	    "files": {"path": "substring"},
//	    "workspace_checks": [{"name": "…", "argv": ["…"], "dir": "…", "timeout": "60s"}]}}]}
//
// Paths are relative to the suite file, except those of files and
// workspace_checks, which are relative to the trial's workspace. Unknown
// fields are refused.
type Suite struct {
	// MinPassRate, when set, is the overall pass rate under which the
	// evaluation fails.
	MinPassRate *float64 `json:"min_pass_rate,omitempty"`
	Cases       []Case   `json:"cases"`
}

// Case is one task to run several times and grade.
type Case struct {
	Name string `json:"name"`
	// Task is a task file (the protojson form of a TaskContract).
	Task string `json:"task"`
	// Model, when set, is script:FILE and replaces the task's model.
	Model string `json:"model,omitempty"`
	// Tools, when set, is fixture:FILE.
	Tools string `json:"tools,omitempty"`
	// Workspace, when set, is a directory each trial gets a fresh copy of,
	// as the workspace of its file tools and completion checks. It may hold
	// regular files and directories only.
	Workspace string `json:"workspace,omitempty"`
	Expect    Expect `json:"expect"`
}

// Expect is what a trial must show to pass. An empty field checks nothing.
type Expect struct {
	// Status is the lower-case status the run must stand in when it pauses
	// or ends ("completed", "needs_approval", …).
	Status string `json:"status,omitempty"`
	// ResultTextContains must be a substring of the final answer's text.
	ResultTextContains string `json:"result_text_contains,omitempty"`
	// ResultData must be a subset of the final answer's data: every key of
	// an object present and matching, arrays element by element.
	ResultData json.RawMessage `json:"result_data,omitempty"`
	// ToolsCalled must each have been called (a tool_requested event) at
	// least once.
	ToolsCalled []string `json:"tools_called,omitempty"`
	// ToolsNotCalled must never have been called. An attempt the harness
	// refused (tool_refused) is not a call.
	ToolsNotCalled []string `json:"tools_not_called,omitempty"`
	// Files maps a path in the trial's final workspace to a substring of
	// its content: the file must exist, and contain the substring unless
	// it is "". Needs the case's workspace.
	Files map[string]string `json:"files,omitempty"`
	// WorkspaceChecks run, in order, in the trial's final workspace once
	// the run pauses or ends; each must exit 0. Needs the case's workspace.
	WorkspaceChecks []WorkspaceCheck `json:"workspace_checks,omitempty"`
}

// WorkspaceCheck is a command that grades a trial's final workspace.
type WorkspaceCheck struct {
	// Name names the check in failures; unique within a case.
	Name string `json:"name"`
	// Argv is the command and its arguments, run with no shell and rein's
	// environment.
	Argv []string `json:"argv"`
	// Dir is the directory to run in, relative to the workspace; "" is
	// the workspace itself.
	Dir string `json:"dir,omitempty"`
	// Timeout is a Go duration ("90s", "2m"); "" is DefaultCheckTimeout.
	Timeout string `json:"timeout,omitempty"`
}

// DefaultCheckTimeout bounds a workspace check with no timeout.
const DefaultCheckTimeout = 60 * time.Second

// Limit is how long the check may run.
func (c WorkspaceCheck) Limit() time.Duration {
	if d, err := time.ParseDuration(c.Timeout); err == nil && d > 0 {
		return d
	}
	return DefaultCheckTimeout
}

// ParseSuite decodes and checks a suite file's content. Errors name the
// field; the caller adds the file.
func ParseSuite(data []byte) (*Suite, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	s := &Suite{}
	if err := dec.Decode(s); err != nil {
		return nil, errors.New(strings.TrimPrefix(err.Error(), "json: "))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("unexpected data after the suite object")
	}
	if r := s.MinPassRate; r != nil && (*r < 0 || *r > 1 || math.IsNaN(*r)) {
		return nil, fmt.Errorf("min_pass_rate: %v is not between 0 and 1", *r)
	}
	if len(s.Cases) == 0 {
		return nil, errors.New("cases: the suite has no cases")
	}
	seen := map[string]bool{}
	for i, c := range s.Cases {
		at := fmt.Sprintf("cases[%d]", i)
		switch {
		case c.Name == "":
			return nil, fmt.Errorf("%s.name: required", at)
		case seen[c.Name]:
			return nil, fmt.Errorf("%s.name: %q is used by another case", at, c.Name)
		case c.Task == "":
			return nil, fmt.Errorf("%s.task: required", at)
		}
		seen[c.Name] = true
		if st := c.Expect.Status; st != "" {
			if _, ok := runstate.ParseStatus(st); !ok || st == "unspecified" {
				return nil, fmt.Errorf("%s.expect.status: %q is not a run status", at, st)
			}
		}
		if len(c.Expect.ResultData) > 0 {
			var v any
			if err := json.Unmarshal(c.Expect.ResultData, &v); err != nil {
				return nil, fmt.Errorf("%s.expect.result_data: %v", at, err)
			}
		}
		if err := checkWorkspaceExpect(at, c); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// checkWorkspaceExpect checks a case's workspace graders: they need a
// workspace, and their paths stay inside it.
func checkWorkspaceExpect(at string, c Case) error {
	e := c.Expect
	if c.Workspace == "" && (len(e.Files) > 0 || len(e.WorkspaceChecks) > 0) {
		return fmt.Errorf("%s (case %q): expect.files and expect.workspace_checks grade the trial's final workspace, and the case has none: give it a \"workspace\" directory", at, c.Name)
	}
	for _, p := range slices.Sorted(maps.Keys(e.Files)) {
		if err := workspacePath(p, false); err != nil {
			return fmt.Errorf("%s.expect.files[%q]: %v", at, p, err)
		}
	}
	names := map[string]bool{}
	for j, ch := range e.WorkspaceChecks {
		cat := fmt.Sprintf("%s.expect.workspace_checks[%d]", at, j)
		switch {
		case ch.Name == "":
			return fmt.Errorf("%s.name: required", cat)
		case names[ch.Name]:
			return fmt.Errorf("%s.name: %q is used by another check of the case", cat, ch.Name)
		case len(ch.Argv) == 0 || ch.Argv[0] == "":
			return fmt.Errorf("%s.argv: required: the command and its arguments, such as [\"go\", \"test\", \"./...\"]", cat)
		}
		names[ch.Name] = true
		if ch.Dir != "" {
			if err := workspacePath(ch.Dir, true); err != nil {
				return fmt.Errorf("%s.dir: %v", cat, err)
			}
		}
		if ch.Timeout != "" {
			d, err := time.ParseDuration(ch.Timeout)
			if err != nil || d <= 0 {
				return fmt.Errorf("%s.timeout: %q is not a positive duration such as \"90s\"", cat, ch.Timeout)
			}
		}
	}
	return nil
}

// workspacePath refuses a path that could leave the workspace: empty,
// absolute, or with a ".." element. dir allows "." (the workspace itself).
func workspacePath(p string, dir bool) error {
	if p == "" {
		return errors.New("empty: give a path relative to the workspace")
	}
	if filepath.IsAbs(p) || strings.HasPrefix(p, "/") || strings.HasPrefix(p, `\`) {
		return fmt.Errorf("%q is absolute: give a path relative to the workspace", p)
	}
	for _, part := range strings.FieldsFunc(p, func(r rune) bool { return r == '/' || r == '\\' }) {
		if part == ".." {
			return fmt.Errorf("%q has a \"..\": a path must stay inside the workspace", p)
		}
	}
	if !dir && filepath.Clean(p) == "." {
		return fmt.Errorf("%q is the workspace itself: name a file in it", p)
	}
	return nil
}

// Observation is what one trial showed.
type Observation struct {
	RunID  string
	Status string
	// ResultText and ResultData are the final answer's; ResultData is a
	// decoded JSON value (nil when unset).
	ResultText string
	ResultData any
	// Called is every tool_requested tool, in order; Refused counts the
	// tool_refused events.
	Called  []string
	Refused int
	Tokens  uint64
	// CostUSD is the run's cost (Run.cost_usd), priced by the server's
	// price table.
	CostUSD float64
	Wall    time.Duration
}

// Grade checks o against e, all but its workspace graders (files,
// workspace_checks: GradeWorkspace), and returns why it fails; none means
// it passes.
func Grade(e Expect, o Observation) []string {
	var fails []string
	if e.Status != "" && o.Status != e.Status {
		fails = append(fails, fmt.Sprintf("status %s, want %s", o.Status, e.Status))
	}
	if e.ResultTextContains != "" && !strings.Contains(o.ResultText, e.ResultTextContains) {
		fails = append(fails, fmt.Sprintf("result text %q does not contain %q", o.ResultText, e.ResultTextContains))
	}
	if len(e.ResultData) > 0 {
		var want any
		if err := json.Unmarshal(e.ResultData, &want); err != nil {
			fails = append(fails, "result_data: "+err.Error())
		} else if path, ok := Subset(want, o.ResultData, "result_data"); !ok {
			fails = append(fails, path+" does not match")
		}
	}
	for _, t := range e.ToolsCalled {
		if !slices.Contains(o.Called, t) {
			fails = append(fails, fmt.Sprintf("tool %s was not called", t))
		}
	}
	for _, t := range e.ToolsNotCalled {
		if slices.Contains(o.Called, t) {
			fails = append(fails, fmt.Sprintf("tool %s was called", t))
		}
	}
	return fails
}

// Subset reports whether got holds want: objects need every key of want
// (extra keys in got are fine), arrays the same length and each element a
// subset, anything else equality. On a mismatch it returns where, under path.
func Subset(want, got any, path string) (string, bool) {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return path, false
		}
		keys := make([]string, 0, len(w))
		for k := range w {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			gv, ok := g[k]
			if !ok {
				return path + "." + k, false
			}
			if p, ok := Subset(w[k], gv, path+"."+k); !ok {
				return p, false
			}
		}
		return "", true
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return path, false
		}
		for i := range w {
			if p, ok := Subset(w[i], g[i], fmt.Sprintf("%s[%d]", path, i)); !ok {
				return p, false
			}
		}
		return "", true
	}
	if !reflect.DeepEqual(want, got) {
		return path, false
	}
	return "", true
}

// Stats are the figures of a set of trials.
type Stats struct {
	Trials       int     `json:"trials"`
	Passed       int     `json:"passed"`
	PassRate     float64 `json:"pass_rate"`
	MedianTokens float64 `json:"median_tokens"`
	// MedianCost is MedianCostUSD under the report's first name for it.
	MedianCost    float64 `json:"median_cost"`
	MedianCostUSD float64 `json:"median_cost_usd"`
	P95WallMS     float64 `json:"p95_wall_ms"`
	Refused       int     `json:"refused_attempts"`
}

// Trial is one graded trial.
type Trial struct {
	Observation
	Failures []string
}

// Passed reports whether the trial met every expectation.
func (t Trial) Passed() bool { return len(t.Failures) == 0 }

// Summarize computes the figures of trials.
func Summarize(trials []Trial) Stats {
	s := Stats{Trials: len(trials)}
	tokens := make([]float64, 0, len(trials))
	costs := make([]float64, 0, len(trials))
	walls := make([]float64, 0, len(trials))
	for _, t := range trials {
		if t.Passed() {
			s.Passed++
		}
		s.Refused += t.Refused
		tokens = append(tokens, float64(t.Tokens))
		costs = append(costs, t.CostUSD)
		walls = append(walls, float64(t.Wall)/float64(time.Millisecond))
	}
	if s.Trials > 0 {
		s.PassRate = float64(s.Passed) / float64(s.Trials)
	}
	s.MedianTokens = Median(tokens)
	s.MedianCostUSD = Median(costs)
	s.MedianCost = s.MedianCostUSD
	s.P95WallMS = Percentile(walls, 95)
	return s
}

// Median is the middle value of xs (the mean of the two middle ones for an
// even count); 0 for none.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Percentile is the nearest-rank p-th percentile of xs: the smallest value
// with at least p% of xs at or below it; 0 for none.
func Percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	rank = max(1, min(rank, len(s)))
	return s[rank-1]
}
