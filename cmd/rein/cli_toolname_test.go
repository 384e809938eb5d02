package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/reinhq/rein/client"
	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/tools"
)

// TestToolNameRuleIsOne: one rule, the API's (ToolGrant.name's
// protovalidate pattern in contract.proto), decides a tool name at
// StartRun, in a task file, and for the NAME of --tool-server and --mcp,
// whose tools are named NAME.TOOL. For each NAME, the tool NAME.x is
// refused by StartRun and by the task file exactly when the flags refuse
// NAME, and every refusal carries the rule's message; an accepted name
// passes all four.
func TestToolNameRuleIsOne(t *testing.T) {
	// The server provides the accepted tools: a grant it has none for is
	// refused whatever its name.
	provided := map[string]any{}
	for _, name := range []string{"billing", "my_files-2", strings.Repeat("n", 62)} {
		provided[name+".x"] = []any{map[string]any{"output": "found"}}
	}
	raw, err := json.Marshal(provided)
	if err != nil {
		t.Fatal(err)
	}
	fixtures := "fixture:" + writeFile(t, "tools.json", string(raw))
	addr := serveInProcess(t, newDB(t), "--tools", fixtures)
	c, err := client.Dial(addr, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	model := writeFile(t, "model.jsonl", `{"decision": {"final_answer": {"text": "done"}}}`+"\n")
	for i, tc := range []struct {
		name string
		ok   bool
	}{
		{"billing", true},
		{"my_files-2", true},
		{strings.Repeat("n", 62), true},
		{"bil ling", false},
		{"fs/x", false},
		{"ünï", false},
		{strings.Repeat("n", 63), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tool := tc.name + ".x"
			rule := tools.CheckName(tool)
			if (rule == nil) != tc.ok {
				t.Fatalf("the rule says %v of %q, want accepted %v", rule, tool, tc.ok)
			}

			_, err := c.Runs.StartRun(context.Background(), &reinv1.StartRunRequest{RequestId: fmt.Sprintf("r%d", i), Contract: &reinv1.TaskContract{
				Goal:  "test",
				Tools: []*reinv1.ToolGrant{{Name: tool, Tier: reinv1.ToolTier_TOOL_TIER_READ}},
				Model: &reinv1.ModelSpec{Provider: "script", Script: []*reinv1.ScriptedReply{{Reply: &reinv1.ScriptedReply_Decision{Decision: &reinv1.Decision{
					Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: "done"}}}}}}},
			}})
			if tc.ok {
				if err != nil {
					t.Errorf("StartRun granting %q: %v, want it started", tool, err)
				}
			} else if got := fieldViolation(err, "contract.tools[0].name"); got != rule.Error() {
				t.Errorf("StartRun granting %q: %v (contract.tools[0].name: %q), want InvalidArgument with %q", tool, err, got, rule)
			}

			grant, err := json.Marshal(tool)
			if err != nil {
				t.Fatal(err)
			}
			task := writeFile(t, "task.json", `{"goal": "test", "tools": [{"name": `+string(grant)+`, "tier": "TOOL_TIER_READ"}]}`)
			db := newDB(t)
			r := cli(t, "run", task, "--model", "script:"+model, "--db", db, "--tools", fixtures)
			if tc.ok {
				r.mustExit(t, exitOK)
			} else {
				r.mustExit(t, exitUsage)
				mustContain(t, "stderr", r.stderr, "tools[0].name", rule.Error())
				mustNotExist(t, db)
			}

			for _, f := range []struct {
				flag, target string
				// passed is the exit once NAME is accepted: the run
				// completes (a tool server is dialled lazily and the
				// invoice needs none), or no MCP server answers.
				passed int
			}{
				{"--tool-server", "127.0.0.1:1", exitOK},
				{"--mcp", "http://127.0.0.1:1/mcp", exitUnavailable},
			} {
				flag := f.flag
				db := newDB(t)
				r := cli(t, "run", example("invoice", "task.json"), "--model", "script:"+example("invoice", "model.jsonl"),
					"--tools", "fixture:"+example("invoice", "tools.json"), "--db", db, flag, tc.name+"="+f.target)
				if tc.ok {
					if r.code != f.passed || strings.Contains(r.stderr, "NAME must be") {
						t.Errorf("%s %s: exit %d, want %d past the name\n%s", flag, tc.name, r.code, f.passed, r.stderr)
					}
					continue
				}
				r.mustExit(t, exitUsage)
				mustContain(t, "stderr", r.stderr, flag, "NAME must be", rule.Error())
				mustNotExist(t, db)
			}
		})
	}
}

// fieldViolation is the description a BadRequest detail of err gives
// field; "" when it has none.
func fieldViolation(err error, field string) string {
	st, _ := status.FromError(err)
	if st.Code() != codes.InvalidArgument {
		return ""
	}
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				if v.GetField() == field {
					return v.GetDescription()
				}
			}
		}
	}
	return ""
}
