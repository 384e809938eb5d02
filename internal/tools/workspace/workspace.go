// Package workspace provides file tools over one directory, the workspace
// root: fs.read, fs.list and fs.search read; fs.write and fs.patch write,
// proposing a unified diff and committing only if the file still hashes as
// it did when proposed.
//
// Invariants: every path a tool is given resolves inside the root, symbolic
// links included; an absolute path, a path that climbs out with "..", and a
// link that leads out are refused with an error that says why. All file I/O
// goes through an os.Root, so that even a link swapped between the check and
// the access cannot make a tool read or write a byte outside the root. A
// commit re-resolves its path and refuses if it no longer names the file
// the proposal did. Only regular files are read or written, and directories
// listed: a FIFO, a socket or a device is refused without waiting on it,
// and so is a regular file with other hard links (open.go says why). A
// path has limits (maxPathBytes, maxPathComponents) and resolves in time
// linear in its length. Errors are written for the model: they name paths
// as the model gave them, never the absolute root; a missing path names
// the nearest existing ones, and cut output says how to read the rest.
//
// No tool shows a piece of a value of the server's secrets (New's secrets),
// though each shows only part of a file: fs.read and fs.search cut what
// they show with secret.Spans.Slice, over enough of the file around it to
// find every value that shares a byte with it, so a value cut by the slice
// or the clipped line is replaced as a whole one is, and fs.search matches
// its pattern against the lines as shown, so it cannot find a value bit by
// bit. fs.patch does not edit a file that holds one (its old would be
// matched against the value), and a write's preview leaves out the diff
// of a file that does.
package workspace

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/reinhq/rein/internal/secret"
	"github.com/reinhq/rein/internal/tools"
)

// Limits of the tools.
const (
	defaultReadLimit = 64 << 10 // bytes fs.read returns by default
	maxReadLimit     = 1 << 20  // the most fs.read returns at once
	maxSearchFile    = 1 << 20  // fs.search skips larger files
	maxMatches       = 100      // fs.search returns at most this many matches
	maxMatchText     = 240      // bytes of a matching line fs.search returns
)

// Workspace is a tools.Executor whose tools work on the files under a root.
type Workspace struct {
	root string // absolute, with no symbolic links
	// secrets are the server's, whose values no tool shows; nil shows
	// every file as it is.
	secrets *secret.Redactor

	// mu serializes commits and guards committed.
	mu sync.Mutex
	// committed maps an operation ID to its receipt: a second commit with
	// the same ID writes nothing, and Lookup answers from it.
	committed map[string]*structpb.Value
}

var (
	_ tools.Executor = (*Workspace)(nil)
	_ tools.Looker   = (*Workspace)(nil)
)

// New returns a workspace over root, which must be an existing directory,
// whose tools show no value of secrets (the server's; nil for none).
func New(root string, secrets *secret.Redactor) (*Workspace, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("workspace root %s: %w", root, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("workspace root %s: %w", root, err)
	}
	info, err := os.Stat(real)
	if err != nil {
		return nil, fmt.Errorf("workspace root %s: %w", root, err)
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("workspace root %s is not a directory", root)
	}
	return &Workspace{root: real, secrets: secrets, committed: map[string]*structpb.Value{}}, nil
}

// Root is the workspace's root directory, absolute and without links.
func (w *Workspace) Root() string { return w.root }

// open opens the root for one call; its error names no absolute path.
func (w *Workspace) open() (*os.Root, error) {
	root, err := os.OpenRoot(w.root)
	if err != nil {
		return nil, fmt.Errorf("the workspace root cannot be opened: %w", pathless(err))
	}
	return root, nil
}

// List implements tools.Executor.
func (w *Workspace) List(context.Context) ([]tools.Spec, error) {
	out := make([]tools.Spec, 0, len(specs))
	for _, s := range specs {
		schema, err := structpb.NewStruct(s.schema)
		if err != nil {
			return nil, err
		}
		out = append(out, tools.Spec{Name: s.name, Description: s.description, InputSchema: schema, Server: "workspace"})
	}
	return out, nil
}

// Read implements tools.Executor: fs.read, fs.list and fs.search.
func (w *Workspace) Read(ctx context.Context, call tools.Call) (_ *structpb.Value, err error) {
	defer func() { err = w.relative(err) }()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	root, err := w.open()
	if err != nil {
		return nil, err
	}
	defer root.Close()
	args := call.Args.GetFields()
	switch call.Tool {
	case "fs.read":
		return w.read(root, args)
	case "fs.list":
		return w.list(root, args)
	case "fs.search":
		return w.search(ctx, root, args)
	case "fs.write", "fs.patch":
		return nil, fmt.Errorf("%s is a write and runs only through a proposal; grant it the write tier", call.Tool)
	}
	return nil, fmt.Errorf("%w: %q (the workspace provides fs.read, fs.list, fs.search, fs.write, fs.patch)", tools.ErrNoTool, call.Tool)
}

func (w *Workspace) read(root *os.Root, args map[string]*structpb.Value) (*structpb.Value, error) {
	rel, err := stringArg(args, "path", "")
	if err != nil {
		return nil, err
	}
	offset, err := intArg(args, "offset", 0)
	if err != nil {
		return nil, err
	}
	limit, err := intArg(args, "limit", defaultReadLimit)
	if err != nil {
		return nil, err
	}
	if limit <= 0 || limit > maxReadLimit {
		return nil, fmt.Errorf("limit %d is out of range; give 1 to %d bytes", limit, maxReadLimit)
	}
	res, err := resolve(root, rel)
	if err != nil {
		return nil, err
	}
	f, info, err := openNode(root, res.target, rel)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, notFound(root, rel)
	}
	if err != nil {
		return nil, fmt.Errorf("open %q: %w", rel, pathless(err))
	}
	defer f.Close()
	if info.IsDir() {
		return nil, fmt.Errorf("%q is a directory; list it with fs.list {\"path\": %q}", rel, rel)
	}
	size := info.Size()
	if offset < 0 || offset > size {
		return nil, fmt.Errorf("offset %d is outside %q, which has %d bytes", offset, rel, size)
	}
	// The slice is read with the bytes around it where a secret's value
	// that shares a byte with it may lie (none without secrets).
	end := offset + min(limit, size-offset)
	margin := int64(max(w.secrets.MaxLen()-1, 0))
	from, to := max(offset-margin, 0), min(end+margin, size)
	around := make([]byte, to-from)
	if _, err := f.ReadAt(around, from); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read %q: %w", rel, pathless(err))
	}
	buf := around[offset-from : end-from]
	cut := end < size
	// Do not split a character at the cut.
	for k := 0; cut && k < utf8.UTFMax-1 && len(buf) > 0 && !utf8.Valid(buf); k++ {
		buf = buf[:len(buf)-1]
	}
	if !utf8.Valid(buf) || strings.IndexByte(string(buf), 0) >= 0 {
		return nil, fmt.Errorf("%q is not UTF-8 text (a binary file?) at bytes %d to %d; fs.read returns text only", rel, offset, offset+int64(len(buf)))
	}
	out := map[string]any{"path": rel, "content": string(buf), "size": size}
	if w.secrets != nil {
		text, at := string(around), int(offset-from)
		if in := w.secrets.Find(text).Within(at, at+len(buf)); len(in) > 0 {
			out["content"] = in.Slice(text, at, at+len(buf))
			out["redacted"] = readRedacted(in.Names())
		}
	}
	if offset > 0 {
		out["offset"] = offset
	}
	if cut {
		next := offset + int64(len(buf))
		out["next_offset"] = next
		out["note"] = fmt.Sprintf("cut: this is bytes %d to %d of %d; read the rest with fs.read {\"path\": %q, \"offset\": %d}", offset, next, size, rel, next)
	}
	return structpb.NewValue(out)
}

func (w *Workspace) list(root *os.Root, args map[string]*structpb.Value) (*structpb.Value, error) {
	rel, err := stringArg(args, "path", ".")
	if err != nil {
		return nil, err
	}
	res, err := resolve(root, rel)
	if err != nil {
		return nil, err
	}
	f, info, err := openNode(root, res.target, rel)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, notFound(root, rel)
	}
	if err != nil {
		return nil, fmt.Errorf("open %q: %w", rel, pathless(err))
	}
	defer f.Close()
	if !info.IsDir() {
		return nil, fmt.Errorf("%q is a file, not a directory; read it with fs.read {\"path\": %q}", rel, rel)
	}
	dirents, err := f.ReadDir(-1)
	if err != nil {
		return nil, fmt.Errorf("list %q: %w", rel, pathless(err))
	}
	// ReadDir of a file does not sort; sort by name.
	sortDirents(dirents)
	entries := make([]any, 0, len(dirents))
	for _, d := range dirents {
		e := map[string]any{"name": d.Name(), "dir": d.IsDir()}
		if info, err := d.Info(); err == nil && !d.IsDir() {
			e["size"] = info.Size()
		}
		if d.Type()&fs.ModeSymlink != 0 {
			e["symlink"] = true
		}
		entries = append(entries, e)
	}
	return structpb.NewValue(map[string]any{"path": rel, "entries": entries})
}

func (w *Workspace) search(ctx context.Context, root *os.Root, args map[string]*structpb.Value) (*structpb.Value, error) {
	pattern, err := stringArg(args, "pattern", "")
	if err != nil {
		return nil, err
	}
	rel, err := stringArg(args, "path", ".")
	if err != nil {
		return nil, err
	}
	res, err := resolve(root, rel)
	if err != nil {
		return nil, err
	}
	// The walk opens only directories and regular files, without waiting:
	// a FIFO swapped in for a directory cannot hold it.
	fsys := nonblocking{root}
	start := filepath.ToSlash(res.target)
	f, _, err := openNode(root, res.target, rel)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, notFound(root, rel)
	}
	if err != nil {
		return nil, fmt.Errorf("search %q: %w", rel, pathless(err))
	}
	f.Close()
	matches := []any{}
	truncated := false
	skipped := 0
	var held secret.Spans // one for each file that holds a secret's value
	err = fs.WalkDir(fsys, start, func(p string, d fs.DirEntry, err error) error {
		// A big tree is walked file by file: a call cut by its context or
		// the run's deadline stops between two of them.
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if err != nil {
			if p == start {
				return err
			}
			return nil
		}
		if d.IsDir() {
			if d.Name() == ".git" && p != start {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil // links are not followed
		}
		data, ok := searchable(root, p)
		if !ok {
			skipped++
			return nil
		}
		// Each line is matched and shown as it is with its secrets'
		// values replaced, the pieces of one cut by the line's ends too.
		spans := w.secrets.Find(data)
		if len(spans) > 0 {
			held = append(held, secret.Span{Names: spans.Names()})
		}
		at := 0
		for i, line := range strings.Split(data, "\n") {
			start := at
			at += len(line) + 1
			if in := spans.Within(start, start+len(line)); len(in) > 0 {
				line = in.Slice(data, start, start+len(line))
			}
			if !strings.Contains(line, pattern) {
				continue
			}
			if len(matches) == maxMatches {
				truncated = true
				return fs.SkipAll
			}
			matches = append(matches, map[string]any{"path": p, "line": i + 1, "text": clip(line, maxMatchText)})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("search %q: %w", rel, pathless(err))
	}
	out := map[string]any{"pattern": pattern, "path": rel, "matches": matches}
	if truncated {
		out["truncated"] = true
		out["note"] = fmt.Sprintf("cut at %d matches; search a narrower path or a longer pattern for the rest", maxMatches)
	}
	if skipped > 0 {
		out["skipped_files"] = skipped
	}
	if len(held) > 0 {
		out["redacted"] = searchRedacted(held.Names())
	}
	return structpb.NewValue(out)
}

// searchable is the text of the file p (slash-separated, under root) if
// fs.search reads it: a regular file with one link, at most maxSearchFile
// bytes, UTF-8 text without NUL bytes.
func searchable(root *os.Root, p string) (string, bool) {
	f, info, err := openNode(root, filepath.FromSlash(p), p)
	if err != nil {
		return "", false
	}
	defer f.Close()
	if !info.Mode().IsRegular() || info.Size() > maxSearchFile {
		return "", false
	}
	data, err := io.ReadAll(io.LimitReader(f, maxSearchFile+1))
	if err != nil || len(data) > maxSearchFile || strings.IndexByte(string(data), 0) >= 0 || !utf8.Valid(data) {
		return "", false
	}
	return string(data), true
}

// Why a tool's output shows "[secret NAME]" where a file holds the value of
// one of the server's secrets, names.
func readRedacted(names string) string {
	return fmt.Sprintf("this part of the file holds the value of the server's secret %s, whole or cut, shown as [secret NAME] in its place: rein never shows a secret's value, whole or in part; offset, size and next_offset count the file's own bytes", names)
}

func searchRedacted(names string) string {
	return fmt.Sprintf("files searched hold the value of the server's secret %s; their lines show [secret NAME] in its place, whole or cut, and the pattern is matched against the lines as shown, so it never matches a secret's value or a part of it", names)
}

// clip cuts s to at most n bytes, on a character boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func hashOf(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

func sortDirents(d []fs.DirEntry) {
	sort.Slice(d, func(i, j int) bool { return d[i].Name() < d[j].Name() })
}
