package main

// Tests of `rein evaluate` with case workspaces, workspace graders and
// prices.

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// readmeTask reads README.md; its completion check needs README.md in the
// workspace it runs in.
const readmeTask = `{
  "goal": "Say what README.md says.",
  "tools": [{"name": "fs.read", "tier": "TOOL_TIER_READ"}],
  "checks": [{"name": "readme", "argv": ["test", "-f", "README.md"], "timeout": "10s"}],
  "budget": {"max_steps": 3, "timeout": "60s"}
}`

// readmeScript reads README.md, then answers.
const readmeScript = `{"decision": {"tool_call": {"tool": "fs.read", "arguments": {"path": "README.md"}}}, "usage": {"input_tokens": 10, "output_tokens": 5}}
{"decision": {"final_answer": {"text": "It says hello."}}, "usage": {"input_tokens": 20, "output_tokens": 5}}
`

// workspaceDir is a new directory holding files (path → content).
func workspaceDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for p, content := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// readmeCase is a suite case that runs readmeTask over a copy of ws.
func readmeCase(t *testing.T, name, ws, expect string) string {
	t.Helper()
	return fmt.Sprintf(`{"name": %q, "task": %q, "model": "script:%s", "workspace": %q, "expect": %s}`,
		name, writeFile(t, "task.json", readmeTask), writeFile(t, "model.jsonl", readmeScript), ws, expect)
}

// ownWorkspace is a workspace check that fails if a trial before it left
// its marker in the same workspace.
const ownWorkspace = `{"name": "own workspace", "argv": ["sh", "-c", "test ! -e marker && touch marker"]}`

// Each trial runs over a fresh copy of the case's workspace: the file tools
// and the completion check work there, the graders see it afterwards, and
// the case's directory is left as it was.
func TestEvaluateWorkspace(t *testing.T) {
	t.Parallel()
	ws := workspaceDir(t, map[string]string{"README.md": "hello world\n"})
	suite := writeFile(t, "suite.json", `{"cases": [`+readmeCase(t, "readme", ws, `{
		"status": "completed", "tools_called": ["fs.read"], "tools_not_called": ["fs.write"],
		"files": {"README.md": "hello"},
		"workspace_checks": [`+ownWorkspace+`, {"name": "readme", "argv": ["sh", "-c", "test -f README.md"], "timeout": "10s"}]}`)+`]}`)
	r := cli(t, "evaluate", suite, "--trials", "3", "--concurrency", "2", "--json").mustExit(t, 0)
	rep := decodeOne(t, r.stdout)
	c := evalCases(t, rep)["readme"]
	if c["pass_rate"] != 1.0 || num(t, c["trials"], "trials") != 3 {
		t.Fatalf("case %v", c)
	}
	ids := map[any]bool{}
	for _, tr := range c["trial_results"].([]any) {
		trial := obj(t, tr, "trial")
		ids[trial["run_id"]] = true
		if trial["status"] != "completed" || fmt.Sprint(trial["failures"]) != "[]" {
			t.Errorf("trial %v", trial)
		}
	}
	if len(ids) != 3 {
		t.Errorf("run IDs %v, want 3 distinct", ids)
	}
	if left, err := os.ReadDir(ws); err != nil || len(left) != 1 {
		t.Errorf("the case's workspace changed: %v, %v", left, err)
	}
}

// The failing twin: graders that do not hold fail the trial, each named,
// and the evaluation exits 1 under the threshold.
func TestEvaluateWorkspaceFails(t *testing.T) {
	t.Parallel()
	ws := workspaceDir(t, map[string]string{"README.md": "hello world\n"})
	// A workspace a trial already marked fails ownWorkspace, as a shared
	// one would from the second trial on.
	marked := workspaceDir(t, map[string]string{"README.md": "hello world\n", "marker": ""})
	suite := writeFile(t, "suite.json", `{"cases": [`+
		readmeCase(t, "graders", ws, `{"status": "completed",
			"files": {"README.md": "goodbye", "missing.txt": ""},
			"workspace_checks": [{"name": "boom", "argv": ["sh", "-c", "echo first; echo boom; exit 1"]}]}`)+`, `+
		readmeCase(t, "marked", marked, `{"workspace_checks": [`+ownWorkspace+`]}`)+`]}`)
	r := cli(t, "evaluate", suite, "--json").mustExit(t, 1)
	mustContain(t, "stderr", r.stderr, "pass rate 0.00 is under the minimum 1.00")
	rep := decodeOne(t, r.stdout)
	if o := obj(t, rep["overall"], "overall"); o["pass_rate"] != 0.0 || rep["passed"] != false {
		t.Errorf("overall %v, passed %v", o, rep["passed"])
	}
	cases := evalCases(t, rep)
	trial := obj(t, cases["graders"]["trial_results"].([]any)[0], "graders trial")
	// The run itself completed: only the workspace graders fail.
	if trial["status"] != "completed" {
		t.Errorf("status %v", trial["status"])
	}
	mustContain(t, "failures", fmt.Sprint(trial["failures"]),
		`file README.md does not contain "goodbye"`, "file missing.txt does not exist",
		`workspace check "boom" (sh -c echo first; echo boom; exit 1) exited 1`, "first\nboom")
	trial = obj(t, cases["marked"]["trial_results"].([]any)[0], "marked trial")
	mustContain(t, "failures", fmt.Sprint(trial["failures"]), `workspace check "own workspace"`)

	// The table names them too, the check's output indented below.
	r = cli(t, "evaluate", suite).mustExit(t, 1)
	mustContain(t, "stdout", r.stdout, "FAILED", "graders trial 1", `workspace check "boom"`, "\n    first\n    boom\n")
	// Under a threshold of 0 it passes.
	cli(t, "evaluate", suite, "--min-pass-rate", "0").mustExit(t, 0)
}

func TestEvaluateWorkspaceUsageErrors(t *testing.T) {
	t.Parallel()
	ws := workspaceDir(t, map[string]string{"README.md": "hello\n"})
	linked := workspaceDir(t, map[string]string{"README.md": "hello\n"})
	if err := os.Symlink("/etc/passwd", filepath.Join(linked, "passwd")); err != nil {
		t.Fatal(err)
	}
	task, script := writeFile(t, "task.json", readmeTask), writeFile(t, "model.jsonl", readmeScript)
	suite := func(name, c string) string {
		return writeFile(t, name, `{"cases": [`+c+`]}`)
	}
	noWS := suite("nows.json", fmt.Sprintf(`{"name": "nows", "task": %q, "expect": {"files": {"README.md": ""}}}`, absExample(t, "invoice", "task.json")))
	checksNoWS := suite("checksnows.json", fmt.Sprintf(`{"name": "needs", "task": %q, "model": "script:%s"}`, task, script))
	link := suite("link.json", readmeCase(t, "link", linked, `{}`))
	missing := suite("missing.json", readmeCase(t, "missing", filepath.Join(ws, "nowhere"), `{}`))
	climb := suite("climb.json", readmeCase(t, "climb", ws, `{"files": {"../README.md": ""}}`))
	abs := suite("abs.json", readmeCase(t, "abs", ws, `{"files": {"/etc/passwd": "root"}}`))
	noArgv := suite("noargv.json", readmeCase(t, "noargv", ws, `{"workspace_checks": [{"name": "c", "argv": []}]}`))
	climbDir := suite("climbdir.json", readmeCase(t, "climbdir", ws, `{"workspace_checks": [{"name": "c", "argv": ["true"], "dir": "../x"}]}`))
	for _, tc := range []struct {
		name string
		file string
		want []string
	}{
		{"graders without a workspace", noWS, []string{noWS, `case "nows"`, "expect.files", "workspace"}},
		{"completion checks without a workspace", checksNoWS, []string{checksNoWS, "cases[0].task", `"needs"`, "completion checks", "workspace"}},
		{"symbolic link", link, []string{link, "cases[0].workspace", `"link"`, "passwd is a symbolic link"}},
		{"missing workspace", missing, []string{missing, "cases[0].workspace", "nowhere"}},
		{"climbing file", climb, []string{climb, `cases[0].expect.files["../README.md"]`, `".."`}},
		{"absolute file", abs, []string{abs, `cases[0].expect.files["/etc/passwd"]`, "absolute"}},
		{"empty argv", noArgv, []string{noArgv, "cases[0].expect.workspace_checks[0].argv: required"}},
		{"climbing dir", climbDir, []string{climbDir, "cases[0].expect.workspace_checks[0].dir"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := cli(t, "evaluate", tc.file).mustExit(t, 2)
			mustContain(t, "stderr", r.stderr, tc.want...)
			if r.stdout != "" || strings.Contains(r.stderr, " trial 1/") {
				t.Errorf("a refused suite ran: stdout %q, stderr %q", r.stdout, r.stderr)
			}
		})
	}
}

// With --prices, each trial's cost is its run's: the script's tokens at
// the file's price.
func TestEvaluateCost(t *testing.T) {
	t.Parallel()
	prices := writeFile(t, "prices.json", `{"script/*": {"input_per_mtok": 1000, "output_per_mtok": 2000}}`)
	suite := writeFile(t, "suite.json", `{"cases": [`+exampleCase(t, "invoice", `{"status": "completed"}`)+`]}`)
	r := cli(t, "evaluate", suite, "--trials", "2", "--prices", prices, "--json").mustExit(t, 0)
	rep := decodeOne(t, r.stdout)
	// examples/invoice/model.jsonl: 1,640 input and 95 output tokens.
	const want = (1640*1000 + 95*2000) / 1e6
	near := func(what string, v any) {
		t.Helper()
		f, ok := v.(float64)
		if !ok || math.Abs(f-want) > 1e-9 {
			t.Errorf("%s = %v, want %v", what, v, want)
		}
	}
	o := obj(t, rep["overall"], "overall")
	near("overall.median_cost_usd", o["median_cost_usd"])
	near("overall.median_cost", o["median_cost"])
	c := evalCases(t, rep)["invoice"]
	near("invoice.median_cost_usd", c["median_cost_usd"])
	for i, tr := range c["trial_results"].([]any) {
		near(fmt.Sprintf("trial %d cost_usd", i+1), obj(t, tr, "trial")["cost_usd"])
	}
	mustContain(t, "cost_note", fmt.Sprint(rep["cost_note"]), prices)

	r = cli(t, "evaluate", suite, "--prices", prices).mustExit(t, 0)
	mustContain(t, "stdout", r.stdout, "$1.830000", "cost: US dollars, at the prices of "+prices)
}

// The failing twin: without --prices the scripted model is free, and a
// bad price file is refused before anything runs.
func TestEvaluateCostFree(t *testing.T) {
	t.Parallel()
	suite := writeFile(t, "suite.json", `{"cases": [`+exampleCase(t, "invoice", `{"status": "completed"}`)+`]}`)
	r := cli(t, "evaluate", suite, "--json").mustExit(t, 0)
	rep := decodeOne(t, r.stdout)
	o := obj(t, rep["overall"], "overall")
	if o["median_cost_usd"] != 0.0 || o["median_cost"] != 0.0 {
		t.Errorf("overall %v, want no cost", o)
	}
	trial := obj(t, evalCases(t, rep)["invoice"]["trial_results"].([]any)[0], "trial")
	if trial["cost_usd"] != 0.0 {
		t.Errorf("trial cost_usd %v, want 0", trial["cost_usd"])
	}

	for _, tc := range []struct{ name, content, want string }{
		{"not JSON", `nope`, "not a JSON object of prices"},
		{"negative", `{"script/*": {"input_per_mtok": -1, "output_per_mtok": 0}}`, "a price must be"},
		{"no provider", `{"script": {"input_per_mtok": 1, "output_per_mtok": 1}}`, `"provider/name"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			bad := writeFile(t, "prices.json", tc.content)
			r := cli(t, "evaluate", suite, "--prices", bad).mustExit(t, 2)
			mustContain(t, "stderr", r.stderr, "--prices", bad, tc.want)
			if r.stdout != "" || strings.Contains(r.stderr, " trial 1/") {
				t.Errorf("ran with a bad price file: stdout %q, stderr %q", r.stdout, r.stderr)
			}
		})
	}
	r = cli(t, "evaluate", suite, "--prices", filepath.Join(t.TempDir(), "none.json")).mustExit(t, 2)
	mustContain(t, "stderr", r.stderr, "--prices", "none.json")
}
