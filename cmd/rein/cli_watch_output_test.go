package main

import (
	"context"
	"strings"
	"testing"

	"github.com/reinhq/rein/client"
	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// writingRun starts, on the server at addr, a run whose one model call
// writes three lines over about a second, then answers.
func writingRun(t *testing.T, c *client.Client, id string) string {
	t.Helper()
	final := &reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: "done"}}}
	reply := &reinv1.ScriptedReply{Reply: &reinv1.ScriptedReply_Decision{Decision: final}, Chunks: []*reinv1.ScriptedChunk{
		{Text: "Checking the ledger\n", DelayMs: 300}, {Text: "the invoice is \x1b[31mpaid", DelayMs: 300}, {Text: "\nso: done", DelayMs: 300},
	}}
	resp, err := c.Runs.StartRun(context.Background(), &reinv1.StartRunRequest{RequestId: id, Contract: &reinv1.TaskContract{
		Goal: "answer", Model: &reinv1.ModelSpec{Provider: "script", Script: []*reinv1.ScriptedReply{reply}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetRun().GetRunId()
}

// TestWatchShowsModelOutput: rein watch against a server shows the text of
// the call in flight under its model_requested line, each line after "┊",
// with terminal escapes made harmless, before model_returned; --json
// leaves it out unless --model-output asks, and --model-output=false
// leaves it out of the lines.
func TestWatchShowsModelOutput(t *testing.T) {
	addr := serveInProcess(t, newDB(t))
	c, err := client.Dial(addr, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	out := cli(t, "watch", writingRun(t, c, "lines"), "--server", addr).mustExit(t, exitOK).stdout
	want := outputPrefix + "Checking the ledger\n" + outputPrefix + "the invoice is \uFFFD[31mpaid\n" + outputPrefix + "so: done\n"
	requested, text, returned := strings.Index(out, "model_requested"), strings.Index(out, outputPrefix), strings.Index(out, "model_returned")
	if !strings.Contains(out, want) || !(requested < text && text < returned) {
		t.Fatalf("rein watch printed:\n%s\nwant the call's text between model_requested and model_returned:\n%s", out, want)
	}
	if strings.Contains(out, "\x1b") {
		t.Fatal("a terminal escape in the model's text was printed as it is")
	}

	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"--json"}, false},
		{[]string{"--json", "--model-output"}, true},
		{[]string{"--model-output=false"}, false},
	} {
		out := cli(t, append([]string{"watch", writingRun(t, c, strings.Join(tc.args, " ")), "--server", addr}, tc.args...)...).mustExit(t, exitOK).stdout
		got := strings.Contains(out, "model_output") || strings.Contains(out, outputPrefix)
		if got != tc.want {
			t.Fatalf("rein watch %v printed the model's output: %v, want %v:\n%s", tc.args, got, tc.want, out)
		}
		if tc.want {
			var text string
			for _, line := range decodeLines(t, out) {
				if line["type"] == "model_output" {
					if _, ok := line["sequence"]; ok {
						t.Fatalf("a model_output line has a sequence: %v", line)
					}
					s, _ := line["text"].(string)
					text += s
				}
			}
			if !strings.HasSuffix(text, "so: done") {
				t.Fatalf("the model_output lines' text is %q", text)
			}
		}
	}
}
