package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// approversServer serves the refund example's tools to three people of one
// tenant: carol starts runs (and is an approver too, whom the starter's
// rule refuses), alice and bob approve. It returns the server's
// address and each person's token.
func approversServer(t *testing.T) (string, map[string]string) {
	t.Helper()
	tokens := map[string]string{}
	var principals []string
	for _, p := range []struct{ id, roles string }{{"carol", `"operator", "approver"`}, {"alice", `"approver"`}, {"bob", `"approver"`}} {
		tokens[p.id] = "token-of-" + p.id
		sum := sha256.Sum256([]byte(tokens[p.id]))
		principals = append(principals, fmt.Sprintf(`{"id": %q, "tenant": "billing", "roles": [%s], "token_sha256": %q}`, p.id, p.roles, hex.EncodeToString(sum[:])))
	}
	file := writeFile(t, "tokens.json", `{"principals": [`+strings.Join(principals, ", ")+`]}`)
	addr := serveInProcess(t, newDB(t), "--tokens", file, "--tools", "fixture:"+example("refund", "tools.json"))
	return addr, tokens
}

// refundNeeding is the refund example's task with its write granted to need
// n approvals, written to a file. Its deadline is short: a command that
// follows the run until then exits 11, not 10.
func refundNeeding(t *testing.T, n int) string {
	t.Helper()
	b, err := os.ReadFile(example("refund", "task.json"))
	if err != nil {
		t.Fatal(err)
	}
	var task map[string]any
	if err := json.Unmarshal(b, &task); err != nil {
		t.Fatal(err)
	}
	for _, g := range task["tools"].([]any) {
		if g := g.(map[string]any); g["name"] == "refunds.create" {
			g["approvals"] = n
		}
	}
	task["budget"].(map[string]any)["timeout"] = "60s"
	b, err = json.Marshal(task)
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, filepath.Base(t.Name())+".json", string(b))
}

// startRefund starts the task as carol and returns the run ID and the ID of
// the proposal it pauses on.
func startRefund(t *testing.T, addr string, tokens map[string]string, task string) (string, string) {
	t.Helper()
	out := decodeOne(t, cli(t, "run", task, "--model", "script:"+example("refund", "model.jsonl"),
		"--server", addr, "--token", tokens["carol"], "--json").mustExit(t, exitPaused).stdout)
	prop := obj(t, obj(t, out["pending"], "pending")["proposal"], "pending.proposal")
	return out["run_id"].(string), prop["proposal_id"].(string)
}

// TestFirstOfTwoApproversPauses: the first of two approvals leaves the run
// waiting for another person, so rein approve exits 10 at once and says
// who may give the other; the second carries the run to its end.
func TestFirstOfTwoApproversPauses(t *testing.T) {
	addr, tokens := approversServer(t)
	runID, propID := startRefund(t, addr, tokens, refundNeeding(t, 2))
	approve := func(who string, extra ...string) result {
		return cli(t, append([]string{"approve", runID, propID, "--server", addr, "--token", tokens[who], "--reason", "checked by " + who}, extra...)...)
	}

	r := approve("alice").mustExit(t, exitPaused)
	mustContain(t, "the first approval's stderr", r.stderr, "approval_given", "1 of the 2 approvals", "1 more", propID,
		"not carol", "alice", "rein approve "+runID+" "+propID)
	got := decodeOne(t, approve("alice", "--json").mustExit(t, exitPaused).stdout)
	proposal := obj(t, obj(t, got["pending"], "pending")["proposal"], "pending.proposal")
	if by, _ := proposal["approved_by"].([]any); len(by) != 1 || by[0] != "alice" {
		t.Fatalf("after alice approved twice: approved_by %v, want [alice] (counted once)", proposal["approved_by"])
	}
	// The starter may not be the other approver; nothing changes.
	mustContain(t, "carol's approval", approve("carol").mustExit(t, exitDenied).stderr, "starter")

	got = decodeOne(t, approve("bob", "--json").mustExit(t, exitOK).stdout)
	if got["status"] != "completed" {
		t.Fatalf("after the second approval: status %v, want completed", got["status"])
	}
}

// TestOneApproverCarriesOn is the twin: a write that needs one approval
// goes on to the run's end with it.
func TestOneApproverCarriesOn(t *testing.T) {
	addr, tokens := approversServer(t)
	runID, propID := startRefund(t, addr, tokens, refundNeeding(t, 1))
	r := cli(t, "approve", runID, propID, "--server", addr, "--token", tokens["alice"], "--json").mustExit(t, exitOK)
	if got := decodeOne(t, r.stdout); got["status"] != "completed" {
		t.Fatalf("after the approval: status %v, want completed", got["status"])
	}
}

// TestWatchAfterAPauseStops: on the embedded server nothing answers a
// person's pause, so a watch after the pause's last event has nothing to
// follow and exits 10 at once, as one from the start does.
func TestWatchAfterAPauseStops(t *testing.T) {
	db := newDB(t)
	runID, _ := pausedRefund(t, db)
	head := len(events(t, db, runID))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	if code := Run(ctx, []string{"watch", runID, "--after", strconv.Itoa(head), "--db", db}, strings.NewReader(""), &out, &errb); code != exitPaused {
		t.Fatalf("watch --after %d of a paused run: exit %d, want %d\n%s%s", head, code, exitPaused, out.String(), errb.String())
	}
	// The twin: after an earlier event, it prints the rest and stops there.
	r := cli(t, "watch", runID, "--after", strconv.Itoa(head-1), "--db", db).mustExit(t, exitPaused)
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(lines) != 2 || !strings.Contains(lines[0], "needs_approval") || !strings.Contains(lines[1], "the pause ends") {
		t.Fatalf("watch --after %d: %q, want the line of the pause and when it ends", head-1, r.stdout)
	}
}
