package main

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
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
