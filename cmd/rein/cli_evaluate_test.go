package main

// Tests of `rein evaluate`, through Run, on the example suite and on suites
// written into temporary directories.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// exampleSuite is the path of the example suite.
var exampleSuite = filepath.Join("..", "..", "examples", "eval", "suite.json")

// absExample is the absolute path of an example's file, for suites written
// elsewhere.
func absExample(t *testing.T, name, file string) string {
	t.Helper()
	p, err := filepath.Abs(example(name, file))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// exampleCase is a suite case that runs an example with expect.
func exampleCase(t *testing.T, name, expect string) string {
	t.Helper()
	return fmt.Sprintf(`{"name": %q, "task": %q, "model": "script:%s", "tools": "fixture:%s", "expect": %s}`,
		name, absExample(t, name, "task.json"), absExample(t, name, "model.jsonl"), absExample(t, name, "tools.json"), expect)
}

// evalCases returns the report's cases by name.
func evalCases(t *testing.T, rep map[string]any) map[string]map[string]any {
	t.Helper()
	list, ok := rep["cases"].([]any)
	if !ok {
		t.Fatalf("cases = %#v, want a list", rep["cases"])
	}
	out := map[string]map[string]any{}
	for i, c := range list {
		m := obj(t, c, fmt.Sprintf("cases[%d]", i))
		out[m["name"].(string)] = m
	}
	return out
}

// TestEvaluateExampleSuite is not parallel: it points TMPDIR and
// XDG_STATE_HOME at directories of its own to see that nothing is left
// behind and the default store is never made.
func TestEvaluateExampleSuite(t *testing.T) {
	tmp, state := t.TempDir(), t.TempDir()
	t.Setenv("TMPDIR", tmp)
	t.Setenv("XDG_STATE_HOME", state)
	r := cli(t, "evaluate", exampleSuite, "--json").mustExit(t, 0)
	rep := decodeOne(t, r.stdout)
	if rep["passed"] != true || rep["cost_note"] != "US dollars, at rein's default prices" {
		t.Errorf("passed %v, cost_note %v", rep["passed"], rep["cost_note"])
	}
	// The scripted model is free at the default prices.
	overall := obj(t, rep["overall"], "overall")
	if overall["pass_rate"] != 1.0 || num(t, overall["trials"], "overall.trials") != 3 ||
		overall["median_cost"] != 0.0 || overall["median_cost_usd"] != 0.0 {
		t.Errorf("overall %v", overall)
	}
	cases := evalCases(t, rep)
	inv, ref, launch := cases["invoice"], cases["refund"], cases["launch"]
	if inv == nil || ref == nil || launch == nil {
		t.Fatalf("cases %v", cases)
	}
	for name, c := range cases {
		if c["pass_rate"] != 1.0 {
			t.Errorf("%s: pass_rate %v", name, c["pass_rate"])
		}
	}
	// The invoice model first asks for a tool it is not granted.
	if n := num(t, inv["refused_attempts"], "invoice.refused_attempts"); n != 1 {
		t.Errorf("invoice refused_attempts %d, want 1", n)
	}
	if n := num(t, inv["median_tokens"], "invoice.median_tokens"); n != 1735 {
		t.Errorf("invoice median_tokens %d, want 1735", n)
	}
	trial := obj(t, ref["trial_results"].([]any)[0], "refund trial")
	if trial["status"] != "needs_approval" {
		t.Errorf("refund trial status %v", trial["status"])
	}
	// The launch case reads its workspace's copy and passes its workspace
	// graders.
	if n := num(t, launch["median_tokens"], "launch.median_tokens"); n != 584 {
		t.Errorf("launch median_tokens %d, want 584", n)
	}
	trial = obj(t, launch["trial_results"].([]any)[0], "launch trial")
	if trial["status"] != "completed" || trial["cost_usd"] != 0.0 {
		t.Errorf("launch trial %v", trial)
	}
	mustNotExist(t, filepath.Join(state, "rein", "rein.db"))
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("temporary files left behind: %v", left)
	}

	// Without --json, a table.
	r = cli(t, "evaluate", exampleSuite).mustExit(t, 0)
	mustContain(t, "stdout", r.stdout, "CASE", "PASS RATE", "MEDIAN TOKENS", "MEDIAN COST", "P95 WALL MS", "REFUSED",
		"invoice", "refund", "launch", "overall  3/3", "100%", "$0.000000", "cost: US dollars, at rein's default prices")
	mustNotExist(t, filepath.Join(state, "rein", "rein.db"))
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("temporary files left behind: %v", left)
	}
}

func TestEvaluateFailingExpectation(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	suite := writeFile(t, "suite.json", `{"cases": [`+
		exampleCase(t, "invoice", `{"status": "failed"}`)+`, `+
		exampleCase(t, "refund", `{"status": "needs_approval", "tools_not_called": ["invoices.delete"]}`)+`]}`)
	r := cli(t, "evaluate", suite, "--json", "--db", db).mustExit(t, 1)
	mustContain(t, "stderr", r.stderr, "pass rate 0.50 is under the minimum 1.00")
	rep := decodeOne(t, r.stdout)
	if rep["passed"] != false {
		t.Errorf("passed %v", rep["passed"])
	}
	cases := evalCases(t, rep)
	if cases["invoice"]["pass_rate"] != 0.0 || cases["refund"]["pass_rate"] != 1.0 {
		t.Errorf("pass rates: invoice %v, refund %v", cases["invoice"]["pass_rate"], cases["refund"]["pass_rate"])
	}
	if o := obj(t, rep["overall"], "overall"); o["pass_rate"] != 0.5 {
		t.Errorf("overall pass_rate %v, want 0.5", o["pass_rate"])
	}
	trial := obj(t, cases["invoice"]["trial_results"].([]any)[0], "invoice trial")
	mustContain(t, "failures", fmt.Sprint(trial["failures"]), "status completed, want failed")
	mustNotExist(t, db)

	// The table names the failure.
	r = cli(t, "evaluate", suite, "--db", db).mustExit(t, 1)
	mustContain(t, "stdout", r.stdout, "FAILED", "invoice trial 1", "status completed, want failed")

	// A lower threshold, from the flag or from the suite, passes.
	cli(t, "evaluate", suite, "--min-pass-rate", "0.5", "--db", db).mustExit(t, 0)
	lenient := writeFile(t, "lenient.json", `{"min_pass_rate": 0.5, "cases": [`+
		exampleCase(t, "invoice", `{"status": "failed"}`)+`, `+
		exampleCase(t, "refund", `{"status": "needs_approval"}`)+`]}`)
	cli(t, "evaluate", lenient, "--db", db).mustExit(t, 0)
	// The flag overrides the suite.
	cli(t, "evaluate", lenient, "--min-pass-rate", "0.9", "--db", db).mustExit(t, 1)
	mustNotExist(t, db)
}

func TestEvaluateTrials(t *testing.T) {
	t.Parallel()
	r := cli(t, "evaluate", exampleSuite, "--trials", "3", "--concurrency", "2", "--json").mustExit(t, 0)
	rep := decodeOne(t, r.stdout)
	for name, c := range evalCases(t, rep) {
		if n := num(t, c["trials"], name+".trials"); n != 3 {
			t.Errorf("%s: trials %d, want 3", name, n)
		}
		if n := num(t, c["passed"], name+".passed"); n != 3 {
			t.Errorf("%s: passed %d, want 3", name, n)
		}
		list := c["trial_results"].([]any)
		if len(list) != 3 {
			t.Fatalf("%s: %d trial results, want 3", name, len(list))
		}
		ids := map[any]bool{}
		for _, tr := range list {
			ids[obj(t, tr, "trial")["run_id"]] = true
		}
		if len(ids) != 3 {
			t.Errorf("%s: run IDs %v, want 3 distinct", name, ids)
		}
	}
	o := obj(t, rep["overall"], "overall")
	if num(t, o["trials"], "overall.trials") != 9 || num(t, o["refused_attempts"], "overall.refused_attempts") != 3 {
		t.Errorf("overall %v", o)
	}
	if got := strings.Count(r.stderr, "trial "); got != 9 {
		t.Errorf("%d progress lines, want 9:\n%s", got, r.stderr)
	}
}

func TestEvaluateUsageErrors(t *testing.T) {
	t.Parallel()
	unknown := writeFile(t, "unknown.json", `{"cases": [`+exampleCase(t, "invoice", `{"status": "completed", "workspace": {"a": 1}}`)+`]}`)
	missing := writeFile(t, "missing.json", `{"cases": [{"name": "gone", "task": "nowhere/task.json"}]}`)
	badModel := writeFile(t, "badmodel.json", `{"cases": [{"name": "m", "task": "`+absExample(t, "invoice", "task.json")+`", "model": "openai:x"}]}`)
	badStatus := writeFile(t, "badstatus.json", `{"cases": [`+exampleCase(t, "invoice", `{"status": "done"}`)+`]}`)
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"unknown field", []string{unknown}, []string{unknown, `unknown field "workspace"`}},
		{"missing task file", []string{missing}, []string{missing, "cases[0].task", `"gone"`, filepath.Join("nowhere", "task.json")}},
		{"bad model", []string{badModel}, []string{badModel, "cases[0].model", "script:FILE"}},
		{"bad status", []string{badStatus}, []string{badStatus, "cases[0].expect.status", `"done"`}},
		{"no suite file", []string{filepath.Join(t.TempDir(), "none.json")}, []string{"read suite file", "none.json"}},
		{"zero trials", []string{exampleSuite, "--trials", "0"}, []string{"--trials"}},
		{"zero concurrency", []string{exampleSuite, "--concurrency", "0"}, []string{"--concurrency"}},
		{"bad threshold", []string{exampleSuite, "--min-pass-rate", "1.5"}, []string{"--min-pass-rate"}},
		{"server", []string{exampleSuite, "--server", "127.0.0.1:1"}, []string{"--server"}},
		{"no suite", nil, []string{"arg"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := newDB(t)
			r := cli(t, append(append([]string{"evaluate"}, tc.args...), "--db", db)...).mustExit(t, 2)
			mustContain(t, "stderr", r.stderr, tc.want...)
			if r.stdout != "" {
				t.Errorf("stdout %q, want nothing", r.stdout)
			}
			mustNotExist(t, db)
		})
	}
}
