package main

// End-to-end tests of the guarantee that rein never writes a secret it
// holds: a provider that refuses the key and echoes it back ("Incorrect API
// key provided: Bearer sk-…", as some gateways do) fails the run, and the
// key is in no output, no log line, no stored byte and no export; the run's
// error names the secret instead.

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// echoedKey is the key the stand-in provider echoes. It is used by no
// other test, so a leak found here is this test's.
const echoedKey = "sk-proj-echoed-5f3a9c1e7b2d4086"

// echoingRefusal is an OpenAI-style 401 whose message carries the key the
// call was sent with.
var echoingRefusal = wireReply{status: 401, body: `{"error":{"message":"Incorrect API key provided: Bearer ` + echoedKey +
	`. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","code":"invalid_api_key"}}`}

// echoSecrets writes a --secrets file that gives OPENAI_API_KEY the
// echoed key.
func echoSecrets(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secrets.env")
	if err := os.WriteFile(p, []byte("OPENAI_API_KEY="+echoedKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// outputs is what a test gathered, by where it came from.
type outputs map[string]string

// add records a command's stdout and stderr under its name.
func (o outputs) add(name string, r result) {
	o[name+" stdout"], o[name+" stderr"] = r.stdout, r.stderr
}

// mustNotHold fails the test for each output that holds the key, showing
// where (an output may be binary: the store's file, an export).
func (o outputs) mustNotHold(t *testing.T, key string) {
	t.Helper()
	for what, s := range o {
		if i := strings.Index(s, key); i >= 0 {
			t.Errorf("the key is in %s: …%q…", what, s[max(0, i-120):min(len(s), i+len(key)+40)])
		}
	}
}

// readAll is the file at p, whole.
func readAll(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestSecretsNeverWrittenEmbedded: rein run on the embedded server, with
// the key in --secrets, a tool whose output holds it, and then a provider
// that echoes it. The key is in none of run's, events', inspect's, list's,
// watch's or export's output, nor in the store's file; the tool's output
// and the run's error say which secret was there.
func TestSecretsNeverWrittenEmbedded(t *testing.T) {
	t.Parallel()
	_, url := newFakeProvider(t, oaiSearch, echoingRefusal)
	db := newDB(t)
	tools := writeFile(t, "tools.json", `{"search": [{"output": "found a .env: OPENAI_API_KEY=`+echoedKey+`"}]}`)
	r := cli(t, "run", writeFile(t, "task.json", modelTask), "--db", db, "--model", "openai:gpt-test", "--base-url", url+"/v1",
		"--tools", "fixture:"+tools, "--secrets", echoSecrets(t), "--json").mustExit(t, exitFailed)
	s := decodeOne(t, r.stdout)
	runID := s["run_id"].(string)
	mustContain(t, "last_error", s["last_error"].(string), "401", "Incorrect API key provided: Bearer [secret OPENAI_API_KEY]")
	if got := eventTypes(events(t, db, runID)); !strings.Contains(got, "tool_returned") {
		t.Fatalf("events %s, want the tool's result before the refusal", got)
	}
	mustContain(t, "the events", cli(t, "events", runID, "--json", "--db", db).stdout, "OPENAI_API_KEY=[secret OPENAI_API_KEY]")
	o := outputs{}
	o.add("run", r)
	for _, args := range [][]string{
		{"events", runID, "--json"}, {"events", runID},
		{"inspect", runID, "--json"}, {"inspect", runID},
		{"list", "--json"}, {"list"},
		{"watch", runID},
	} {
		o.add(strings.Join(args, " "), cli(t, append(args, "--db", db)...))
	}
	file := filepath.Join(t.TempDir(), "run.rein")
	cli(t, "export", runID, "--db", db, "-o", file).mustExit(t, exitOK)
	o["the export file"] = readAll(t, file)
	o["the store's file"] = readAll(t, db)
	o.mustNotHold(t, echoedKey)
}

// TestSecretsNeverWrittenServe: rein serve with the key in its
// environment, a run carried by it over gRPC, and the server's log at
// debug level. The key is in no log line, no answer over the API (events,
// inspect, watch, export), no output of run, and no stored byte.
func TestSecretsNeverWrittenServe(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", echoedKey) // not parallel: the server reads it from its environment
	_, url := newFakeProvider(t, echoingRefusal)
	db := newDB(t)
	ctx, cancel := context.WithCancel(context.Background())
	log := newWatchWriter("rein serving")
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, []string{"serve", "--listen", "127.0.0.1:0", "--db", db, "--allow-base-url", url + "/v1",
			"--log-format", "json", "--log-level", "debug"}, strings.NewReader(""), &bytes.Buffer{}, log)
	}()
	// stop ends the server and waits for it; at the latest when the test
	// ends.
	stop := sync.OnceValue(func() int { cancel(); return <-done })
	t.Cleanup(func() { stop() })
	select {
	case <-log.seen:
	case code := <-done:
		t.Fatalf("serve exited %d:\n%s", code, log)
	case <-time.After(30 * time.Second):
		t.Fatalf("serve did not start:\n%s", log)
	}
	var addr string
	for _, line := range logLines(t, log.String()) {
		if line["msg"] == "rein serving" {
			addr = line["addr"].(string)
		}
	}
	task := writeFile(t, "task.json", `{"goal": "find the invoice total"}`)
	r := cli(t, "run", task, "--server", addr, "--model", "openai:gpt-test", "--base-url", url+"/v1", "--json").mustExit(t, exitFailed)
	s := decodeOne(t, r.stdout)
	runID := s["run_id"].(string)
	mustContain(t, "last_error", s["last_error"].(string), "Incorrect API key provided: Bearer [secret OPENAI_API_KEY]")
	o := outputs{}
	o.add("run", r)
	for _, args := range [][]string{{"events", runID, "--json"}, {"inspect", runID, "--json"}, {"watch", runID}, {"list", "--json"}} {
		o.add(strings.Join(args, " ")+" --server", cli(t, append(args, "--server", addr)...))
	}
	file := filepath.Join(t.TempDir(), "run.rein")
	cli(t, "export", runID, "--server", addr, "-o", file).mustExit(t, exitOK)
	o["the export file"] = readAll(t, file)
	// The run's end is logged (as a warning, with its error) once the
	// append that ends it is published; the server then stops and closes
	// its store, whose file is read after.
	if !log.waitFor(30*time.Second, func(s string) bool { return strings.Contains(s, `"msg":"run ended"`) }) {
		t.Fatalf("no \"run ended\" line in the server's log:\n%s", log)
	}
	if code := stop(); code != exitOK {
		t.Fatalf("serve exited %d:\n%s", code, log)
	}
	mustContain(t, "the server's log", log.String(), "[secret OPENAI_API_KEY]")
	o["the server's log"] = log.String()
	o["the store's file"] = readAll(t, db)
	o.mustNotHold(t, echoedKey)
}
