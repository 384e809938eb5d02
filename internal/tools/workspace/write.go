package workspace

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/reinhq/rein/internal/tools"
)

// Bounds on what a write reads of the file it replaces, so that a proposal
// over a file of any size is made in bounded memory.
const (
	// maxPreviewFile is the largest file whose content a write reads whole
	// to diff it. Over it, fs.write streams the file through SHA-256 (its
	// preview is a summary: sizes and hashes, no diff) and fs.patch refuses.
	maxPreviewFile = 1 << 20
	// maxDiffBytes is the largest diff a preview carries; a longer one is
	// left out and the preview says so (sizes and hashes still bind the
	// write). The harness stores a preview over its inline bound as a blob.
	maxDiffBytes = 1 << 20
)

// change is a write worked out against the file as it is now.
type change struct {
	rel, target string // as given; resolved, relative to the root
	existed     bool
	mode        fs.FileMode
	// old is the file's content, nil when the file is over maxPreviewFile
	// (only its hash and size were read: unread).
	old      []byte
	unread   bool
	oldSize  int64
	baseHash string // of the file; "" when the file does not exist
}

// load resolves the path of a write and reads the file as it is now.
func (w *Workspace) load(root *os.Root, tool string, args map[string]*structpb.Value) (change, error) {
	var c change
	rel, err := stringArg(args, "path", "")
	if err != nil {
		return c, err
	}
	res, err := resolve(root, rel)
	if err != nil {
		return c, err
	}
	target := res.target
	if target == "." {
		return c, fmt.Errorf("%q is the workspace root, not a file", rel)
	}
	c.rel, c.target, c.mode = rel, target, 0o644
	f, info, err := openNode(root, target, rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if tool == "fs.patch" {
			return c, notFound(root, rel)
		}
		return c, nil
	case err != nil:
		return c, fmt.Errorf("open %q: %w", rel, pathless(err))
	}
	defer f.Close()
	if info.IsDir() {
		return c, fmt.Errorf("%q is a directory; %s writes files", rel, tool)
	}
	c.existed, c.mode, c.oldSize = true, info.Mode().Perm(), info.Size()
	if info.Size() > maxPreviewFile {
		if tool == "fs.patch" {
			return c, fmt.Errorf("%q is %d bytes, over the %d that fs.patch edits; replace it whole with fs.write", rel, info.Size(), maxPreviewFile)
		}
		// Streamed through the hash, never held: only its hash binds the
		// write, and the preview summarises it.
		c.unread = true
		if c.baseHash, c.oldSize, err = hashReader(f); err != nil {
			return c, fmt.Errorf("read %q: %w", rel, pathless(err))
		}
		return c, nil
	}
	if c.old, err = io.ReadAll(f); err != nil {
		return c, fmt.Errorf("read %q: %w", rel, pathless(err))
	}
	c.oldSize, c.baseHash = int64(len(c.old)), hashOf(c.old)
	return c, nil
}

// hashReader is the SHA-256 (hex) and size of what f holds, read in
// pieces.
func hashReader(f io.Reader) (string, int64, error) {
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// apply returns the new content of the file that c describes.
func apply(tool string, c change, args map[string]*structpb.Value) ([]byte, error) {
	switch tool {
	case "fs.write":
		content, err := stringArg(args, "content", "\x00")
		if err != nil {
			return nil, err
		}
		if content == "\x00" {
			return nil, errors.New("content is required: the whole new content of the file")
		}
		return []byte(content), nil
	case "fs.patch":
		old, err := stringArg(args, "old", "")
		if err != nil {
			return nil, err
		}
		repl, err := stringArg(args, "new", "\x00")
		if err != nil {
			return nil, err
		}
		if repl == "\x00" {
			return nil, errors.New("new is required: the text that replaces old (\"\" deletes it)")
		}
		switch n := strings.Count(string(c.old), old); n {
		case 1:
			return []byte(strings.Replace(string(c.old), old, repl, 1)), nil
		case 0:
			return nil, fmt.Errorf("old occurs 0 times in %q; it must occur exactly once: read the file with fs.read and copy the text exactly, whitespace included", c.rel)
		default:
			return nil, fmt.Errorf("old occurs %d times in %q; it must occur exactly once: include more of the surrounding text", n, c.rel)
		}
	}
	return nil, fmt.Errorf("%w: %q is not a workspace write (fs.write, fs.patch)", tools.ErrNoTool, tool)
}

// Propose implements tools.Executor: the preview of fs.write and fs.patch is
// a unified diff, with the hash of the file it was made against.
func (w *Workspace) Propose(ctx context.Context, call tools.Call) (_ *structpb.Value, err error) {
	defer func() { err = w.relative(err) }()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if call.Tool != "fs.write" && call.Tool != "fs.patch" {
		return nil, fmt.Errorf("%s only reads; grant it the read tier", call.Tool)
	}
	root, err := w.open()
	if err != nil {
		return nil, err
	}
	defer root.Close()
	args := call.Args.GetFields()
	c, err := w.load(root, call.Tool, args)
	if err != nil {
		return nil, err
	}
	// A file that holds a secret's value is not patched: whether old
	// occurs in it would say, bit by bit, what the value is.
	held := w.held(c.old)
	if held != "" && call.Tool == "fs.patch" {
		return nil, fmt.Errorf("%q holds the value of the server's secret %s, which rein never shows or matches text against, so fs.patch does not edit it; replace the file whole with fs.write, or leave it to a person", c.rel, held)
	}
	next, err := apply(call.Tool, c, args)
	if err != nil {
		return nil, err
	}
	if held == "" {
		held = w.held(next)
	}
	return structpb.NewValue(preview(c, next, held))
}

// held is the names of the server's secrets whose values content holds;
// "" for none.
func (w *Workspace) held(content []byte) string {
	if w.secrets == nil {
		return ""
	}
	return w.secrets.Find(string(content)).Names()
}

// preview is a write's preview: the unified diff with the hashes of the
// file before and after, and the new size. A write over a file too large
// to diff (maxPreviewFile), or whose diff is over maxDiffBytes, gets a
// summary instead of the diff: both sizes and both hashes, which bind the
// write as the diff does (the commit checks them), and why the diff is
// left out. So does a write whose old or new content holds the value of
// one of the server's secrets, held (the diff would show it, and its
// lines, cut apart by the diff's marks, would hide it from a redactor).
func preview(c change, next []byte, held string) map[string]any {
	target := filepath.ToSlash(c.target)
	p := map[string]any{
		"path":      c.rel,
		"target":    target,
		"base_hash": c.baseHash,
		"new_hash":  hashOf(next),
		"size":      len(next),
	}
	omit := func(why string) map[string]any {
		p["old_size"] = c.oldSize
		p["diff_omitted"] = why
		return p
	}
	if c.unread {
		return omit(fmt.Sprintf("the file is %d bytes, over the %d a preview diffs: compare the sizes and hashes", c.oldSize, maxPreviewFile))
	}
	if held != "" {
		return omit(fmt.Sprintf("the file's old or new content holds the value of the server's secret %s, which a diff would show: compare the sizes and hashes", held))
	}
	if len(next) > maxPreviewFile {
		return omit(fmt.Sprintf("the new content is %d bytes, over the %d a preview diffs: compare the sizes and hashes", len(next), maxPreviewFile))
	}
	diff := unifiedDiff(target, string(c.old), string(next), !c.existed)
	if len(diff) > maxDiffBytes {
		return omit(fmt.Sprintf("the diff is %d bytes, over the %d a preview carries: compare the sizes and hashes", len(diff), maxDiffBytes))
	}
	p["diff"] = diff
	return p
}

// proposed is what a commit needs of its proposal's preview.
type proposed struct{ target, baseHash, newHash string }

func proposalOf(call tools.Call) (proposed, error) {
	f := call.Preview.GetStructValue().GetFields()
	p := proposed{target: f["target"].GetStringValue(), baseHash: f["base_hash"].GetStringValue(), newHash: f["new_hash"].GetStringValue()}
	if p.target == "" || p.newHash == "" {
		return p, errors.New("the commit does not carry the proposal's preview (its target and hashes); propose the write again")
	}
	return p, nil
}

// Commit implements tools.Executor. It writes only if the path still
// resolves to the file the proposal named and that file still hashes as it
// did then; it writes atomically (a temporary file, then a rename), and is
// idempotent on operationID. The receipt is the file's new hash.
func (w *Workspace) Commit(ctx context.Context, call tools.Call, operationID string) (_ *structpb.Value, err error) {
	defer func() { err = w.relative(err) }()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p, err := proposalOf(call)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if r, ok := w.committed[operationID]; ok {
		return r, nil
	}
	root, err := w.open()
	if err != nil {
		return nil, err
	}
	defer root.Close()
	args := call.Args.GetFields()
	c, err := w.load(root, call.Tool, args)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", tools.ErrRefused, err)
	}
	if got := filepath.ToSlash(c.target); got != p.target {
		return nil, fmt.Errorf("%w: path %q now resolves to %q, not to %q as when proposed (a symbolic link changed); propose again", tools.ErrRefused, c.rel, got, p.target)
	}
	receipt := func(hash string) (*structpb.Value, error) {
		r, err := structpb.NewValue(map[string]any{"path": c.rel, "hash": hash})
		if err == nil {
			w.committed[operationID] = r
		}
		return r, err
	}
	if c.baseHash != p.baseHash {
		if c.baseHash == p.newHash {
			return receipt(p.newHash) // already applied
		}
		return nil, fmt.Errorf("%w: the file changed since the proposal (hash %s, proposed against %s); propose again", tools.ErrRefused, orNone(c.baseHash), orNone(p.baseHash))
	}
	next, err := apply(call.Tool, c, args)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", tools.ErrRefused, err)
	}
	if h := hashOf(next); h != p.newHash {
		return nil, fmt.Errorf("%w: the write would make hash %s, not %s as proposed; propose again", tools.ErrRefused, h, p.newHash)
	}
	if err := writeAtomic(root, c.target, next, c.mode); err != nil {
		return nil, fmt.Errorf("write %q: %w", c.rel, pathless(err))
	}
	return receipt(p.newHash)
}

// Lookup implements tools.Looker: a write was applied if this process
// committed it, or if the file now hashes as the proposal said it would.
func (w *Workspace) Lookup(ctx context.Context, call tools.Call, operationID string) (_ *structpb.Value, _ bool, err error) {
	defer func() { err = w.relative(err) }()
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if r, ok := w.committed[operationID]; ok {
		return r, true, nil
	}
	p, err := proposalOf(call)
	if err != nil {
		return nil, false, err
	}
	root, err := w.open()
	if err != nil {
		return nil, false, err
	}
	defer root.Close()
	c, err := w.load(root, "fs.write", call.Args.GetFields())
	if err != nil {
		return nil, false, err
	}
	if c.baseHash != p.newHash {
		return nil, false, nil
	}
	r, err := structpb.NewValue(map[string]any{"path": c.rel, "hash": p.newHash})
	return r, err == nil, err
}

// writeAtomic writes data to name under root: a temporary file in the same
// directory, synced, then renamed over name.
func writeAtomic(root *os.Root, name string, data []byte, mode fs.FileMode) error {
	dir := filepath.Dir(name)
	if err := root.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := filepath.Join(dir, ".rein-"+hex.EncodeToString(rnd[:])+".tmp")
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = root.Rename(tmp, name)
	}
	if werr != nil {
		_ = root.Remove(tmp)
	}
	return werr
}

func orNone(hash string) string {
	if hash == "" {
		return "none: no file"
	}
	return hash
}
