package evaluate

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestParseSuite(t *testing.T) {
	s, err := ParseSuite([]byte(`{"min_pass_rate": 0.5, "cases": [
		{"name": "a", "task": "t.json", "model": "script:m.jsonl", "tools": "fixture:f.json",
		 "expect": {"status": "completed", "result_data": {"paid": false}, "tools_called": ["x"]}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if *s.MinPassRate != 0.5 || len(s.Cases) != 1 || s.Cases[0].Expect.ToolsCalled[0] != "x" {
		t.Errorf("suite %+v", s)
	}
}

func TestParseSuiteWorkspace(t *testing.T) {
	s, err := ParseSuite([]byte(`{"cases": [{"name": "a", "task": "t.json", "workspace": "ws",
		"expect": {"files": {"README.md": "hello", "sub/out.txt": "", "./a/./b.txt": "x"},
		  "workspace_checks": [
		    {"name": "tests", "argv": ["go", "test", "./..."], "dir": "sub", "timeout": "90s"},
		    {"name": "root", "argv": ["true"], "dir": "."},
		    {"name": "default", "argv": ["true"]}]}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	c := s.Cases[0]
	if c.Workspace != "ws" || c.Expect.Files["README.md"] != "hello" || len(c.Expect.WorkspaceChecks) != 3 {
		t.Fatalf("case %+v", c)
	}
	checks := c.Expect.WorkspaceChecks
	if checks[0].Dir != "sub" || checks[0].Limit() != 90*time.Second || checks[0].Argv[2] != "./..." {
		t.Errorf("check %+v, wait %v", checks[0], checks[0].Limit())
	}
	if w := checks[2].Limit(); w != 60*time.Second {
		t.Errorf("default wait %v, want 60s", w)
	}
	// A workspace with no workspace graders is fine too.
	if _, err := ParseSuite([]byte(`{"cases": [{"name": "a", "task": "t", "workspace": "ws"}]}`)); err != nil {
		t.Errorf("a workspace and no graders: %v", err)
	}
}

func TestParseSuiteRefusesWorkspace(t *testing.T) {
	c := func(expect string) string {
		return `{"cases": [{"name": "ok", "task": "t"}, {"name": "w", "task": "t", "workspace": "ws", "expect": ` + expect + `}]}`
	}
	for _, tc := range []struct{ in, want string }{
		{`{"cases": [{"name": "nows", "task": "t", "expect": {"files": {"a": ""}}}]}`, `cases[0] (case "nows"): expect.files and expect.workspace_checks grade`},
		{`{"cases": [{"name": "nows", "task": "t", "expect": {"workspace_checks": [{"name": "c", "argv": ["true"]}]}}]}`, `case "nows"`},
		{c(`{"files": {"": "x"}}`), `cases[1].expect.files[""]: empty`},
		{c(`{"files": {"/etc/passwd": ""}}`), `cases[1].expect.files["/etc/passwd"]: "/etc/passwd" is absolute`},
		{c(`{"files": {"\\share\\x": ""}}`), "is absolute"},
		{c(`{"files": {"../secret": ""}}`), `cases[1].expect.files["../secret"]: "../secret" has a ".."`},
		{c(`{"files": {"a/../../b": ""}}`), `has a ".."`},
		{c(`{"files": {"a/../b": ""}}`), `has a ".."`},
		{c(`{"files": {"a\\..\\b": ""}}`), `has a ".."`},
		{c(`{"files": {".": ""}}`), "is the workspace itself"},
		{c(`{"files": {"a/..": ""}}`), `has a ".."`},
		{c(`{"files": {"a": 1}}`), "cannot unmarshal"},
		{c(`{"workspace_checks": [{"argv": ["true"]}]}`), "cases[1].expect.workspace_checks[0].name: required"},
		{c(`{"workspace_checks": [{"name": "c", "argv": ["true"]}, {"name": "c", "argv": ["true"]}]}`), `workspace_checks[1].name: "c" is used by another check`},
		{c(`{"workspace_checks": [{"name": "c"}]}`), "workspace_checks[0].argv: required"},
		{c(`{"workspace_checks": [{"name": "c", "argv": []}]}`), "workspace_checks[0].argv: required"},
		{c(`{"workspace_checks": [{"name": "c", "argv": [""]}]}`), "workspace_checks[0].argv: required"},
		{c(`{"workspace_checks": [{"name": "c", "argv": ["true"], "dir": ".."}]}`), `workspace_checks[0].dir: ".." has a ".."`},
		{c(`{"workspace_checks": [{"name": "c", "argv": ["true"], "dir": "sub/../../x"}]}`), `workspace_checks[0].dir`},
		{c(`{"workspace_checks": [{"name": "c", "argv": ["true"], "dir": "/tmp"}]}`), `workspace_checks[0].dir: "/tmp" is absolute`},
		{c(`{"workspace_checks": [{"name": "c", "argv": ["true"], "timeout": "soon"}]}`), `workspace_checks[0].timeout: "soon" is not a positive duration`},
		{c(`{"workspace_checks": [{"name": "c", "argv": ["true"], "timeout": "0s"}]}`), `workspace_checks[0].timeout: "0s"`},
		{c(`{"workspace_checks": [{"name": "c", "argv": ["true"], "timeout": "-1s"}]}`), `workspace_checks[0].timeout: "-1s"`},
		{c(`{"workspace_checks": [{"name": "c", "argv": ["true"], "env": ["HOME"]}]}`), `unknown field "env"`},
		{c(`{"workspace_checks": [{"name": "c", "argv": "go test"}]}`), "cannot unmarshal"},
	} {
		_, err := ParseSuite([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseSuite(%s) = %v, want an error containing %q", tc.in, err, tc.want)
		}
	}
}

func TestParseSuiteRefuses(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"cases": [{"name": "a", "task": "t", "expect": {"workspace": {}}}]}`, `unknown field "workspace"`},
		{`{"cases": [{"name": "a", "task": "t", "bogus": 1}]}`, `unknown field "bogus"`},
		{`{"extra": 1, "cases": []}`, `unknown field "extra"`},
		{`{"cases": []}`, "cases: the suite has no cases"},
		{`{"cases": [{"task": "t"}]}`, "cases[0].name: required"},
		{`{"cases": [{"name": "a"}]}`, "cases[0].task: required"},
		{`{"cases": [{"name": "a", "task": "t"}, {"name": "a", "task": "t"}]}`, "cases[1].name"},
		{`{"cases": [{"name": "a", "task": "t", "expect": {"status": "done"}}]}`, "cases[0].expect.status"},
		{`{"min_pass_rate": 2, "cases": [{"name": "a", "task": "t"}]}`, "min_pass_rate"},
		{`{"cases": [{"name": "a", "task": "t"}]} {}`, "after the suite"},
		{`[]`, "cannot unmarshal"},
	} {
		_, err := ParseSuite([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseSuite(%s) = %v, want an error containing %q", tc.in, err, tc.want)
		}
	}
}

func TestGrade(t *testing.T) {
	o := Observation{
		Status:     "completed",
		ResultText: "INV-42 is not paid",
		ResultData: map[string]any{"paid": false, "due": "2026-12-15", "lines": []any{map[string]any{"n": 1.0, "x": "y"}}},
		Called:     []string{"invoices.get"},
	}
	pass := Expect{
		Status:             "completed",
		ResultTextContains: "not paid",
		ResultData:         json.RawMessage(`{"paid": false, "lines": [{"n": 1}]}`),
		ToolsCalled:        []string{"invoices.get"},
		ToolsNotCalled:     []string{"invoices.delete"},
		// Grade leaves the workspace to GradeWorkspace.
		Files:           map[string]string{"missing.txt": "x"},
		WorkspaceChecks: []WorkspaceCheck{{Name: "fails", Argv: []string{"false"}}},
	}
	if f := Grade(pass, o); len(f) != 0 {
		t.Errorf("Grade = %v, want a pass", f)
	}
	if f := Grade(Expect{}, o); len(f) != 0 {
		t.Errorf("empty expectation: %v, want a pass", f)
	}
	fail := Expect{
		Status:             "failed",
		ResultTextContains: "paid on",
		ResultData:         json.RawMessage(`{"lines": [{"n": 2}]}`),
		ToolsCalled:        []string{"refunds.create"},
		ToolsNotCalled:     []string{"invoices.get"},
	}
	f := Grade(fail, o)
	got := strings.Join(f, "\n")
	for _, want := range []string{"status completed, want failed", `does not contain "paid on"`,
		"result_data.lines[0].n does not match", "tool refunds.create was not called", "tool invoices.get was called"} {
		if !strings.Contains(got, want) {
			t.Errorf("failures do not contain %q:\n%s", want, got)
		}
	}
	if len(f) != 5 {
		t.Errorf("%d failures, want 5: %v", len(f), f)
	}
}

func TestSubset(t *testing.T) {
	for _, tc := range []struct {
		want, got string
		ok        bool
	}{
		{`1`, `1`, true},
		{`1`, `"1"`, false},
		{`{}`, `{"a": 1}`, true},
		{`{"a": 1}`, `{}`, false},
		{`{"a": {"b": [1, 2]}}`, `{"a": {"b": [1, 2], "c": 3}}`, true},
		{`[1, 2]`, `[1, 2, 3]`, false},
		{`null`, `null`, true},
		{`{"a": 1}`, `null`, false},
	} {
		var w, g any
		_ = json.Unmarshal([]byte(tc.want), &w)
		_ = json.Unmarshal([]byte(tc.got), &g)
		if _, ok := Subset(w, g, "x"); ok != tc.ok {
			t.Errorf("Subset(%s, %s) = %v, want %v", tc.want, tc.got, ok, tc.ok)
		}
	}
}

func TestSummarize(t *testing.T) {
	var trials []Trial
	for i := 1; i <= 20; i++ {
		tr := Trial{Observation: Observation{Tokens: uint64(i * 10), CostUSD: float64(i), Wall: time.Duration(i) * time.Millisecond, Refused: 1}}
		if i > 15 {
			tr.Failures = []string{"no"}
		}
		trials = append(trials, tr)
	}
	s := Summarize(trials)
	want := Stats{Trials: 20, Passed: 15, PassRate: 0.75, MedianTokens: 105, MedianCost: 10.5, MedianCostUSD: 10.5, P95WallMS: 19, Refused: 20}
	if s != want {
		t.Errorf("Summarize = %+v, want %+v", s, want)
	}
	if s := Summarize(nil); s != (Stats{}) {
		t.Errorf("Summarize(nil) = %+v", s)
	}
}

func TestMedianPercentile(t *testing.T) {
	if m := Median([]float64{3, 1, 2}); m != 2 {
		t.Errorf("median %v", m)
	}
	if m := Median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("median %v", m)
	}
	if p := Percentile([]float64{5}, 95); p != 5 {
		t.Errorf("p95 %v", p)
	}
	if p := Percentile([]float64{1, 2, 3}, 95); p != 3 {
		t.Errorf("p95 %v", p)
	}
}
