package lossyfs

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// mount mounts a file system over a fresh backing directory, or skips
// (fails with REIN_REQUIRE_FUSE=1) where FUSE cannot be mounted.
func mount(t *testing.T) (*FS, string) {
	t.Helper()
	if err := Available(); err != nil {
		if os.Getenv("REIN_REQUIRE_FUSE") == "1" {
			t.Fatalf("REIN_REQUIRE_FUSE=1, but %v", err)
		}
		t.Skipf("skipped: %v", err)
	}
	backing := t.TempDir()
	return remount(t, backing), backing
}

func remount(t *testing.T, backing string) *FS {
	t.Helper()
	dir := t.TempDir()
	fsys, err := Mount(dir, backing)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fsys.Unmount(5 * time.Second) })
	return fsys
}

func write(t *testing.T, f *os.File, off int64, s string) {
	t.Helper()
	if _, err := f.WriteAt([]byte(s), off); err != nil {
		t.Fatal(err)
	}
}

func syncDir(t *testing.T, dir string) {
	t.Helper()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
}

// keep is a policy that keeps a fixed number of every file's unsynced
// changes (and bytes of the next), and of the directory's.
type keep struct{ file, bytes, dir int }

func (k keep) File(string, []Change) (int, int) { return k.file, k.bytes }
func (k keep) Dir([]DirChange) int              { return k.dir }

func crash(t *testing.T, fsys *FS, p Policy) {
	t.Helper()
	fsys.Cut()
	report, err := fsys.Crash(p, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after the cut: %q", report)
}

func content(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "<none>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestSyncedSurvives: what was synced (the file and its directory entry)
// is there after a cut, what was written after is not.
func TestSyncedSurvives(t *testing.T) {
	fsys, backing := mount(t)
	f, err := os.Create(filepath.Join(fsys.Dir(), "a"))
	if err != nil {
		t.Fatal(err)
	}
	write(t, f, 0, "durable")
	if err := syscall.Fdatasync(int(f.Fd())); err != nil {
		t.Fatal(err)
	}
	syncDir(t, fsys.Dir())
	write(t, f, 0, "VOLATILE!")
	if got := content(t, filepath.Join(fsys.Dir(), "a")); got != "VOLATILE!" {
		t.Fatalf("before the cut, a reads %q, want what was written", got)
	}
	_ = f.Close()
	crash(t, fsys, Drop{})
	if got := content(t, filepath.Join(backing, "a")); got != "durable" {
		t.Errorf("after the cut, a holds %q, want %q", got, "durable")
	}
	fsys = remount(t, backing)
	if got := content(t, filepath.Join(fsys.Dir(), "a")); got != "durable" {
		t.Errorf("mounted again, a reads %q, want %q", got, "durable")
	}
}

// TestUnsyncedEntryLost is the twin: a file synced but whose directory was
// not is gone after a cut, and so is a rename not followed by a directory
// sync; a torn cut keeps the first changes it is told to.
func TestUnsyncedEntryLost(t *testing.T) {
	fsys, backing := mount(t)
	f, err := os.Create(filepath.Join(fsys.Dir(), "new"))
	if err != nil {
		t.Fatal(err)
	}
	write(t, f, 0, "synced, but not its name")
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	crash(t, fsys, Drop{})
	if got := content(t, filepath.Join(backing, "new")); got != "<none>" {
		t.Errorf("a file whose directory was never synced holds %q after the cut, want it gone", got)
	}

	fsys = remount(t, backing)
	if err := os.WriteFile(filepath.Join(fsys.Dir(), "old"), []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err = os.OpenFile(filepath.Join(fsys.Dir(), "old"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	syncDir(t, fsys.Dir())
	if err := os.WriteFile(filepath.Join(fsys.Dir(), "tmp"), []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(fsys.Dir(), "tmp"), filepath.Join(fsys.Dir(), "old")); err != nil {
		t.Fatal(err)
	}
	// Torn: the create reaches the disk, the rename does not; the new
	// file's data, never synced, keeps 2 bytes.
	crash(t, fsys, keep{file: 0, bytes: 2, dir: 1})
	if got := content(t, filepath.Join(backing, "old")); got != "old" {
		t.Errorf("old holds %q after a cut that kept no rename, want %q", got, "old")
	}
	if got := content(t, filepath.Join(backing, "tmp")); got != "ne" {
		t.Errorf("tmp holds %q after a cut that kept its create and 2 bytes of its write, want %q", got, "ne")
	}
}

// TestCutAtOperation: a trigger cuts at the chosen operation, which never
// completes, nor does any after it; what it would have synced is lost.
func TestCutAtOperation(t *testing.T) {
	fsys, backing := mount(t)
	f, err := os.Create(filepath.Join(fsys.Dir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	syncDir(t, fsys.Dir())
	cut := fsys.CutWhen(func(op Op) bool { return op.Kind == Sync && op.N == 2 })
	write(t, f, 0, "one")
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	write(t, f, 3, "two")
	synced := make(chan error, 1)
	go func() { synced <- f.Sync() }()
	op := <-cut
	if op.Kind != Sync || op.N != 2 || op.Name != "log" || op.Size != 6 {
		t.Errorf("the cut came at %v, want the second sync of log, at size 6", op)
	}
	select {
	case err := <-synced:
		t.Fatalf("the sync the power was cut at answered (%v) before the crash", err)
	default:
	}
	fsys.Release()
	if err := <-synced; !errors.Is(err, syscall.EIO) {
		t.Errorf("the cut sync answered %v, want EIO", err)
	}
	if _, err := f.WriteAt([]byte("three"), 6); !errors.Is(err, syscall.EIO) {
		t.Errorf("a write after the cut answered %v, want EIO", err)
	}
	_ = f.Close()
	report, err := fsys.Crash(Drop{}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after the cut: %q", report)
	if got := content(t, filepath.Join(backing, "log")); got != "one" {
		t.Errorf("log holds %q after a cut at its second sync, want %q", got, "one")
	}
}

// TestLie: syncs that lie make nothing durable.
func TestLie(t *testing.T) {
	fsys, backing := mount(t)
	fsys.Lie(true)
	f, err := os.Create(filepath.Join(fsys.Dir(), "a"))
	if err != nil {
		t.Fatal(err)
	}
	write(t, f, 0, "acknowledged")
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	syncDir(t, fsys.Dir())
	crash(t, fsys, Drop{})
	if got := content(t, filepath.Join(backing, "a")); got != "<none>" {
		t.Errorf("a holds %q after a cut whose syncs lied, want it gone", got)
	}
}
