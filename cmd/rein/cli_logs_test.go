package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// serveLogging runs rein serve in-process with args and returns its
// address and its stderr (the log), which keeps filling until the test
// ends.
func serveLogging(t *testing.T, args ...string) (addr string, log *watchWriter) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	log = newWatchWriter("rein serving")
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, append([]string{"serve", "--listen", "127.0.0.1:0", "--db", newDB(t)}, args...), strings.NewReader(""), &bytes.Buffer{}, log)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	select {
	case <-log.seen:
	case code := <-done:
		t.Fatalf("serve exited %d:\n%s", code, log)
	case <-time.After(30 * time.Second):
		t.Fatalf("serve did not start:\n%s", log)
	}
	for _, line := range logLines(t, log.String()) {
		if line["msg"] == "rein serving" {
			return line["addr"].(string), log
		}
	}
	t.Fatalf("no address in serve's log:\n%s", log)
	return "", nil
}

// logLines decodes a JSON log, one object a line; a line that is not one
// fails the test.
func logLines(t *testing.T, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line %q is not JSON: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

// TestServeLogs: with --log-format json, every line of the server's log
// is a JSON object; a run's lifecycle lines (started, paused, resumed,
// ended) name its run ID, tenant and principal; a call refused for its
// role names the principal it resolved; and no secret (a bearer token, an
// API key from --secrets) appears anywhere, even at --log-level debug.
func TestServeLogs(t *testing.T) {
	const opToken, viewToken, apiKey = "op-token-5f2c9a", "view-token-81d3e0", "sk-secret-7e1b44"
	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	tokens := writeFile(t, "tokens.json", fmt.Sprintf(`{"principals": [
	  {"id": "alice", "tenant": "acme", "roles": ["operator", "approver"], "token_sha256": %q},
	  {"id": "vera", "tenant": "acme", "roles": ["viewer"], "token_sha256": %q}]}`, sum(opToken), sum(viewToken)))
	secrets := writeFile(t, "secrets.env", "OPENAI_API_KEY="+apiKey+"\n")
	if err := os.Chmod(secrets, 0o600); err != nil {
		t.Fatal(err)
	}
	addr, log := serveLogging(t, "--log-format", "json", "--log-level", "debug", "--tokens", tokens, "--secrets", secrets,
		"--tools", "fixture:"+example("refund", "tools.json"))

	run := decodeOne(t, cli(t, "run", example("refund", "task.json"), "--model", "script:"+example("refund", "model.jsonl"),
		"--server", addr, "--token", opToken, "--json").mustExit(t, exitPaused).stdout)
	runID := run["run_id"].(string)
	proposal := obj(t, obj(t, run["pending"], "pending")["proposal"], "pending.proposal")["proposal_id"].(string)
	r := cli(t, "approve", runID, proposal, "--server", addr, "--token", viewToken).mustExit(t, exitDenied)
	mustContain(t, "approve by a viewer", r.stderr, "vera")
	cli(t, "approve", runID, proposal, "--server", addr, "--token", opToken).mustExit(t, exitOK)

	log.waitFor(10*time.Second, func(s string) bool { return hasLine(logLines(t, s), "run ended", runID) })
	lines := logLines(t, log.String())
	for _, msg := range []string{"run started", "run paused", "run resumed", "run ended"} {
		if !hasLine(lines, msg, runID) {
			t.Errorf("no %q line for %s with its tenant and principal:\n%s", msg, runID, log)
		}
	}
	denied := false
	for _, l := range lines {
		if l["grpc.code"] == "PermissionDenied" && l["principal"] == "vera" {
			denied = true
		}
	}
	if !denied {
		t.Errorf("the refused approval's log line does not name the principal it resolved:\n%s", log)
	}
	for _, secret := range []string{opToken, viewToken, apiKey} {
		if strings.Contains(log.String(), secret) {
			t.Errorf("the log holds the secret %q", secret)
		}
	}
}

func hasLine(lines []map[string]any, msg, runID string) bool {
	for _, l := range lines {
		trace, _ := l["trace_id"].(string)
		if l["msg"] == msg && l["run_id"] == runID && l["tenant"] == "acme" && l["principal"] == "alice" && len(trace) == 32 {
			return true
		}
	}
	return false
}

// The twins: a log format or level rein does not know is a usage error,
// before anything opens.
func TestServeLogFlagsRefused(t *testing.T) {
	db := newDB(t)
	r := cli(t, "serve", "--db", db, "--log-format", "yaml").mustExit(t, exitUsage)
	mustContain(t, "--log-format yaml", r.stderr, "want text or json")
	r = cli(t, "serve", "--db", db, "--log-level", "loud").mustExit(t, exitUsage)
	mustContain(t, "--log-level loud", r.stderr, "want debug, info, warn or error")
	mustNotExist(t, db)
}
