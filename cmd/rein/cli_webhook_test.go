package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

const cliSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// TestWebhookCommands: rein webhook create, list, get, test and
// deliveries against rein serve, and a run that pauses for approval is
// delivered to the receiver. The twins: a secret file that holds no
// secret and an unknown format are usage errors that create nothing.
func TestWebhookCommands(t *testing.T) {
	got := make(chan map[string]any, 16)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		m["id"] = r.Header.Get("webhook-id")
		got <- m
	}))
	defer recv.Close()
	addr := serveInProcess(t, newDB(t), "--tools", "fixture:"+example("refund", "tools.json"), "--webhook-allow-private", "--public-url", "https://rein.example.com")
	secret := writeFile(t, "oncall.secret", cliSecret+"\n")

	bad := cli(t, "webhook", "create", "oncall", "--url", recv.URL, "--secret-file", writeFile(t, "bad.secret", "hunter2\n"), "--server", addr)
	bad.mustExit(t, exitUsage)
	mustContain(t, "stderr", bad.stderr, "whsec_")
	cli(t, "webhook", "create", "oncall", "--url", recv.URL, "--secret-file", secret, "--format", "xml", "--server", addr).mustExit(t, exitUsage)
	cli(t, "webhook", "create", "oncall", "--url", recv.URL, "--secret-file", secret, "--status", "bogus", "--server", addr).mustExit(t, exitUsage)
	if l := cli(t, "webhook", "list", "--server", addr, "--json"); strings.TrimSpace(l.stdout) != "" {
		t.Fatalf("a refused create stored a subscription:\n%s", l.stdout)
	}

	created := cli(t, "webhook", "create", "oncall", "--url", recv.URL, "--secret-file", secret, "--status", "needs_approval,ended", "--server", addr, "--json")
	created.mustExit(t, exitOK)
	if strings.Contains(created.stdout, cliSecret[6:]) {
		t.Fatalf("create printed the secret:\n%s", created.stdout)
	}
	mustContain(t, "create", created.stdout, `"secret_fingerprints"`, `"completed"`)
	mustContain(t, "list", cli(t, "webhook", "list", "--server", addr).stdout, "oncall", recv.URL, "needs_approval")
	test := cli(t, "webhook", "test", "oncall", "--server", addr, "--json")
	test.mustExit(t, exitOK)
	mustContain(t, "test", test.stdout, `"status_code":200`)
	if m := <-got; m["type"] != "webhook.test" {
		t.Fatalf("test delivery: %v", m)
	}

	run := cli(t, "run", example("refund", "task.json"), "--model", "script:"+example("refund", "model.jsonl"), "--server", addr, "--json")
	run.mustExit(t, exitPaused)
	runID, _ := decodeOne(t, run.stdout)["run_id"].(string)
	select {
	case m := <-got:
		data, _ := m["data"].(map[string]any)
		if m["type"] != "run.needs_approval" || data["run_id"] != runID || data["approval"] == nil ||
			data["console_url"] != "https://rein.example.com/#/runs/"+runID || !strings.HasPrefix(m["id"].(string), "msg_oncall_"+runID) {
			t.Fatalf("delivery: %v", m)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the paused run was not delivered")
	}
	get := cli(t, "webhook", "get", "oncall", "--server", addr, "--json")
	get.mustExit(t, exitOK)
	if strings.Contains(get.stdout, cliSecret[6:]) {
		t.Fatalf("get printed the secret:\n%s", get.stdout)
	}
	cli(t, "webhook", "deliveries", "oncall", "--failed", "--server", addr).mustExit(t, exitOK)
	cli(t, "webhook", "redeliver", "oncall", "--server", addr).mustExit(t, exitUsage)
	cli(t, "webhook", "redeliver", "oncall", "msg_nope", "--server", addr).mustExit(t, exitNotFound)
	cli(t, "webhook", "pause", "oncall", "--server", addr).mustExit(t, exitOK)
	mustContain(t, "list", cli(t, "webhook", "list", "--server", addr).stdout, "paused")
	cli(t, "webhook", "delete", "oncall", "--server", addr).mustExit(t, exitOK)
	cli(t, "webhook", "get", "oncall", "--server", addr).mustExit(t, exitNotFound)
}
