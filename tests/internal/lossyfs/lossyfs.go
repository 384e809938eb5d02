// Package lossyfs is a FUSE file system for power-loss tests: one flat
// directory that passes every operation through to a backing directory and
// keeps, beside it, what a disk would still hold if the power went now.
//
// A file's content survives a power cut as of its last fsync or fdatasync;
// what was written or truncated since is kept in memory, in order, and is
// lost at a cut, or torn (a prefix of it kept), as the caller chooses. The
// directory survives as of its last fsync: a file created, renamed or
// removed since is not (or, torn, only the first of those changes are).
// That is what POSIX promises and no more: an fsync of a new file does not
// make its name durable, a rename is not durable until its directory is
// synced.
//
// The test process serves the file system itself. It counts every
// operation by kind, and a trigger (CutWhen) cuts the power at a chosen one:
// from then on nothing more becomes durable, and every operation, the one
// that matched included, blocks until the process that made it is killed
// (or Crash), then fails with EIO, so the process never learns how its last
// operation went. Crash then unmounts and rewrites the backing directory as
// the disk would be after the power came back; mounting it again is the
// machine's next boot.
//
// Lie makes fsync and fdatasync answer success without making anything
// durable: the disk that loses acknowledged data, which a test uses to show
// that it would notice.
package lossyfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Kind is a kind of operation the file system counts.
type Kind int

// The kinds of operations counted.
const (
	Write    Kind = iota + 1 // a write to a file
	Truncate                 // a file's size set: truncate, or an open with O_TRUNC
	Sync                     // fsync or fdatasync of a file
	Create                   // a file created in the directory
	Rename                   // a file renamed, over another or not
	Unlink                   // a file removed
	DirSync                  // fsync of the directory
)

func (k Kind) String() string {
	switch k {
	case Write:
		return "write"
	case Truncate:
		return "truncate"
	case Sync:
		return "sync"
	case Create:
		return "create"
	case Rename:
		return "rename"
	case Unlink:
		return "unlink"
	case DirSync:
		return "dirsync"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Op is an operation as the file system saw it.
type Op struct {
	Kind Kind
	Name string // the file's name; a Rename's new name; "" for a DirSync
	From string // a Rename's old name
	Off  int64  // a Write's offset; a Truncate's new size
	Len  int    // a Write's length
	Size int64  // the file's size before the operation
	N    int    // its number among the operations of its kind since the mount, from 1
}

func (op Op) String() string {
	switch op.Kind {
	case Write:
		return fmt.Sprintf("write #%d: %s, %d bytes at %d (size %d)", op.N, op.Name, op.Len, op.Off, op.Size)
	case Truncate:
		return fmt.Sprintf("truncate #%d: %s to %d (size %d)", op.N, op.Name, op.Off, op.Size)
	case Rename:
		return fmt.Sprintf("rename #%d: %s to %s", op.N, op.From, op.Name)
	case DirSync:
		return fmt.Sprintf("dirsync #%d", op.N)
	}
	return fmt.Sprintf("%s #%d: %s (size %d)", op.Kind, op.N, op.Name, op.Size)
}

// FS is a mounted lossy file system.
type FS struct {
	dir, backing, shadow string
	server               *fuse.Server

	mu       sync.Mutex
	nextID   uint64
	names    map[string]*file // the directory now, as the backing directory holds it
	durable  map[string]*file // the directory as of its last sync
	dirOps   []dirOp          // the directory's changes since its last sync
	files    []*file          // every file of this mount, to close at the end
	counts   map[Kind]int
	trigger  func(Op) bool
	cut      chan Op
	frozen   bool
	unblock  chan struct{}
	lie      bool
	released bool
}

// file is one file (an inode) of the mount.
type file struct {
	id       uint64
	name     string   // its name now, or the last it had
	f        *os.File // the backing file, open while mounted
	shadow   string   // its durable content
	unsynced []change // since its last sync, in order
}

// change is a write (data at off) or a truncation (to off) not yet synced.
type change struct {
	off      int64
	data     []byte
	truncate bool
}

// dirOp is a change to the directory not yet synced.
type dirOp struct {
	kind       Kind // Create, Rename or Unlink
	name, from string
	f          *file
}

// Available is nil where a mount can be made, else why not: FUSE needs
// root, /dev/fuse and fusermount3 (Debian's fuse3, which scripts/tools.sh
// installs).
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("mounting FUSE needs root")
	}
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("FUSE is not available: %w", err)
	}
	_ = f.Close()
	if _, err := exec.LookPath("fusermount3"); err != nil {
		return errors.New("fusermount3 is missing: install Debian's fuse3 (bash scripts/tools.sh does)")
	}
	return nil
}

// Mount mounts the file system on dir over the files of backing (a flat
// directory of regular files, all of which are taken as durable).
func Mount(dir, backing string) (*FS, error) {
	shadow, err := os.MkdirTemp("", "lossyfs-shadow-")
	if err != nil {
		return nil, err
	}
	fsys := &FS{
		dir: dir, backing: backing, shadow: shadow,
		names: map[string]*file{}, durable: map[string]*file{},
		counts: map[Kind]int{}, cut: make(chan Op, 1), unblock: make(chan struct{}),
		nextID: 100,
	}
	ents, err := os.ReadDir(backing)
	if err != nil {
		_ = os.RemoveAll(shadow)
		return nil, err
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			fsys.close()
			return nil, fmt.Errorf("lossyfs: %s holds %s, which is not a regular file", backing, e.Name())
		}
		f, err := fsys.newFile(e.Name())
		if err == nil {
			err = copyFile(f.shadow, filepath.Join(backing, e.Name()))
		}
		if err != nil {
			fsys.close()
			return nil, err
		}
		fsys.names[e.Name()] = f
		fsys.durable[e.Name()] = f
	}
	timeout := time.Second
	server, err := fs.Mount(dir, &root{fsys: fsys}, &fs.Options{
		MountOptions: fuse.MountOptions{
			FsName: "lossyfs", Name: "lossyfs",
			DisableXAttrs: true, DisableReadDirPlus: true,
		},
		EntryTimeout: &timeout, AttrTimeout: &timeout,
	})
	if err != nil {
		fsys.close()
		return nil, fmt.Errorf("lossyfs: mount %s: %w", dir, err)
	}
	fsys.server = server
	return fsys, nil
}

// newFile opens (creating) the backing file name and makes its empty shadow.
func (fsys *FS) newFile(name string) (*file, error) {
	fsys.nextID++
	f := &file{id: fsys.nextID, name: name, shadow: filepath.Join(fsys.shadow, fmt.Sprint(fsys.nextID))}
	var err error
	if f.f, err = os.OpenFile(filepath.Join(fsys.backing, name), os.O_RDWR|os.O_CREATE, 0o600); err != nil {
		return nil, err
	}
	fsys.files = append(fsys.files, f)
	if err := os.WriteFile(f.shadow, nil, 0o600); err != nil {
		return nil, err
	}
	return f, nil
}

// CutWhen arms the trigger: the power is cut at the first operation for
// which it answers true (it is called with each one, in order, under the
// file system's lock). The returned channel receives that operation.
// Operations are counted whether or not a trigger is armed.
func (fsys *FS) CutWhen(trigger func(Op) bool) <-chan Op {
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	fsys.trigger = trigger
	return fsys.cut
}

// Cut cuts the power now, if a trigger has not already.
func (fsys *FS) Cut() {
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	fsys.frozen = true
}

// Lie sets whether fsync and fdatasync make anything durable (false) or
// only answer that they did (true).
func (fsys *FS) Lie(lie bool) {
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	fsys.lie = lie
}

// Count is how many operations of the kind the mount has seen.
func (fsys *FS) Count(k Kind) int {
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	return fsys.counts[k]
}

// Dir is where the file system is mounted.
func (fsys *FS) Dir() string { return fsys.dir }

// enterLocked counts op and says whether the power is cut at it.
func (fsys *FS) enterLocked(op *Op) bool {
	fsys.counts[op.Kind]++
	op.N = fsys.counts[op.Kind]
	if fsys.trigger == nil || !fsys.trigger(*op) {
		return false
	}
	fsys.frozen = true
	fsys.trigger = nil
	fsys.cut <- *op
	return true
}

// blocked is every operation once the power is cut: it waits until the
// process that made it is being killed (its request interrupted) or Crash
// releases it, and fails.
func (fsys *FS) blocked(ctx context.Context) syscall.Errno {
	select {
	case <-fsys.unblock:
	case <-ctx.Done():
	}
	return syscall.EIO
}

// gate locks the file system for an operation, or, once the power is cut,
// blocks and returns the operation's error (with the lock not held).
func (fsys *FS) gate(ctx context.Context) syscall.Errno {
	fsys.mu.Lock()
	if fsys.frozen {
		fsys.mu.Unlock()
		return fsys.blocked(ctx)
	}
	return 0
}

// Policy says what of the unsynced state a power cut keeps.
type Policy interface {
	// File is how many of a file's unsynced changes reach the disk
	// (0 to len), and of the next one (a write), how many bytes.
	File(name string, unsynced []Change) (keep, bytes int)
	// Dir is how many of the directory's unsynced changes reach the disk.
	Dir(unsynced []DirChange) int
}

// Change is an unsynced write (Len bytes at Off) or truncation (to Off),
// as a Policy sees it.
type Change struct {
	Truncate bool
	Off      int64
	Len      int
}

func (c Change) String() string {
	if c.Truncate {
		return fmt.Sprintf("truncate to %d", c.Off)
	}
	return fmt.Sprintf("%d bytes at %d", c.Len, c.Off)
}

// DirChange is an unsynced change of the directory, as a Policy sees it.
type DirChange struct {
	Kind       Kind
	Name, From string
}

func (c DirChange) String() string {
	if c.Kind == Rename {
		return fmt.Sprintf("rename %s to %s", c.From, c.Name)
	}
	return fmt.Sprintf("%s %s", c.Kind, c.Name)
}

// Drop is the policy that keeps nothing unsynced.
type Drop struct{}

func (Drop) File(string, []Change) (int, int) { return 0, 0 }
func (Drop) Dir([]DirChange) int              { return 0 }

// Tear is the policy that keeps a random prefix of each file's unsynced
// changes (ending, maybe, in part of a write) and of the directory's.
type Tear struct{ Rand *rand.Rand }

func (p Tear) File(_ string, unsynced []Change) (int, int) {
	n := p.Rand.IntN(len(unsynced) + 1)
	if n < len(unsynced) && !unsynced[n].Truncate && unsynced[n].Len > 1 {
		return n, p.Rand.IntN(unsynced[n].Len)
	}
	return n, 0
}

func (p Tear) Dir(unsynced []DirChange) int { return p.Rand.IntN(len(unsynced) + 1) }

// Crash ends a mount after its power was cut (Cut or a trigger): it
// releases the blocked operations, unmounts once the processes using the
// file system are gone (waiting up to wait), and rewrites the backing
// directory as the disk would hold it after the cut, with what policy keeps
// of the unsynced state. It returns a line for each file and the directory
// saying what was kept.
func (fsys *FS) Crash(policy Policy, wait time.Duration) ([]string, error) {
	fsys.mu.Lock()
	if !fsys.frozen {
		fsys.mu.Unlock()
		return nil, errors.New("lossyfs: Crash before the power was cut")
	}
	fsys.mu.Unlock()
	fsys.Release()
	if err := fsys.unmount(wait); err != nil {
		return nil, err
	}
	defer fsys.close()
	return fsys.restore(policy)
}

// Release answers every operation blocked since the cut, and those to
// come, with EIO, as a killed process's would be: a process that has not
// been killed sees them fail.
func (fsys *FS) Release() {
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	if !fsys.released {
		fsys.released = true
		close(fsys.unblock)
	}
}

// Unmount unmounts a mount whose power was not cut, leaving the backing
// directory as it is (everything written is there, synced or not).
func (fsys *FS) Unmount(wait time.Duration) error {
	fsys.Release()
	if fsys.server == nil {
		return nil
	}
	err := fsys.unmount(wait)
	fsys.close()
	return err
}

// unmount unmounts, trying again while the mount is busy (a killed process
// whose files are not yet closed) until wait has passed.
func (fsys *FS) unmount(wait time.Duration) error {
	if fsys.server == nil {
		return nil
	}
	deadline := time.Now().Add(wait)
	for {
		err := fsys.server.Unmount()
		if err == nil {
			fsys.server.Wait()
			fsys.server = nil
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("lossyfs: unmount %s: %w", fsys.dir, err)
		}
	}
}

// close closes the backing files and removes the shadows.
func (fsys *FS) close() {
	for _, f := range fsys.files {
		_ = f.f.Close()
	}
	fsys.files = nil
	_ = os.RemoveAll(fsys.shadow)
}

// restore rewrites the backing directory as the power cut left it.
func (fsys *FS) restore(policy Policy) ([]string, error) {
	var report []string
	dir := cloneDir(fsys.durable)
	changes := make([]DirChange, len(fsys.dirOps))
	for i, op := range fsys.dirOps {
		changes[i] = DirChange{Kind: op.kind, Name: op.name, From: op.from}
	}
	keep := 0
	if len(changes) > 0 {
		keep = min(max(policy.Dir(changes), 0), len(changes))
		report = append(report, fmt.Sprintf("directory: kept %d of %d unsynced changes %v", keep, len(changes), changes))
	}
	for _, op := range fsys.dirOps[:keep] {
		switch op.kind {
		case Create:
			dir[op.name] = op.f
		case Rename:
			dir[op.name] = dir[op.from]
			delete(dir, op.from)
		case Unlink:
			delete(dir, op.name)
		}
	}
	ents, err := os.ReadDir(fsys.backing)
	if err != nil {
		return report, err
	}
	for _, e := range ents {
		if err := os.Remove(filepath.Join(fsys.backing, e.Name())); err != nil {
			return report, err
		}
	}
	names := make([]string, 0, len(dir))
	for name := range dir {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		f := dir[name]
		if f == nil {
			continue // renamed from a name the disk did not hold
		}
		if len(f.unsynced) > 0 {
			seen := make([]Change, len(f.unsynced))
			for i, c := range f.unsynced {
				seen[i] = Change{Truncate: c.truncate, Off: c.off, Len: len(c.data)}
			}
			n, bytes := policy.File(name, seen)
			n = min(max(n, 0), len(seen))
			kept := append([]change(nil), f.unsynced[:n]...)
			line := fmt.Sprintf("%s: kept %d of %d unsynced changes", name, n, len(seen))
			if n < len(seen) && !f.unsynced[n].truncate && bytes > 0 {
				c := f.unsynced[n]
				bytes = min(bytes, len(c.data))
				kept = append(kept, change{off: c.off, data: c.data[:bytes]})
				line += fmt.Sprintf(" and %d of %d bytes of the next (at %d)", bytes, len(c.data), c.off)
			}
			report = append(report, line+fmt.Sprintf(" %v", seen))
			if err := apply(f.shadow, kept); err != nil {
				return report, err
			}
		}
		if err := copyFile(filepath.Join(fsys.backing, name), f.shadow); err != nil {
			return report, err
		}
	}
	return report, nil
}

// cloneDir is a copy of a directory's entries.
func cloneDir(m map[string]*file) map[string]*file {
	out := make(map[string]*file, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// apply makes changes to the file at path, in order.
func apply(path string, changes []change) error {
	if len(changes) == 0 {
		return nil
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	for _, c := range changes {
		if c.truncate {
			err = f.Truncate(c.off)
		} else {
			_, err = f.WriteAt(c.data, c.off)
		}
		if err != nil {
			_ = f.Close()
			return err
		}
	}
	return f.Close()
}

// copyFile makes dst a copy of src.
func copyFile(dst, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

// errno is err's errno, EIO when it has none.
func errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return syscall.EIO
}

// sortedNamesLocked is the directory's names now, in order.
func (fsys *FS) sortedNamesLocked() []string {
	names := make([]string, 0, len(fsys.names))
	for name := range fsys.names {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}
