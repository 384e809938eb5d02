//go:build unix

package tenants

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLoadFIFORefused: a FIFO given as the tenants file is refused at once,
// not read: a read would wait for a writer forever. The twin (a regular
// file is read) is TestLoad.
func TestLoadFIFORefused(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tenants.toml")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := Load(p); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "named pipe (FIFO)") {
			t.Errorf("Load of a FIFO: %v, want refused as a named pipe", err)
		}
	case <-time.After(10 * time.Second):
		// Unblock the open so the goroutine ends with the test.
		if f, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
		t.Fatal("Load of a FIFO did not return: it waits for a writer")
	}
}
