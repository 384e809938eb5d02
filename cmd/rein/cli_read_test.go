package main

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// decodeListJSON decodes the output of `list --json`: one JSON array.
func decodeListJSON(t *testing.T, s string) []map[string]any {
	t.Helper()
	var runs []map[string]any
	if err := json.Unmarshal([]byte(s), &runs); err != nil {
		t.Fatalf("list --json is not a JSON array of objects: %v\n%s", err, s)
	}
	return runs
}

// startExample runs an example on db and returns its summary.
func startExample(t *testing.T, name, db string, exit int) map[string]any {
	t.Helper()
	return decodeOne(t, cli(t, exampleRun(name, db, "--json")...).mustExit(t, exit).stdout)
}

func TestInspectMatchesRunSummary(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		example string
		exit    int
	}{{"invoice", 0}, {"refund", 10}} {
		t.Run(tc.example, func(t *testing.T) {
			t.Parallel()
			db := newDB(t)
			s := startExample(t, tc.example, db, tc.exit)
			r := cli(t, "inspect", s["run_id"].(string), "--json", "--db", db).mustExit(t, 0)
			got := decodeOne(t, r.stdout)
			for _, k := range []string{"run_id", "status", "version", "steps"} {
				if _, ok := got[k]; !ok {
					t.Errorf("inspect --json has no top-level %s:\n%s", k, r.stdout)
				}
			}
			if st, _ := got["status"].(string); st != strings.ToLower(st) || st == "" {
				t.Errorf("status = %#v, want a lower-case name", got["status"])
			}
			// The fold of the stored events says what the live run said;
			// inspect adds a paused run's card (TestPendingCardOfAProposal).
			for _, k := range cardFields {
				delete(got, k)
			}
			for _, k := range inspectFields {
				delete(got, k)
			}
			if !reflect.DeepEqual(got, s) {
				for k := range mergeKeys(got, s) {
					if !reflect.DeepEqual(got[k], s[k]) {
						t.Errorf("%s: inspect %#v, run %#v", k, got[k], s[k])
					}
				}
			}
			// Without --json, a person's view of the same run.
			r = cli(t, "inspect", s["run_id"].(string), "--db", db).mustExit(t, 0)
			mustContain(t, "inspect", r.stdout, s["run_id"].(string), s["status"].(string))
		})
	}
}

func mergeKeys(a, b map[string]any) map[string]bool {
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	return keys
}

// The failure twins of the read commands: a missing run is exit 3, and a
// missing store is exit 3 without being made.
func TestReadMissing(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	startExample(t, "invoice", db, 0)
	for _, args := range [][]string{
		{"inspect", "run_01NOSUCHRUN0000000000000000"},
		{"inspect", "run_01NOSUCHRUN0000000000000000", "--json"},
		{"events", "run_01NOSUCHRUN0000000000000000"},
		{"events", "run_01NOSUCHRUN0000000000000000", "--json"},
	} {
		t.Run("run "+strings.Join(args, " "), func(t *testing.T) {
			r := cli(t, append(args, "--db", db)...).mustExit(t, 3)
			if r.stdout != "" {
				t.Errorf("stdout %q, want nothing", r.stdout)
			}
			mustContain(t, "stderr", r.stderr, "not found")
		})
		t.Run("store "+strings.Join(args, " "), func(t *testing.T) {
			missing := newDB(t)
			r := cli(t, append(args, "--db", missing)...).mustExit(t, 3)
			if r.stdout != "" {
				t.Errorf("stdout %q, want nothing", r.stdout)
			}
			mustContain(t, "stderr", r.stderr, missing)
			mustNotExist(t, missing)
		})
	}
	t.Run("list store", func(t *testing.T) {
		missing := newDB(t)
		r := cli(t, "list", "--json", "--db", missing).mustExit(t, 0)
		if runs := decodeListJSON(t, r.stdout); len(runs) != 0 {
			t.Errorf("list of a missing store has %d runs", len(runs))
		}
		mustNotExist(t, missing)
	})
}

func TestEventsNDJSON(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	s := startExample(t, "invoice", db, 0)
	runID := s["run_id"].(string)
	evs := events(t, db, runID)
	if len(evs) != num(t, s["version"], "version") {
		t.Fatalf("%d events, the run's version is %v", len(evs), s["version"])
	}
	for i, ev := range evs {
		if got := num(t, ev["sequence"], "sequence"); got != i+1 {
			t.Errorf("line %d: sequence %d, want %d", i+1, got, i+1)
		}
		if typ, _ := ev["type"].(string); typ == "" || ev[typ] == nil {
			t.Errorf("line %d: type %#v does not name a payload of the event: %v", i+1, ev["type"], ev)
		}
		if ev["run_id"] != runID {
			t.Errorf("line %d: run_id %v, want %s", i+1, ev["run_id"], runID)
		}
	}
	if evs[0]["type"] != "run_started" {
		t.Errorf("first event %v, want run_started", evs[0]["type"])
	}
	sc := obj(t, evs[len(evs)-1]["status_changed"], "last event's status_changed")
	if sc["from"] != "running" || sc["to"] != "completed" {
		t.Errorf("last status_changed %v → %v, want running → completed", sc["from"], sc["to"])
	}
	// No status anywhere in the output is an enum name.
	raw := cli(t, "events", runID, "--json", "--db", db).mustExit(t, 0).stdout
	if strings.Contains(raw, "RUN_STATUS_") {
		t.Errorf("events --json holds an upper-case status:\n%s", raw)
	}

	after := events(t, db, runID, "--after", "3")
	if len(after) != len(evs)-3 {
		t.Fatalf("--after 3: %d events, want %d", len(after), len(evs)-3)
	}
	for i, ev := range after {
		if got := num(t, ev["sequence"], "sequence"); got != i+4 {
			t.Errorf("--after 3, line %d: sequence %d, want %d", i+1, got, i+4)
		}
	}
	// The twin: nothing after the last event.
	if tail := events(t, db, runID, "--after", strings.TrimSpace(jsonText(t, s["version"]))); len(tail) != 0 {
		t.Errorf("--after the last sequence: %d events, want none", len(tail))
	}

	// Without --json: one line per event.
	text := cli(t, "events", runID, "--db", db).mustExit(t, 0).stdout
	if n := strings.Count(text, "\n"); n != len(evs) {
		t.Errorf("events without --json printed %d lines, want %d:\n%s", n, len(evs), text)
	}
}

func jsonText(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestListNewestFirstAndFiltered(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	invoice := startExample(t, "invoice", db, 0)
	refund := startExample(t, "refund", db, 10)

	ids := func(runs []map[string]any) []any {
		var out []any
		for _, r := range runs {
			out = append(out, r["run_id"])
		}
		return out
	}
	list := func(args ...string) []any {
		t.Helper()
		r := cli(t, append([]string{"list", "--json", "--db", db}, args...)...).mustExit(t, 0)
		return ids(decodeListJSON(t, r.stdout))
	}
	for _, tc := range []struct {
		args []string
		want []any
	}{
		{nil, []any{refund["run_id"], invoice["run_id"]}},
		{[]string{"--status", "completed"}, []any{invoice["run_id"]}},
		{[]string{"--status", "needs_approval"}, []any{refund["run_id"]}},
		{[]string{"--status", "completed,needs_approval"}, []any{refund["run_id"], invoice["run_id"]}},
		{[]string{"--status", "completed", "--status", "needs_approval"}, []any{refund["run_id"], invoice["run_id"]}},
		{[]string{"--status", "failed"}, nil},
		{[]string{"--limit", "1"}, []any{refund["run_id"]}},
	} {
		if got := list(tc.args...); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("list %v: %v, want %v", tc.args, got, tc.want)
		}
	}
	runs := decodeListJSON(t, cli(t, "list", "--json", "--db", db).mustExit(t, 0).stdout)
	for _, r := range runs {
		for _, k := range []string{"run_id", "status", "steps", "tokens", "version", "result", "pending"} {
			if _, ok := r[k]; !ok {
				t.Errorf("list entry %v has no %s", r["run_id"], k)
			}
		}
	}
	if runs[0]["status"] != "needs_approval" || runs[1]["status"] != "completed" {
		t.Errorf("statuses %v, %v; want needs_approval, completed", runs[0]["status"], runs[1]["status"])
	}

	// The twin: a status that is not one is a usage error.
	r := cli(t, "list", "--json", "--status", "bogus", "--db", db).mustExit(t, 2)
	mustContain(t, "stderr", r.stderr, `"bogus"`)
	if r.stdout != "" {
		t.Errorf("stdout %q, want nothing", r.stdout)
	}

	// Without --json: a header and one row per run.
	text := cli(t, "list", "--db", db).mustExit(t, 0).stdout
	mustContain(t, "list", text, "RUN_ID", invoice["run_id"].(string), refund["run_id"].(string))
}

// inspect shows the cache's tokens apart and the prompt prefix each call
// kept; the run's tokens count all four kinds. Its twin, a run whose
// provider reported no cache use, shows the plain line.
// inspectFields are the fields rein inspect adds to every run's summary:
// the digests of the tools and policy it holds (TestInspectShowsToolDigests).
var inspectFields = []string{"tool_digests", "policy_digest"}

// rein inspect shows the digests of the granted tools' definitions the run
// holds, who serves them, and the server's policy digest; the failure
// twin: an ask_human grant, which no tool serves, has none.
func TestInspectShowsToolDigests(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	script := `{"decision": {"tool_call": {"tool": "search", "arguments": {"q": "INV-1"}}}}
{"decision": {"final_answer": {"text": "Done."}}}
`
	task := `{"goal": "find the invoice", "tools": [{"name": "search", "tier": "TOOL_TIER_READ"}, {"name": "ask_boss", "tier": "TOOL_TIER_ASK_HUMAN"}]}`
	tools := `{"search": [{"output": "INV-1: 40.00 EUR"}]}`
	s := decodeOne(t, cli(t, "run", writeFile(t, "task.json", task), "--model", "script:"+writeFile(t, "model.jsonl", script),
		"--tools", "fixture:"+writeFile(t, "tools.json", tools), "--db", db, "--json").mustExit(t, 0).stdout)
	got := decodeOne(t, cli(t, "inspect", s["run_id"].(string), "--db", db, "--json").mustExit(t, 0).stdout)
	digests, _ := got["tool_digests"].([]any)
	if len(digests) != 1 {
		t.Fatalf("tool_digests = %v, want search's only", got["tool_digests"])
	}
	d, _ := digests[0].(map[string]any)
	if d["name"] != "search" || d["server"] != "fixture" || len(fmt.Sprint(d["digest"])) != 64 {
		t.Errorf("tool_digests[0] = %v, want search, served by fixture, a SHA-256", d)
	}
	if p, _ := got["policy_digest"].(string); len(p) != 64 {
		t.Errorf("policy_digest = %v, want a SHA-256", got["policy_digest"])
	}
	text := cli(t, "inspect", s["run_id"].(string), "--db", db).mustExit(t, 0).stdout
	mustContain(t, "inspect", text, "digest      policy "+fmt.Sprint(got["policy_digest"]), "tool        search "+fmt.Sprint(d["digest"])+" (served by fixture)")
	if strings.Contains(text, "ask_boss ") {
		t.Errorf("inspect shows a digest of the ask_human grant:\n%s", text)
	}
}

func TestInspectShowsCacheTokensAndPrefix(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	script := `{"decision": {"tool_call": {"tool": "search", "arguments": {"q": "INV-1"}}}, "usage": {"input_tokens": 10, "cache_write_input_tokens": 400, "output_tokens": 5}}
{"decision": {"final_answer": {"text": "Done."}}, "usage": {"input_tokens": 12, "cache_read_input_tokens": 400, "output_tokens": 5}}
`
	task := `{"goal": "find the invoice", "tools": [{"name": "search", "tier": "TOOL_TIER_READ"}]}`
	tools := `{"search": [{"output": "INV-1: 40.00 EUR"}]}`
	s := decodeOne(t, cli(t, "run", writeFile(t, "task.json", task), "--model", "script:"+writeFile(t, "model.jsonl", script),
		"--tools", "fixture:"+writeFile(t, "tools.json", tools), "--db", db, "--json").mustExit(t, 0).stdout)
	if s["tokens"] != float64(10+400+5+12+400+5) {
		t.Fatalf("tokens = %v, want all four kinds counted (832)", s["tokens"])
	}
	u := s["usage"].(map[string]any)
	if u["cache_write_input_tokens"] != float64(400) || u["cache_read_input_tokens"] != float64(400) || u["input_tokens"] != float64(22) {
		t.Fatalf("usage = %v", u)
	}
	r := cli(t, "inspect", s["run_id"].(string), "--db", db).mustExit(t, 0)
	mustContain(t, "inspect", r.stdout, "input 22, cache write 400, cache read 400, output 10", "of the previous call's input", "no caching asked")

	plain := startExample(t, "invoice", db, 0)
	r = cli(t, "inspect", plain["run_id"].(string), "--db", db).mustExit(t, 0)
	if strings.Contains(r.stdout, "cache write") {
		t.Fatalf("a run with no cache use shows cache tokens:\n%s", r.stdout)
	}
}
