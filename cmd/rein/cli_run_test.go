package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// lookupTask grants one read tool with a fixture behind it; the scripts of
// the tests below drive it to each status.
const lookupTask = `{
  "goal": "Say whether invoice INV-42 is paid.",
  "tools": [{"name": "invoices.get", "tier": "TOOL_TIER_READ"}],
  "budget": {"max_steps": 2, "timeout": "120s"}
}`

const lookupFixtures = `{"invoices.get": [{"output": {"invoice_id": "INV-42", "status": "open"}}]}`

const readReply = `{"decision": {"tool_call": {"tool": "invoices.get", "arguments": {"invoice_id": "INV-42"}}}, "usage": {"input_tokens": 10, "output_tokens": 5}}`

// lookupRun is the argument list that runs lookupTask with script on db.
func lookupRun(t *testing.T, db string, script ...string) []string {
	t.Helper()
	return []string{"run", writeFile(t, "task.json", lookupTask),
		"--model", "script:" + writeFile(t, "model.jsonl", strings.Join(script, "\n")+"\n"),
		"--tools", "fixture:" + writeFile(t, "tools.json", lookupFixtures),
		"--db", db}
}

func TestRunInvoiceCompletes(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	r := cli(t, exampleRun("invoice", db)...).mustExit(t, 0)

	s := decodeOne(t, r.stdout)
	runID, _ := s["run_id"].(string)
	if !strings.HasPrefix(runID, "run_") {
		t.Errorf("run_id = %#v, want a run ID", s["run_id"])
	}
	if s["status"] != "completed" {
		t.Errorf("status = %#v, want completed", s["status"])
	}
	if got := num(t, s["steps"], "steps"); got != 4 {
		t.Errorf("steps = %d, want 4 (one per script line)", got)
	}
	// The script's usage: input 310+380+420+530, output 22+12+20+41.
	if got := num(t, s["tokens"], "tokens"); got != 1640+95 {
		t.Errorf("tokens = %d, want %d", got, 1640+95)
	}
	if got := obj(t, s["result"], "result")["text"]; got != "INV-42 (1,200.00 EUR) is not paid yet; it is due on 2026-12-15." {
		t.Errorf("result.text = %#v", got)
	}
	if p, ok := s["pending"]; !ok || p != nil {
		t.Errorf("pending = %#v (present %v), want null", p, ok)
	}

	// One progress line on stderr per stored event, in order.
	evs := events(t, db, runID)
	if got := num(t, s["version"], "version"); got != len(evs) {
		t.Errorf("version = %d, but the run has %d events", got, len(evs))
	}
	var lines []string
	for _, line := range strings.Split(r.stderr, "\n") {
		if progressLine.MatchString(line) {
			lines = append(lines, line)
		}
	}
	if len(lines) != len(evs) {
		t.Fatalf("%d progress lines on stderr, %d events stored:\n%s", len(lines), len(evs), r.stderr)
	}
	for i, line := range lines {
		m := progressLine.FindStringSubmatch(line)
		if m[1] != strconv.Itoa(num(t, evs[i]["sequence"], "sequence")) || m[2] != evs[i]["type"] {
			t.Errorf("progress line %d %q, want sequence %v type %v", i+1, line, evs[i]["sequence"], evs[i]["type"])
		}
	}
	for _, typ := range []string{"run_started", "tool_refused", "decision_rejected", "tool_returned", "status_changed"} {
		if !strings.Contains(r.stderr, typ) {
			t.Errorf("stderr has no %s line:\n%s", typ, r.stderr)
		}
	}
}

// The failure twin of TestRunInvoiceCompletes: the same example, refused
// before it starts, leaves no store and prints no summary.
func TestRunInvoiceRefused(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	missing := filepath.Join(t.TempDir(), "nope.jsonl")
	args := exampleRun("invoice", db)
	args[3] = "script:" + missing
	r := cli(t, args...).mustExit(t, 2)
	mustContain(t, "stderr", r.stderr, missing)
	if r.stdout != "" {
		t.Errorf("stdout %q, want nothing", r.stdout)
	}
	mustNotExist(t, db)
}

func TestRunRefundPausesForApproval(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	r := cli(t, exampleRun("refund", db)...).mustExit(t, 10)
	s := decodeOne(t, r.stdout)
	if s["status"] != "needs_approval" {
		t.Errorf("status = %#v, want needs_approval", s["status"])
	}
	if s["result"] != nil {
		t.Errorf("result = %#v, want null", s["result"])
	}
	p := obj(t, obj(t, s["pending"], "pending")["proposal"], "pending.proposal")
	for _, k := range []string{"proposal_id", "hash"} {
		if v, _ := p[k].(string); v == "" {
			t.Errorf("pending.proposal.%s = %#v, want a string", k, p[k])
		}
	}
	if p["tool"] != "refunds.create" {
		t.Errorf("pending.proposal.tool = %#v, want refunds.create", p["tool"])
	}
	mustContain(t, "stderr", r.stderr, "approval_requested", "needs_approval")

	// Nothing was written: the log asks for approval and stops there.
	evs := events(t, db, s["run_id"].(string))
	for _, ev := range evs {
		if typ := ev["type"]; typ == "write_dispatched" || typ == "write_committed" {
			t.Errorf("event %v is %s before any approval", ev["sequence"], typ)
		}
	}
	last := obj(t, evs[len(evs)-1]["status_changed"], "last event's status_changed")
	if last["to"] != "needs_approval" {
		t.Errorf("last status_changed.to = %#v, want needs_approval", last["to"])
	}
}

func TestRunExitCodeByStatus(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		script []string
		exit   int
		status string
		check  func(t *testing.T, s map[string]any)
	}{
		{
			name:   "completed",
			script: []string{readReply, `{"decision": {"final_answer": {"text": "INV-42 is open."}}}`},
			exit:   0, status: "completed",
			check: func(t *testing.T, s map[string]any) {
				if got := obj(t, s["result"], "result")["text"]; got != "INV-42 is open." {
					t.Errorf("result.text = %#v", got)
				}
			},
		},
		{
			name:   "needs_input",
			script: []string{`{"decision": {"ask_human": {"question": "Which customer?"}}}`},
			exit:   10, status: "needs_input",
			check: func(t *testing.T, s map[string]any) {
				q := obj(t, obj(t, s["pending"], "pending")["question"], "pending.question")
				if q["text"] != "Which customer?" {
					t.Errorf("pending.question.text = %#v", q["text"])
				}
			},
		},
		{
			name:   "budget_exhausted",
			script: []string{readReply, readReply, readReply},
			exit:   11, status: "budget_exhausted",
			check: func(t *testing.T, s map[string]any) {
				if got := num(t, s["steps"], "steps"); got != 2 {
					t.Errorf("steps = %d, want max_steps 2", got)
				}
				if s["status_reason"] != "max_steps" {
					t.Errorf("status_reason = %#v, want max_steps", s["status_reason"])
				}
			},
		},
		{
			name:   "failed",
			script: []string{`{"error": "quota exceeded"}`},
			exit:   12, status: "failed",
			check: func(t *testing.T, s map[string]any) {
				if e, _ := s["last_error"].(string); !strings.Contains(e, "quota exceeded") {
					t.Errorf("last_error = %#v, want the model's error", s["last_error"])
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := newDB(t)
			r := cli(t, lookupRun(t, db, tc.script...)...).mustExit(t, tc.exit)
			s := decodeOne(t, r.stdout)
			if s["status"] != tc.status {
				t.Errorf("status = %#v, want %s", s["status"], tc.status)
			}
			tc.check(t, s)
			evs := events(t, db, s["run_id"].(string))
			last := evs[len(evs)-1]
			sc := obj(t, last["status_changed"], "last event's status_changed")
			if sc["from"] != "running" || sc["to"] != tc.status {
				t.Errorf("last event %v → %v, want running → %s", sc["from"], sc["to"], tc.status)
			}
		})
	}
}

func TestRunCtrlCCancels(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	args := lookupRun(t, db, `{"decision": {"final_answer": {"text": "too late"}}, "delay_ms": 60000}`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout bytes.Buffer // read only after Run returned
	stderr := newWatchWriter("model_requested")
	done := make(chan int, 1)
	go func() { done <- Run(ctx, args, strings.NewReader(""), &stdout, stderr) }()

	select {
	case <-stderr.seen:
	case code := <-done:
		t.Fatalf("run exited %d before its model call:\n%s", code, stderr)
	case <-time.After(30 * time.Second):
		t.Fatalf("no model_requested on stderr after 30s:\n%s", stderr)
	}
	cancel() // Ctrl+C while the model call is in flight
	var code int
	select {
	case code = <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("run did not return 30s after Ctrl+C:\n%s", stderr)
	}
	if code != 130 {
		t.Fatalf("exit %d, want 130\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr)
	}
	s := decodeOne(t, stdout.String())
	if s["status"] != "cancelled" {
		t.Errorf("status = %#v, want cancelled", s["status"])
	}
	mustContain(t, "stderr", stderr.String(), "cancelled")

	// cancelled was recorded before Run returned; the call in flight stays
	// visible as a model_requested with no reply.
	runID := s["run_id"].(string)
	evs := events(t, db, runID)
	if len(evs) < 2 {
		t.Fatalf("%d events, want at least model_requested and status_changed", len(evs))
	}
	if evs[len(evs)-2]["type"] != "model_requested" {
		t.Errorf("event before the last is %v, want model_requested (the call in flight)", evs[len(evs)-2]["type"])
	}
	last := evs[len(evs)-1]
	sc := obj(t, last["status_changed"], "last event's status_changed")
	if last["type"] != "status_changed" || sc["from"] != "running" || sc["to"] != "cancelled" {
		t.Errorf("last event %v %v → %v, want status_changed running → cancelled", last["type"], sc["from"], sc["to"])
	}
	if got := num(t, s["version"], "version"); got != len(evs) {
		t.Errorf("summary version %d, but %d events are stored", got, len(evs))
	}
	ins := decodeOne(t, cli(t, "inspect", runID, "--json", "--db", db).mustExit(t, 0).stdout)
	if ins["status"] != "cancelled" {
		t.Errorf("inspect status = %#v, want cancelled", ins["status"])
	}
}

func TestRunMalformedInputWritesNothing(t *testing.T) {
	t.Parallel()
	const model = `{"decision": {"final_answer": {"text": "done"}}}` + "\n"
	for _, tc := range []struct {
		name    string
		task    string // task file content
		model   string // script content; "" for the default
		tools   string // fixture content; "" for none
		flag    string // --model value; "" for script:MODEL
		wantErr []string
		names   string // which file the message must name: task, model or tools
	}{
		{name: "bad JSON", task: `{"goal": "x",`, names: "task"},
		{name: "unknown field", task: `{"golas": "x"}`, wantErr: []string{`"golas"`}, names: "task"},
		{name: "goal as a number", task: `{"goal": 5}`, wantErr: []string{"goal"}, names: "task"},
		{name: "tier missing", task: `{"goal": "x", "tools": [{"name": "invoices.get"}]}`, wantErr: []string{"tools[0].tier"}, names: "task"},
		{name: "goal missing", task: `{"inputs": {"a": "b"}}`, wantErr: []string{"goal"}, names: "task"},
		{name: "model missing", task: `{"goal": "x"}`, flag: "-", wantErr: []string{"model"}, names: "task"},
		{name: "model without script:", task: `{"goal": "x"}`, flag: "MODEL", wantErr: []string{"--model", "script:FILE"}, names: "model"},
		{name: "model of another kind", task: `{"goal": "x"}`, flag: "gemini:MODEL", wantErr: []string{"--model", "script:FILE", "openai:NAME", "anthropic:NAME"}},
		{name: "provider without a model name", task: `{"goal": "x"}`, flag: "openai:", wantErr: []string{"--model", "openai:gpt-4o-mini"}},
		{name: "base url for a script", task: `{"goal": "x"}`, flag: "base-url", wantErr: []string{"--base-url", "scripted"}},
		{name: "script line with an unknown field", task: `{"goal": "x"}`,
			model:   model + `{"decision": {"final_answer": {"text": "done"}}, "usgae": {}}` + "\n",
			wantErr: []string{":2:", `"usgae"`}, names: "model"},
		{name: "fixture with an unknown key", task: `{"goal": "x"}`,
			tools:   `{"invoices.get": [{"outptu": {}}]}`,
			wantErr: []string{"invoices.get[0]", `"outptu"`}, names: "tools"},
		{name: "tools without fixture:", task: `{"goal": "x"}`, tools: `{}`, flag: "tools", wantErr: []string{"--tools", "fixture:FILE"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := newDB(t)
			files := map[string]string{"task": writeFile(t, "task.json", tc.task)}
			script := tc.model
			if script == "" {
				script = model
			}
			files["model"] = writeFile(t, "model.jsonl", script)
			args := []string{"run", files["task"], "--db", db}
			switch tc.flag {
			case "":
				args = append(args, "--model", "script:"+files["model"])
			case "-":
			case "MODEL":
				args = append(args, "--model", files["model"])
			case "base-url":
				args = append(args, "--model", "script:"+files["model"], "--base-url", "http://127.0.0.1:1/v1")
			case "tools":
				args = append(args, "--model", "script:"+files["model"])
			default:
				args = append(args, "--model", strings.Replace(tc.flag, "MODEL", files["model"], 1))
			}
			if tc.tools != "" {
				files["tools"] = writeFile(t, "tools.json", tc.tools)
				if tc.flag == "tools" {
					args = append(args, "--tools", files["tools"])
				} else {
					args = append(args, "--tools", "fixture:"+files["tools"])
				}
			}
			r := cli(t, args...).mustExit(t, 2)
			want := tc.wantErr
			if tc.names != "" {
				want = append(want, files[tc.names])
			}
			mustContain(t, "stderr", r.stderr, want...)
			if r.stdout != "" {
				t.Errorf("stdout %q, want nothing", r.stdout)
			}
			mustNotExist(t, db)
		})
	}
}

func TestRunIdempotentRequestID(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	first := decodeOne(t, cli(t, exampleRun("invoice", db, "--request-id", "req-1")...).mustExit(t, 0).stdout)
	again := decodeOne(t, cli(t, exampleRun("invoice", db, "--request-id", "req-1")...).mustExit(t, 0).stdout)
	if first["run_id"] != again["run_id"] {
		t.Errorf("the same --request-id started runs %v and %v", first["run_id"], again["run_id"])
	}
	if first["version"] != again["version"] {
		t.Errorf("version %v, then %v: the second call changed the run", first["version"], again["version"])
	}
	runs := decodeListJSON(t, cli(t, "list", "--json", "--db", db).mustExit(t, 0).stdout)
	if len(runs) != 1 {
		t.Errorf("list has %d runs, want 1", len(runs))
	}
}

// The failure twin of TestRunIdempotentRequestID: different keys are
// different runs.
func TestRunDistinctRequestIDs(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	a := decodeOne(t, cli(t, exampleRun("invoice", db, "--request-id", "req-1")...).mustExit(t, 0).stdout)
	b := decodeOne(t, cli(t, exampleRun("invoice", db, "--request-id", "req-2")...).mustExit(t, 0).stdout)
	c := decodeOne(t, cli(t, exampleRun("invoice", db)...).mustExit(t, 0).stdout) // a random key
	if a["run_id"] == b["run_id"] || b["run_id"] == c["run_id"] || a["run_id"] == c["run_id"] {
		t.Errorf("different --request-id values shared a run: %v, %v, %v", a["run_id"], b["run_id"], c["run_id"])
	}
	runs := decodeListJSON(t, cli(t, "list", "--json", "--db", db).mustExit(t, 0).stdout)
	if len(runs) != 3 {
		t.Errorf("list has %d runs, want 3", len(runs))
	}
}
