package main

import (
	"bufio"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reinhq/rein/internal/tools/remote"
)

// logLines runs run's stderr through a pipe and sends each line on the
// returned channel, draining the pipe until run is done with it.
func logLines(t *testing.T) (io.WriteCloser, <-chan string) {
	t.Helper()
	pr, pw := io.Pipe()
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default: // nobody waits for this one
			}
		}
	}()
	t.Cleanup(func() { _ = pr.Close() })
	return pw, lines
}

// TestRun: the binary serves the billing tools on its address until its
// ctx ends, then stops gracefully (exit 0) and closes the file, which opens
// again. The twins: usage errors exit 2, a service that cannot start exits 1.
func TestRun(t *testing.T) {
	ctx := testCtx(t)
	db := filepath.Join(t.TempDir(), "billing.db")
	stderr, lines := logLines(t)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	exited := make(chan int, 1)
	go func() {
		code := run(runCtx, []string{"--db", db, "--listen", "127.0.0.1:0"}, stderr)
		_ = stderr.Close()
		exited <- code
	}()

	var addr string
	for addr == "" {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("the service exited (%d) before it served", <-exited)
			}
			if _, rest, found := strings.Cut(line, " addr="); found {
				addr, _, _ = strings.Cut(rest, " ")
			}
		case <-ctx.Done():
			t.Fatal("the service did not log its address")
		}
	}
	c, err := remote.Dial("billing", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	specs, err := c.List(ctx)
	if err != nil || len(specs) != 2 || specs[0].Name != toolInvoice || specs[1].Name != toolRefund {
		t.Fatalf("List: %v, %v; want invoices.get and refunds.create", specs, err)
	}

	stop()
	select {
	case code := <-exited:
		if code != exitOK {
			t.Fatalf("exit %d after the stop, want 0", code)
		}
	case <-ctx.Done():
		t.Fatal("the service did not stop")
	}
	b, err := Open(db)
	if err != nil {
		t.Fatalf("the file after the stop: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		args []string
		code int
	}{
		{"no --db", []string{"--listen", "127.0.0.1:0"}, exitUsage},
		{"an argument", []string{"--db", db, "extra"}, exitUsage},
		{"an unknown flag", []string{"--db", db, "--port", "7300"}, exitUsage},
		{"a bad address", []string{"--db", db, "--listen", "127.0.0.1:http-alt-no"}, exitError},
		{"a missing directory", []string{"--db", filepath.Join(t.TempDir(), "missing", "billing.db"), "--listen", "127.0.0.1:0"}, exitError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if code := run(ctx, tc.args, io.Discard); code != tc.code {
				t.Errorf("exit %d, want %d", code, tc.code)
			}
		})
	}
}
