package bolt

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reinhq/rein/internal/rofs"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
)

// TestRefusedWritesChangeNoByte: a batch whose every request is refused (a
// stale version, an illegal event, a run that exists) commits nothing: the
// file stays byte-identical. Its twin: an accepted append changes it.
func TestRefusedWritesChangeNoByte(t *testing.T) {
	path := damageFixture(t)
	before := readFile(t, path)
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.Append(ctx, "run-a", 3, []*reinv1.Event{markedEvent("run-a", 4)}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("stale append: %v, want ErrConflict", err)
	}
	if _, err := s.Append(ctx, "run-a", damageEvents, []*reinv1.Event{markedEvent("run-a", damageEvents)}); err == nil {
		t.Fatal("append of a repeated sequence was accepted")
	}
	if _, err := s.Import(ctx, []*reinv1.Event{startEvent("run-a")}, nil); !errors.Is(err, store.ErrExists) {
		t.Fatalf("import of a stored run: %v, want ErrExists", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, readFile(t, path)) {
		t.Fatal("refused writes changed the file")
	}

	s, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "run-a", damageEvents, []*reinv1.Event{markedEvent("run-a", damageEvents+1)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(before, readFile(t, path)) {
		t.Fatal("an accepted append did not change the file")
	}
}

// TestReadOnlyStore: a read-only store reads everything, refuses every
// write with ErrReadOnly (no panic), opens beside another read-only store
// of the same file, never writes a byte, and cannot open a missing file.
func TestReadOnlyStore(t *testing.T) {
	path := damageFixture(t)
	before := readFile(t, path)
	a, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("a second read-only open beside the first: %v", err)
	}
	ctx := context.Background()
	for _, s := range []*Store{a, b} {
		for _, id := range damageRuns {
			assertReads(t, s, id)
		}
		if page, err := s.List(ctx, store.Filter{Limit: 10}); err != nil || len(page.Runs) != len(damageRuns) {
			t.Fatalf("List: %d runs, %v", len(page.Runs), err)
		}
	}
	if _, err := a.Append(ctx, "run-a", damageEvents, []*reinv1.Event{markedEvent("run-a", damageEvents+1)}); !errors.Is(err, store.ErrReadOnly) {
		t.Errorf("Append: %v, want ErrReadOnly", err)
	}
	if _, _, err := a.Create(ctx, startEvent("run-new")); !errors.Is(err, store.ErrReadOnly) {
		t.Errorf("Create: %v, want ErrReadOnly", err)
	}
	if _, err := a.Acquire(ctx, "run-a", "me"); !errors.Is(err, store.ErrReadOnly) {
		t.Errorf("Acquire: %v, want ErrReadOnly", err)
	}
	// A read-write open waits for the readers, and says what to do.
	if _, err := Open(path, Options{}); err == nil || !strings.Contains(err.Error(), "--server") {
		t.Errorf("read-write open beside readers: %v, want the lock error naming --server", err)
	}
	for _, s := range []*Store{a, b} {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(before, readFile(t, path)) {
		t.Error("read-only stores changed the file")
	}
	if _, err := Open(filepath.Join(t.TempDir(), "missing.db"), Options{ReadOnly: true}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("read-only open of a missing file: %v, want ErrNotExist", err)
	}
}

// TestReadOnlyFiles: a store on a read-only mount (a read-only bind mount
// when the test may mount, else a file and directory of mode 0400 and
// 0500) opens read-only and reads; a read-write open is refused with an
// error that says the file cannot be written, never that it is damaged.
func TestReadOnlyFiles(t *testing.T) {
	path := damageFixture(t)
	before := readFile(t, path)
	path = rofs.ReadOnly(t, path)
	s, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range damageRuns {
		assertReads(t, s, id)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = Open(path, Options{})
	if err == nil || !strings.Contains(err.Error(), "cannot be written") || strings.Contains(err.Error(), "backup") {
		t.Errorf("read-write open: %v, want \"cannot be written\" and no word of a backup", err)
	}
	if !bytes.Equal(before, readFile(t, path)) {
		t.Error("the file changed")
	}
}

// TestDiskFull: on a full disk (a 1 MiB tmpfs) an append fails with
// ErrDiskFull and stores nothing, every acknowledged append is still there
// after a reopen, and the store goes on once there is room again.
func TestDiskFull(t *testing.T) {
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1M", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", dir).Run() })
	path := filepath.Join(dir, "rein.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, _, err := s.Create(ctx, startEvent("run-a")); err != nil {
		t.Fatal(err)
	}
	// A filler file leaves a little room, so that the store's next grow
	// does not fit.
	filler := filepath.Join(dir, "filler")
	fill(t, filler)
	acked := uint64(1)
	var full error
	for seq := uint64(2); seq < 10000; seq++ {
		if _, err := s.Append(ctx, "run-a", acked, []*reinv1.Event{markedEvent("run-a", seq)}); err != nil {
			full = err
			break
		}
		acked = seq
	}
	t.Logf("%d appends acknowledged, then: %v", acked-1, full)
	if !errors.Is(full, store.ErrDiskFull) {
		t.Fatalf("append on a full disk: %v, want ErrDiskFull", full)
	}
	if st, err := s.Load(ctx, "run-a"); err != nil || st.Version != acked {
		t.Fatalf("after the refused append: version %d, %v; want %d", st.Version, err, acked)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "run-a", acked, []*reinv1.Event{markedEvent("run-a", acked+1)}); err != nil {
		t.Fatalf("append once there is room: %v", err)
	}
	acked++
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	evs, err := s.Events(ctx, "run-a", 0, 1<<20)
	if err != nil || uint64(len(evs)) != acked {
		t.Fatalf("after reopen: %d events, %v; want %d", len(evs), err, acked)
	}
}

// fill writes a file until the disk is full, then frees 64 KiB of it.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			break
		}
	}
	info, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(max(0, info.Size()-64<<10)); err != nil {
		t.Fatal(err)
	}
}
