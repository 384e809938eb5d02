package main

// TestGrpcurlDocs runs the "## grpcurl" walkthrough of docs/api.md against a real
// `rein serve` process: it builds the rein binary, starts the server the way
// the section's first ```sh block does, then runs every other ```sh block of
// the section, in order, with bash -c, exactly as written except for the
// server's address, and with TOKEN, APPROVER_TOKEN, RUN_ID, PROPOSAL_ID and
// PROPOSAL_HASH in the environment. The failure twins run the same commands
// without the token, or with a wrong one, and the approval with the
// operator's token instead of the approver's.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reinhq/rein/internal/auth"
)

// grpcurlResult is what one block of the page left behind.
type grpcurlResult struct {
	code           int
	stdout, stderr string
}

func (r grpcurlResult) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// grpcurlRun runs block with bash -c in dir, with the page's address
// replaced by addr and env added to the environment.
func grpcurlRun(t *testing.T, dir, addr, block string, env map[string]string) grpcurlResult {
	t.Helper()
	script := "set -euo pipefail\n" + strings.ReplaceAll(block, grpcurlDocAddr, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = dir
	cmd.WaitDelay = 2 * time.Second
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !slices.Contains(grpcurlEnv, k) {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("timed out after 20s:\n%s\nstdout:\n%s\nstderr:\n%s", block, out.String(), errb.String())
	}
	code := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("run %q: %v", block, err)
		}
		code = ee.ExitCode()
	}
	return grpcurlResult{code: code, stdout: out.String(), stderr: errb.String()}
}

// grpcurlJSON decodes grpcurl's output: one JSON object per message.
func grpcurlJSON(t *testing.T, out string) []map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	var msgs []map[string]any
	for {
		var m map[string]any
		err := dec.Decode(&m)
		if err == io.EOF {
			return msgs
		}
		if err != nil {
			t.Fatalf("grpcurl's output is not a JSON object stream: %v\n%s", err, out)
		}
		msgs = append(msgs, m)
	}
}

// grpcurlField returns the string at a path of nested objects, or "".
func grpcurlField(m map[string]any, path ...string) string {
	var v any = m
	for _, k := range path {
		o, ok := v.(map[string]any)
		if !ok {
			return ""
		}
		v = o[k]
	}
	s, _ := v.(string)
	return s
}

func TestGrpcurlDocs(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	grpcurl := filepath.Join(root, ".bin", "grpcurl")
	if _, err := os.Stat(grpcurl); err != nil {
		t.Fatalf("%s is missing: build the pinned tools first with `bash scripts/tools.sh` (%v)", grpcurl, err)
	}
	page, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(grpcurlPage)))
	if err != nil {
		t.Fatal(err)
	}
	steps := grpcurlSteps(t, string(page))

	tmp := t.TempDir()
	bin := filepath.Join(tmp, "rein")
	buildCtx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	build := exec.CommandContext(buildCtx, "go", "build", "-o", bin, "./cmd/rein")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/rein: %v\n%s", err, out)
	}

	// The tokens: the page exports them, and the tokens file it serves
	// with must list their SHA-256, the operator's and the approver's.
	exported := func(name string) string {
		m := regexp.MustCompile(`(?m)^export ` + name + `=(\S+)$`).FindStringSubmatch(steps[1].text)
		if m == nil {
			t.Fatalf("%s's token block does not read `export %s=VALUE`:\n%s", grpcurlPage, name, steps[1].text)
		}
		return m[1]
	}
	token, approverToken := exported("TOKEN"), exported("APPROVER_TOKEN")
	serveArgs := grpcurlServeArgs(t, steps[0].text, filepath.Join(tmp, "state", "rein.db"))
	var tokensFile string
	for i, a := range serveArgs {
		if a == "--tokens" && i+1 < len(serveArgs) {
			tokensFile = serveArgs[i+1]
		}
	}
	dir, err := auth.LoadDirectory(filepath.Join(root, tokensFile))
	if err != nil {
		t.Fatalf("%s's --tokens: %v", grpcurlPage, err)
	}
	for _, tok := range []struct {
		value string
		role  auth.Role
	}{{token, auth.Operator}, {approverToken, auth.Approver}} {
		p, ok := dir.Token(tok.value)
		if !ok {
			t.Fatalf("%s does not list the token %s of %s (sha256 %s)", tokensFile, tok.value, grpcurlPage, auth.HashToken(tok.value))
		}
		if !slices.Equal(p.Roles, []auth.Role{tok.role}) || p.Tenant != "demo" {
			t.Fatalf("%s: the token %s is principal %s of tenant %s with roles %v, want tenant demo with only %s", tokensFile, tok.value, p.ID, p.Tenant, p.Roles, tok.role)
		}
	}

	srv := startGrpcurlServer(t, root, bin, serveArgs)
	env := map[string]string{"TOKEN": token, "APPROVER_TOKEN": approverToken}
	var runID string
	var get string // the GetRun block, for the failure twins
	for _, st := range steps[1:] {
		t.Logf("%s step %s:\n%s", grpcurlPage, st.kind, st.text)
		if st.kind == "get" {
			get = st.text
		}
		if st.kind == "approve" {
			grpcurlApproveAsOperator(t, root, srv.addr, st.text, get, env)
		}
		r := grpcurlRun(t, root, srv.addr, st.text, env)
		if st.kind == "get" {
			// The run pauses for approval a moment after StartRun returns:
			// run the same command until it shows the pause.
			deadline := time.NewTimer(15 * time.Second)
			tick := time.NewTicker(50 * time.Millisecond)
			for r.code == 0 && !strings.Contains(r.stdout, `"RUN_STATUS_NEEDS_APPROVAL"`) {
				select {
				case <-tick.C:
				case <-deadline.C:
					t.Fatalf("GetRun did not show RUN_STATUS_NEEDS_APPROVAL within 15s:\n%v", r)
				}
				r = grpcurlRun(t, root, srv.addr, st.text, env)
			}
			deadline.Stop()
			tick.Stop()
		}
		if r.code != 0 {
			t.Fatalf("%s step %s failed:\n%v", grpcurlPage, st.kind, r)
		}
		switch st.kind {
		case "token":
			// Only sets a variable in its own shell; the test passes TOKEN itself.
		case "health":
			if msgs := grpcurlJSON(t, r.stdout); len(msgs) != 1 || grpcurlField(msgs[0], "status") != "SERVING" {
				t.Fatalf("health check: want status SERVING:\n%v", r)
			}
		case "list":
			got := strings.Fields(r.stdout)
			for _, want := range []string{"rein.v1.RunService", "grpc.health.v1.Health"} {
				if !slices.Contains(got, want) {
					t.Errorf("list does not show %s:\n%v", want, r)
				}
			}
		case "describe":
			for _, want := range []string{"rein.v1.RunService is a service", "rpc StartRun (", "rpc WatchRun (", "returns ( stream .rein.v1.WatchRunResponse )"} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("describe does not show %q:\n%v", want, r)
				}
			}
		case "start":
			msgs := grpcurlJSON(t, r.stdout)
			if len(msgs) != 1 {
				t.Fatalf("StartRun: want one response:\n%v", r)
			}
			runID = grpcurlField(msgs[0], "run", "runId")
			if !strings.HasPrefix(runID, "run_") {
				t.Fatalf("StartRun returned no runId:\n%v", r)
			}
			if created, _ := msgs[0]["created"].(bool); !created {
				t.Errorf("StartRun on a fresh database: want created true:\n%v", r)
			}
			if p := grpcurlField(msgs[0], "run", "principal"); p != "demo" {
				t.Errorf("StartRun: principal %q, want demo", p)
			}
			env["RUN_ID"] = runID
		case "get":
			msgs := grpcurlJSON(t, r.stdout)
			if len(msgs) != 1 || grpcurlField(msgs[0], "run", "runId") != runID {
				t.Fatalf("GetRun: want run %s:\n%v", runID, r)
			}
			if got := grpcurlField(msgs[0], "run", "status"); got != "RUN_STATUS_NEEDS_APPROVAL" {
				t.Errorf("GetRun: status %q, want RUN_STATUS_NEEDS_APPROVAL", got)
			}
			if got := grpcurlField(msgs[0], "run", "pending", "proposal", "tool"); got != "refunds.create" {
				t.Errorf("GetRun: pending tool %q, want refunds.create:\n%v", got, r)
			}
			env["PROPOSAL_ID"] = grpcurlField(msgs[0], "run", "pending", "proposal", "proposalId")
			env["PROPOSAL_HASH"] = grpcurlField(msgs[0], "run", "pending", "proposal", "hash")
			if env["PROPOSAL_ID"] == "" || env["PROPOSAL_HASH"] == "" {
				t.Fatalf("GetRun: the pending proposal has no proposalId or hash:\n%v", r)
			}
		case "approve":
			msgs := grpcurlJSON(t, r.stdout)
			if len(msgs) != 1 || grpcurlField(msgs[0], "run", "runId") != runID {
				t.Fatalf("DecideApproval: want run %s:\n%v", runID, r)
			}
			if got := grpcurlField(msgs[0], "run", "status"); got == "RUN_STATUS_NEEDS_APPROVAL" {
				t.Errorf("DecideApproval: the run still needs approval:\n%v", r)
			}
		case "watch":
			msgs := grpcurlJSON(t, r.stdout)
			if len(msgs) < 3 {
				t.Fatalf("WatchRun: want the run's events:\n%v", r)
			}
			kinds := map[string]bool{}
			for i, msg := range msgs {
				ev, _ := msg["event"].(map[string]any)
				if got, want := grpcurlField(msg, "event", "sequence"), fmt.Sprint(i+1); got != want {
					t.Fatalf("WatchRun: message %d has sequence %q, want %s:\n%v", i+1, got, want, r)
				}
				if got := grpcurlField(msg, "event", "runId"); got != runID {
					t.Fatalf("WatchRun: message %d is for run %q, want %s", i+1, got, runID)
				}
				for k := range ev {
					kinds[k] = true
				}
			}
			for _, want := range []string{"runStarted", "toolReturned", "approvalRequested", "approvalDecided", "writeCommitted", "statusChanged"} {
				if !kinds[want] {
					t.Errorf("WatchRun: no %s event:\n%v", want, r)
				}
			}
			for _, msg := range msgs {
				if _, ok := msg["event"].(map[string]any)["approvalDecided"]; ok {
					if got := grpcurlField(msg, "event", "actor"); got != "principal:demo-approver" {
						t.Errorf("WatchRun: the approval's actor is %q, want principal:demo-approver", got)
					}
				}
			}
			if got := grpcurlField(msgs[len(msgs)-1], "event", "statusChanged", "to"); got != "RUN_STATUS_COMPLETED" {
				t.Errorf("WatchRun: the last event changes the status to %q, want RUN_STATUS_COMPLETED:\n%v", got, r)
			}
		}
	}

	// Failure twins: the GetRun command without the token, and with a token
	// the server does not know, fail with Unauthenticated.
	noToken := strings.Replace(get, grpcurlTokenHeader+" ", "", 1)
	if noToken == get {
		t.Fatalf("the GetRun block does not pass %s:\n%s", grpcurlTokenHeader, get)
	}
	for _, twin := range []struct {
		name, block string
		env         map[string]string
	}{
		{"GetRun without the token", noToken, map[string]string{"RUN_ID": runID}},
		{"GetRun with an unknown token", get, map[string]string{"RUN_ID": runID, "TOKEN": "not-" + token}},
	} {
		r := grpcurlRun(t, root, srv.addr, twin.block, twin.env)
		if r.code == 0 || !strings.Contains(r.stdout+r.stderr, "Unauthenticated") || strings.Contains(r.stdout, runID) {
			t.Errorf("%s: want a failure with Unauthenticated and no run:\n%v", twin.name, r)
		}
	}

	srv.stop(t)
}

// grpcurlApproveAsOperator is the approval's failure twin: the page's
// DecideApproval block sent with the operator's token instead of the
// approver's fails with PermissionDenied, and the run, read with the page's
// GetRun block, still waits on the same proposal.
func grpcurlApproveAsOperator(t *testing.T, dir, addr, approve, get string, env map[string]string) {
	t.Helper()
	if !strings.Contains(approve, grpcurlApproverHeader) {
		t.Fatalf("the DecideApproval block does not pass %s:\n%s", grpcurlApproverHeader, approve)
	}
	operator := maps.Clone(env)
	operator["APPROVER_TOKEN"] = env["TOKEN"]
	r := grpcurlRun(t, dir, addr, approve, operator)
	if r.code == 0 || !strings.Contains(r.stdout+r.stderr, "PermissionDenied") {
		t.Fatalf("DecideApproval with the operator's token: want a failure with PermissionDenied:\n%v", r)
	}
	r = grpcurlRun(t, dir, addr, get, env)
	msgs := grpcurlJSON(t, r.stdout)
	if r.code != 0 || len(msgs) != 1 ||
		grpcurlField(msgs[0], "run", "status") != "RUN_STATUS_NEEDS_APPROVAL" ||
		grpcurlField(msgs[0], "run", "pending", "proposal", "proposalId") != env["PROPOSAL_ID"] {
		t.Fatalf("after a refused DecideApproval: want the run still waiting on %s:\n%v", env["PROPOSAL_ID"], r)
	}
}
