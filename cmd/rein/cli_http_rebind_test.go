package main

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// httpCall posts a Connect JSON call to RunService's method on web, with
// extra headers (Host among them).
func httpCall(t *testing.T, web, method, body string, headers map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+web+"/rein.v1.RunService/"+method, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connect-Protocol-Version", "1")
	for k, v := range headers {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestHTTPRebindingCannotDecide: issue 26's reproduction. On a server
// without --tokens (loopback callers are the local admin), a page on a
// rebound name posts DecideApproval for a paused refund: refused with 403,
// and the run is still waiting, its log untouched. The twin: the same call
// by the console's own address approves, and the write commits.
func TestHTTPRebindingCannotDecide(t *testing.T) {
	web := freeAddr(t)
	db := newDB(t)
	addr := serveInProcess(t, db, "--http", web, "--tools", "fixture:"+example("refund", "tools.json"))
	out := decodeOne(t, cli(t, "run", example("refund", "task.json"), "--model", "script:"+example("refund", "model.jsonl"),
		"--server", addr, "--json").mustExit(t, exitPaused).stdout)
	runID := out["run_id"].(string)
	prop := obj(t, obj(t, out["pending"], "pending")["proposal"], "pending.proposal")
	before := cli(t, "events", runID, "--server", addr, "--json").mustExit(t, exitOK).stdout
	decide := `{"runId":"` + runID + `","proposalId":"` + prop["proposal_id"].(string) + `","proposalHash":"` + prop["hash"].(string) +
		`","verdict":"APPROVAL_VERDICT_APPROVE","reason":"from a rebound page"}`
	_, port, _ := net.SplitHostPort(web)
	for name, h := range map[string]map[string]string{
		"rebound Host and Origin": {"Host": "evil.example:" + port, "Origin": "http://evil.example:" + port},
		"rebound Host":            {"Host": "evil.example:" + port},
		"foreign Origin":          {"Origin": "http://evil.example:" + port},
	} {
		code, body := httpCall(t, web, "DecideApproval", decide, h)
		if code != http.StatusForbidden {
			t.Fatalf("DecideApproval with a %s: %d %s; want 403", name, code, body)
		}
	}
	// A form post from any page: 415, whatever its origin.
	resp, err := http.Post("http://"+web+"/rein.v1.RunService/DecideApproval", "text/plain", strings.NewReader(decide))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Fatalf("a form-encodable DecideApproval: %d, want 415", resp.StatusCode)
	}
	after := cli(t, "events", runID, "--server", addr, "--json").mustExit(t, exitOK).stdout
	if after != before {
		t.Fatalf("refused calls changed the run's log:\nbefore %s\nafter %s", before, after)
	}

	code, body := httpCall(t, web, "DecideApproval", decide, map[string]string{"Origin": "http://" + web})
	if code != http.StatusOK {
		t.Fatalf("DecideApproval from the console's own origin: %d %s", code, body)
	}
	// watch follows the run to its end and exits with its code: 0, completed.
	cli(t, "watch", runID, "--server", addr, "--json").mustExit(t, exitOK)
}

// TestServeHTTPFlagsAreChecked: the --http-… flags are refused without
// --http, and values that do not fit are refused, each before the store
// opens (exit 2, naming the flag). The twin is every test here that serves
// --http with them.
func TestServeHTTPFlagsAreChecked(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--http-host", "rein.internal"}, "--http-host is for the HTTP face"},
		{[]string{"--http-max-conns-per-client", "5"}, "--http-max-conns-per-client is for the HTTP face"},
		{[]string{"--http", "127.0.0.1:0", "--http-host", "https://rein.internal"}, "--http-host"},
		{[]string{"--http", "127.0.0.1:0", "--http-allowed-origins", "ops.example.com"}, "--http-allowed-origins"},
		{[]string{"--http", "127.0.0.1:0", "--http-read-timeout", "0s"}, "--http-read-timeout must be more than 0"},
		{[]string{"--http", "127.0.0.1:0", "--http-max-conns-per-client", "-1"}, "--http-max-conns-per-client"},
	} {
		db := newDB(t)
		r := cli(t, append([]string{"serve", "--db", db, "--listen", "127.0.0.1:0"}, tc.args...)...).mustExit(t, exitUsage)
		mustContain(t, strings.Join(tc.args, " "), r.stderr, tc.want)
		mustNotExist(t, db)
	}
}
