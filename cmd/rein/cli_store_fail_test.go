package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestServeExitsNonZeroWhenItsStoreFails: rein serve whose store cannot
// checkpoint (its disk filled after a run was logged) does not exit 0:
// the failed commit stops the store, and serve drains and exits
// unavailable, naming it. With room again, the run it acknowledged is
// there (the log kept it). Its twin is every serve test's clean stop
// (serveInProcess fails on a non-zero exit).
func TestServeExitsNonZeroWhenItsStoreFails(t *testing.T) {
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=8M", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", dir).Run() })
	db := filepath.Join(dir, "rein.db")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stderr := newWatchWriter("rein serving")
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, []string{"serve", "--listen", "127.0.0.1:0", "--db", db, "--tools", "fixture:" + example("invoice", "tools.json")},
			strings.NewReader(""), &bytes.Buffer{}, stderr)
	}()
	select {
	case <-stderr.seen:
	case code := <-done:
		t.Fatalf("serve exited %d:\n%s", code, stderr)
	case <-time.After(30 * time.Second):
		t.Fatalf("serve did not start:\n%s", stderr)
	}
	addr := regexp.MustCompile(`addr=(127\.0\.0\.1:\d+)`).FindStringSubmatch(stderr.String())[1]

	// Room for the log's record of a run with a 512 KiB input (its event
	// and its contract, ~1 MiB), not for the file's pages too.
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	for buf := make([]byte, 4096); ; {
		if _, err := f.Write(buf); err != nil {
			break
		}
	}
	info, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(info.Size() - 1536<<10); err != nil {
		t.Fatal(err)
	}
	f.Close()
	task := fileBytes(t, example("invoice", "task.json"))
	task = bytes.Replace(task, []byte(`"inputs": {`), []byte(`"inputs": {"padding": "`+strings.Repeat("x", 512<<10)+`", `), 1)
	r := cli(t, "run", writeFile(t, "big-task.json", string(task)), "--model", "script:"+example("invoice", "model.jsonl"),
		"--server", addr, "--detach", "--json").mustExit(t, exitOK)
	runID := decodeOne(t, r.stdout)["run_id"].(string)

	cancel()
	select {
	case code := <-done:
		if code == exitOK {
			t.Fatalf("serve whose store could not checkpoint exited 0:\n%s", stderr)
		}
		mustContain(t, "serve's log", stderr.String(), "stopped taking writes")
	case <-time.After(2 * time.Minute):
		t.Fatalf("serve did not stop:\n%s", stderr)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	list := cli(t, "list", "--db", db, "--json").mustExit(t, exitOK)
	mustContain(t, "rein list after the failure", list.stdout, runID)
}
