package main

import "testing"

// TestA2AAgentUnreachableRefusedAtStart: an --a2a agent that is down is
// refused before any run starts; a source with an unknown parameter, or a
// token variable that is unset, is a usage error.
func TestA2AAgentUnreachableRefusedAtStart(t *testing.T) {
	task := writeFile(t, "task.json", `{"goal": "x"}`)
	script := "script:" + writeFile(t, "m.jsonl", `{"decision": {"final_answer": {"text": "x"}}}`+"\n")
	r := cli(t, "run", task, "--model", script, "--a2a", "billing=http://127.0.0.1:1", "--db", newDB(t)).mustExit(t, exitUnavailable)
	mustContain(t, "stderr", r.stderr, "--a2a billing")
	r = cli(t, "run", task, "--model", script, "--a2a", "billing=http://127.0.0.1:1?token=secret", "--db", newDB(t)).mustExit(t, exitUsage)
	mustContain(t, "stderr", r.stderr, "token_env")
	t.Setenv("REIN_TEST_A2A_UNSET", "")
	r = cli(t, "run", task, "--model", script, "--a2a", "billing=http://127.0.0.1:1?token_env=REIN_TEST_A2A_UNSET", "--db", newDB(t)).mustExit(t, exitUsage)
	mustContain(t, "stderr", r.stderr, "REIN_TEST_A2A_UNSET")
}
