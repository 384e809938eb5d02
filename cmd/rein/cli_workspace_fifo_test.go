//go:build unix

package main

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestRunWorkspaceReadFIFORefused: fs.read of a FIFO in the workspace is
// refused at once with the reason, and the run goes on to its answer.
// Before, the read waited for a writer forever, and Ctrl+C could not
// record cancelled.
func TestRunWorkspaceReadFIFORefused(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	args := workspaceRun(t, db, "pipe")
	for i, a := range args {
		if a == "--workspace" {
			if err := syscall.Mkfifo(filepath.Join(args[i+1], "pipe"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	done := make(chan result, 1)
	go func() { done <- cli(t, args...) }()
	var r result
	select {
	case r = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("rein run did not return: the read of a FIFO hangs")
	}
	r.mustExit(t, 0)
	if s := decodeOne(t, r.stdout); s["status"] != "completed" {
		t.Errorf("status = %v, want completed", s["status"])
	}
	mustContain(t, "tool_returned", toolReturned(t, db, r.stdout), "named pipe (FIFO)", "refused")
}
