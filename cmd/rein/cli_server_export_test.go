package main

import (
	"bytes"
	"context"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/reinhq/rein/internal/auth"
)

// serveInProcess runs rein serve on a free loopback port until the test
// ends, and returns its address.
func serveInProcess(t *testing.T, db string, extra ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stderr := newWatchWriter("rein serving")
	done := make(chan int, 1)
	args := append([]string{"serve", "--listen", "127.0.0.1:0", "--db", db}, extra...)
	go func() { done <- Run(ctx, args, strings.NewReader(""), &bytes.Buffer{}, stderr) }()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != exitOK {
			t.Errorf("serve exited %d:\n%s", code, stderr)
		}
	})
	select {
	case <-stderr.seen:
	case code := <-done:
		t.Fatalf("serve exited %d:\n%s", code, stderr)
	case <-time.After(30 * time.Second):
		t.Fatalf("serve did not start:\n%s", stderr)
	}
	m := regexp.MustCompile(`addr=(127\.0\.0\.1:\d+)`).FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("no address in serve's log:\n%s", stderr)
	}
	return m[1]
}

// TestExportOverServerCarriesBlobs: rein export --server fetches the blobs
// the run's model inputs reference (GetBlobs), so the file reads offline.
func TestExportOverServerCarriesBlobs(t *testing.T) {
	addr := serveInProcess(t, newDB(t), "--tools", "fixture:"+example("invoice", "tools.json"))
	out := decodeOne(t, cli(t, "run", example("invoice", "task.json"), "--model", "script:"+example("invoice", "model.jsonl"),
		"--server", addr, "--json").mustExit(t, exitOK).stdout)
	file := filepath.Join(t.TempDir(), "run.rein")
	cli(t, "export", out["run_id"].(string), "--server", addr, "-o", file).mustExit(t, exitOK)
	got := decodeOne(t, cli(t, "inspect", file, "--json").mustExit(t, exitOK).stdout)
	if got["status"] != "completed" || got["run_id"] != out["run_id"] {
		t.Fatalf("the exported file reads as %v, want the completed run", got)
	}
	// The twin: a run this server does not hold.
	r := cli(t, "export", "run_missing", "--server", addr, "-o", file)
	if r.code != exitNotFound {
		t.Fatalf("export of a missing run: exit %d, want %d\n%s", r.code, exitNotFound, r.stderr)
	}
}

// TestImportOverServer: rein import --server sends the run to the server
// (ImportRun): it reads there as it did where it was exported; a run already
// there, a caller who is not an admin of the run's tenant, and a file over
// the server's largest request are refused, and nothing is stored.
func TestImportOverServer(t *testing.T) {
	db, runID, file := exportRun(t, "refund", exitPaused)
	addr := serveInProcess(t, newDB(t))
	r := cli(t, "import", file, "--server", addr, "--json").mustExit(t, exitOK)
	mustContain(t, "stderr", r.stderr, runID, "server "+addr)
	// The run's summary: inspect's, without the card it adds for a
	// paused run (TestPendingCardOfAProposal).
	want := decodeOne(t, cli(t, "inspect", runID, "--db", db, "--json").mustExit(t, exitOK).stdout)
	for _, k := range append(cardFields, inspectFields...) {
		delete(want, k)
	}
	if got := decodeOne(t, r.stdout); !reflect.DeepEqual(got, want) {
		t.Errorf("import --server printed\n%v\nwant the run's summary\n%v", got, want)
	}
	for _, args := range [][]string{{"inspect", "--json"}, {"events", "--json"}} {
		src := cli(t, append([]string{args[0], runID, "--db", db}, args[1:]...)...).mustExit(t, exitOK)
		dst := cli(t, append([]string{args[0], runID, "--server", addr}, args[1:]...)...).mustExit(t, exitOK)
		sameOutput(t, strings.Join(args, " ")+" of the imported run", dst, src)
	}
	before := cli(t, "events", runID, "--server", addr, "--json").mustExit(t, exitOK).stdout
	r = cli(t, "import", file, "--server", addr).mustExit(t, exitError)
	mustContain(t, "stderr", r.stderr, runID, "already", "server "+addr, "nothing was imported")
	if after := cli(t, "events", runID, "--server", addr, "--json").mustExit(t, exitOK).stdout; after != before {
		t.Error("a refused import changed the run on the server")
	}

	// With tokens: an operator may not import, nor an admin of another
	// tenant; an admin of the run's tenant may.
	tokens := writeFile(t, "tokens.json", `{"principals": [
		{"id": "op", "tenant": "default", "roles": ["operator"], "token_sha256": "`+auth.HashToken("op-token")+`"},
		{"id": "other", "tenant": "acme", "roles": ["admin"], "token_sha256": "`+auth.HashToken("other-token")+`"},
		{"id": "root", "tenant": "default", "roles": ["admin"], "token_sha256": "`+auth.HashToken("root-token")+`"}]}`)
	secured := serveInProcess(t, newDB(t), "--tokens", tokens)
	r = cli(t, "import", file, "--server", secured, "--token", "op-token").mustExit(t, exitDenied)
	mustContain(t, "stderr", r.stderr, "admin")
	r = cli(t, "import", file, "--server", secured, "--token", "other-token").mustExit(t, exitDenied)
	mustContain(t, "stderr", r.stderr, `tenant "default"`)
	cli(t, "inspect", runID, "--server", secured, "--token", "root-token").mustExit(t, exitNotFound)
	cli(t, "import", file, "--server", secured, "--token", "root-token").mustExit(t, exitOK)

	// A server that takes requests of 1 KiB at most.
	small := serveInProcess(t, newDB(t), "--max-msg-bytes", "1024")
	r = cli(t, "import", file, "--server", small).mustExit(t, exitError)
	mustContain(t, "stderr", r.stderr, file, "larger than", "--max-msg-bytes")
	cli(t, "inspect", runID, "--server", small).mustExit(t, exitNotFound)
}
