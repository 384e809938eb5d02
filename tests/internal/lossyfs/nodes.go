package lossyfs

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// root is the mount's one directory.
type root struct {
	fs.Inode
	fsys *FS
}

var (
	_ fs.NodeGetattrer      = (*root)(nil)
	_ fs.NodeStatfser       = (*root)(nil)
	_ fs.NodeMkdirer        = (*root)(nil)
	_ fs.NodeLookuper       = (*root)(nil)
	_ fs.NodeCreater        = (*root)(nil)
	_ fs.NodeRenamer        = (*root)(nil)
	_ fs.NodeUnlinker       = (*root)(nil)
	_ fs.NodeOpendirHandler = (*root)(nil)
	_ fs.FileReaddirenter   = (*dirHandle)(nil)
	_ fs.FileFsyncdirer     = (*dirHandle)(nil)
	_ fs.NodeGetattrer      = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeReader         = (*node)(nil)
	_ fs.NodeWriter         = (*node)(nil)
	_ fs.NodeFsyncer        = (*node)(nil)
	_ fs.NodeFlusher        = (*node)(nil)
	_ fs.NodeReleaser       = (*node)(nil)
	_ fs.NodeAllocater      = (*node)(nil)
	_ fs.NodeCopyFileRanger = (*node)(nil)
)

func (r *root) Getattr(ctx context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if e := r.fsys.gate(ctx); e != 0 {
		return e
	}
	defer r.fsys.mu.Unlock()
	out.Mode = syscall.S_IFDIR | 0o755
	out.Nlink = 2
	return 0
}

func (r *root) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	var st syscall.Statfs_t
	if err := syscall.Statfs(r.fsys.backing, &st); err != nil {
		return errno(err)
	}
	out.FromStatfsT(&st)
	return 0
}

func (r *root) Mkdir(context.Context, string, uint32, *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM // one flat directory
}

// child is the inode of f.
func (r *root) child(ctx context.Context, f *file, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.f.Fd()), &st); err != nil {
		return nil, errno(err)
	}
	out.Attr.FromStat(&st)
	out.Attr.Ino = f.id
	return r.NewInode(ctx, &node{fsys: r.fsys, f: f}, fs.StableAttr{Mode: syscall.S_IFREG, Ino: f.id}), 0
}

func (r *root) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if e := r.fsys.gate(ctx); e != 0 {
		return nil, e
	}
	defer r.fsys.mu.Unlock()
	f := r.fsys.names[name]
	if f == nil {
		return nil, syscall.ENOENT
	}
	return r.child(ctx, f, out)
}

func (r *root) Create(ctx context.Context, name string, flags, _ uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	fsys := r.fsys
	if e := fsys.gate(ctx); e != 0 {
		return nil, nil, 0, e
	}
	if fsys.names[name] != nil {
		fsys.mu.Unlock()
		return nil, nil, 0, syscall.EEXIST
	}
	op := Op{Kind: Create, Name: name}
	cut := fsys.enterLocked(&op)
	f, err := fsys.newFile(name)
	if err != nil {
		fsys.mu.Unlock()
		return nil, nil, 0, errno(err)
	}
	fsys.names[name] = f
	fsys.dirOps = append(fsys.dirOps, dirOp{kind: Create, name: name, f: f})
	if cut {
		fsys.mu.Unlock()
		return nil, nil, 0, fsys.blocked(ctx)
	}
	defer fsys.mu.Unlock()
	in, e := r.child(ctx, f, out)
	return in, nil, 0, e
}

func (r *root) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	fsys := r.fsys
	if flags != 0 {
		return syscall.EINVAL
	}
	if e := fsys.gate(ctx); e != 0 {
		return e
	}
	f := fsys.names[name]
	if f == nil {
		fsys.mu.Unlock()
		return syscall.ENOENT
	}
	op := Op{Kind: Rename, Name: newName, From: name, Size: size(f)}
	cut := fsys.enterLocked(&op)
	if err := os.Rename(filepath.Join(fsys.backing, name), filepath.Join(fsys.backing, newName)); err != nil {
		fsys.mu.Unlock()
		return errno(err)
	}
	delete(fsys.names, name)
	fsys.names[newName] = f
	f.name = newName
	fsys.dirOps = append(fsys.dirOps, dirOp{kind: Rename, name: newName, from: name, f: f})
	fsys.mu.Unlock()
	if cut {
		return fsys.blocked(ctx)
	}
	return 0
}

func (r *root) Unlink(ctx context.Context, name string) syscall.Errno {
	fsys := r.fsys
	if e := fsys.gate(ctx); e != 0 {
		return e
	}
	f := fsys.names[name]
	if f == nil {
		fsys.mu.Unlock()
		return syscall.ENOENT
	}
	op := Op{Kind: Unlink, Name: name, Size: size(f)}
	cut := fsys.enterLocked(&op)
	if err := os.Remove(filepath.Join(fsys.backing, name)); err != nil {
		fsys.mu.Unlock()
		return errno(err)
	}
	delete(fsys.names, name)
	fsys.dirOps = append(fsys.dirOps, dirOp{kind: Unlink, name: name, f: f})
	fsys.mu.Unlock()
	if cut {
		return fsys.blocked(ctx)
	}
	return 0
}

func (r *root) OpendirHandle(ctx context.Context, _ uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if e := r.fsys.gate(ctx); e != 0 {
		return nil, 0, e
	}
	defer r.fsys.mu.Unlock()
	h := &dirHandle{fsys: r.fsys}
	for _, name := range r.fsys.sortedNamesLocked() {
		h.ents = append(h.ents, fuse.DirEntry{Name: name, Mode: syscall.S_IFREG, Ino: r.fsys.names[name].id})
	}
	return h, 0, 0
}

// dirHandle is the directory opened: its entries as they were then, and
// its fsync.
type dirHandle struct {
	fsys *FS
	ents []fuse.DirEntry
}

func (h *dirHandle) Readdirent(context.Context) (*fuse.DirEntry, syscall.Errno) {
	if len(h.ents) == 0 {
		return nil, 0
	}
	e := h.ents[0]
	h.ents = h.ents[1:]
	return &e, 0
}

func (h *dirHandle) Fsyncdir(ctx context.Context, _ uint32) syscall.Errno {
	fsys := h.fsys
	if e := fsys.gate(ctx); e != 0 {
		return e
	}
	op := Op{Kind: DirSync}
	if fsys.enterLocked(&op) {
		fsys.mu.Unlock()
		return fsys.blocked(ctx)
	}
	defer fsys.mu.Unlock()
	if !fsys.lie {
		fsys.durable = cloneDir(fsys.names)
		fsys.dirOps = nil
	}
	return 0
}

// node is a file.
type node struct {
	fs.Inode
	fsys *FS
	f    *file
}

// size is f's size now, -1 if it cannot be told.
func size(f *file) int64 {
	info, err := f.f.Stat()
	if err != nil {
		return -1
	}
	return info.Size()
}

func (n *node) Getattr(ctx context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if e := n.fsys.gate(ctx); e != 0 {
		return e
	}
	defer n.fsys.mu.Unlock()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(n.f.f.Fd()), &st); err != nil {
		return errno(err)
	}
	out.FromStat(&st)
	out.Ino = n.f.id
	return 0
}

func (n *node) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if sz, ok := in.GetSize(); ok {
		if e := n.truncate(ctx, int64(sz)); e != 0 {
			return e
		}
	}
	return n.Getattr(ctx, fh, out)
}

// truncate sets the file's size, as an unsynced change.
func (n *node) truncate(ctx context.Context, sz int64) syscall.Errno {
	fsys := n.fsys
	if e := fsys.gate(ctx); e != 0 {
		return e
	}
	op := Op{Kind: Truncate, Name: n.f.name, Off: sz, Size: size(n.f)}
	cut := fsys.enterLocked(&op)
	if err := n.f.f.Truncate(sz); err != nil {
		fsys.mu.Unlock()
		return errno(err)
	}
	n.f.unsynced = append(n.f.unsynced, change{off: sz, truncate: true})
	fsys.mu.Unlock()
	if cut {
		return fsys.blocked(ctx)
	}
	return 0
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&syscall.O_TRUNC != 0 {
		if e := n.truncate(ctx, 0); e != 0 {
			return nil, 0, e
		}
	}
	if e := n.fsys.gate(ctx); e != 0 {
		return nil, 0, e
	}
	n.fsys.mu.Unlock()
	return nil, 0, 0
}

func (n *node) Read(ctx context.Context, _ fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if e := n.fsys.gate(ctx); e != 0 {
		return nil, e
	}
	defer n.fsys.mu.Unlock()
	got, err := n.f.f.ReadAt(dest, off)
	if err != nil && got == 0 && !errors.Is(err, io.EOF) {
		return nil, errno(err)
	}
	return fuse.ReadResultData(dest[:got]), 0
}

func (n *node) Write(ctx context.Context, _ fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	fsys := n.fsys
	if e := fsys.gate(ctx); e != 0 {
		return 0, e
	}
	op := Op{Kind: Write, Name: n.f.name, Off: off, Len: len(data), Size: size(n.f)}
	cut := fsys.enterLocked(&op)
	w, err := n.f.f.WriteAt(data, off)
	if w > 0 {
		n.f.unsynced = append(n.f.unsynced, change{off: off, data: append([]byte(nil), data[:w]...)})
	}
	fsys.mu.Unlock()
	if cut {
		return 0, fsys.blocked(ctx)
	}
	return uint32(w), errno(err)
}

func (n *node) Fsync(ctx context.Context, _ fs.FileHandle, _ uint32) syscall.Errno {
	fsys := n.fsys
	if e := fsys.gate(ctx); e != 0 {
		return e
	}
	op := Op{Kind: Sync, Name: n.f.name, Size: size(n.f)}
	if fsys.enterLocked(&op) {
		fsys.mu.Unlock()
		return fsys.blocked(ctx)
	}
	defer fsys.mu.Unlock()
	if fsys.lie {
		return 0
	}
	if err := apply(n.f.shadow, n.f.unsynced); err != nil {
		return errno(err)
	}
	n.f.unsynced = nil
	return 0
}

// Flush and Release hold nothing: a file's state is its inode's.
func (n *node) Flush(context.Context, fs.FileHandle) syscall.Errno   { return 0 }
func (n *node) Release(context.Context, fs.FileHandle) syscall.Errno { return 0 }

// Allocate and CopyFileRange are refused: neither rein nor bbolt use them,
// and the file system would have to keep them as changes.
func (n *node) Allocate(context.Context, fs.FileHandle, uint64, uint64, uint32) syscall.Errno {
	return syscall.EOPNOTSUPP
}

func (n *node) CopyFileRange(context.Context, fs.FileHandle, uint64, *fs.Inode, fs.FileHandle, uint64, uint64, uint64) (uint32, syscall.Errno) {
	return 0, syscall.EOPNOTSUPP
}
