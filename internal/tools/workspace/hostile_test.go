//go:build unix

package workspace

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/reinhq/rein/internal/tools"
)

// bounded runs f and fails the test if it does not return before ctx ends:
// a call that hangs (a FIFO's open) or burns CPU (a quadratic walk) fails
// here instead of stalling the suite.
func bounded(t *testing.T, ctx context.Context, what string, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		t.Fatalf("%s did not return within the test's bound", what)
		return nil
	}
}

// run calls tool (a read, or a write's proposal) on w with args.
func run(ctx context.Context, t *testing.T, w *Workspace, tool string, args map[string]any) (*structpb.Value, error) {
	c := call(t, tool, args)
	if tool == "fs.write" || tool == "fs.patch" {
		return w.Propose(ctx, c)
	}
	return w.Read(ctx, c)
}

// Only regular files are read or written: a FIFO or a socket in the
// workspace is refused at once, with the reason, by every tool. Before,
// fs.read of a FIFO waited in open(2) for a writer, forever.
func TestSpecialFilesAreRefused(t *testing.T) {
	t.Parallel()
	w, root, check := setup(t)
	defer check()
	if err := syscall.Mkfifo(filepath.Join(root, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	special := map[string]string{"pipe": "named pipe (FIFO)"}
	// A socket's path must be short; skip it where the temporary directory
	// is too deep for one.
	if l, err := net.Listen("unix", filepath.Join(root, "sock")); err == nil {
		defer l.Close()
		special["sock"] = "a socket"
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for path, want := range special {
		for _, tc := range []struct {
			tool string
			args map[string]any
		}{
			{"fs.read", map[string]any{"path": path}},
			{"fs.list", map[string]any{"path": path}},
			{"fs.search", map[string]any{"path": path, "pattern": "x"}},
			{"fs.write", map[string]any{"path": path, "content": "x"}},
			{"fs.patch", map[string]any{"path": path, "old": "x", "new": "y"}},
		} {
			err := bounded(t, ctx, tc.tool+" "+path, func() error {
				_, err := run(ctx, t, w, tc.tool, tc.args)
				return err
			})
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "refused") {
				t.Errorf("%s %s: err = %v, want a refusal naming %s", tc.tool, path, err, want)
			}
		}
	}
	// The twins: a search over the tree passes the FIFO by, and a regular
	// file still reads.
	out, err := w.Read(ctx, call(t, "fs.search", map[string]any{"pattern": "hello"}))
	if err != nil || len(fields(out)["matches"].([]any)) != 2 {
		t.Errorf("search beside a FIFO = %v, %v; want the 2 matches", out, err)
	}
	out, err = w.Read(ctx, call(t, "fs.read", map[string]any{"path": "README.md"}))
	if err != nil || fields(out)["content"] != "# Demo\nhello world\n" {
		t.Errorf("fs.read of a regular file = %v, %v", out, err)
	}
}

// A path of 2,000 components is refused at once, and the longest path the
// limits allow resolves (or names its nearest paths) in bounded time. The
// bound is the test's context, not a measured duration. Before, resolving
// and hinting were quadratic and cubic in the components: 92 s of CPU.
func TestLongPathsAreBounded(t *testing.T) {
	t.Parallel()
	w, root, check := setup(t)
	defer check()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	deep := strings.Repeat("a/", maxPathComponents-1)
	if err := os.MkdirAll(filepath.Join(root, deep), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, deep, "x"), []byte("deep\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path, want string
	}{
		{"2,000 components", strings.Repeat("a/", 2000) + "x", "refused: a path has at most 1024 bytes"},
		{"65 components", strings.Repeat("a/", maxPathComponents) + "x", "refused: a path has at most 64"},
		{"2,000 bytes in one", strings.Repeat("a", 2000), "refused: a path has at most 1024 bytes"},
		{"64 components, missing", deep + "y", "nearest existing paths: " + deep + "x"},
	} {
		for _, tool := range []string{"fs.read", "fs.write"} {
			err := bounded(t, ctx, tool+" "+tc.name, func() error {
				_, err := run(ctx, t, w, tool, map[string]any{"path": tc.path, "content": "x", "pattern": "x"})
				return err
			})
			if tool == "fs.write" && tc.name == "64 components, missing" {
				if err != nil {
					t.Errorf("fs.write of a new file at the deepest path: %v", err)
				}
				continue
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s %s: err = %v, want %q", tool, tc.name, err, tc.want)
			}
		}
	}
	// The twin: the deepest path the limits allow still reads.
	var out *structpb.Value
	err := bounded(t, ctx, "fs.read of the deepest path", func() (err error) {
		out, err = w.Read(ctx, call(t, "fs.read", map[string]any{"path": deep + "x"}))
		return err
	})
	if err != nil || fields(out)["content"] != "deep\n" {
		t.Errorf("fs.read of a %d-component path = %v, %v", maxPathComponents, out, err)
	}
}

// The not-found hint lists the directory through the root: a directory
// swapped for a link out while the hint is made never names a file outside.
// Before, it was listed with os.ReadDir on its absolute path, which follows
// a link swapped in after the check. The swap races the calls, so this runs
// many rounds; on the old code the outside's file showed in a few hundred.
func TestHintNeverListsOutside(t *testing.T) {
	t.Parallel()
	w, root, check := setup(t)
	defer check()
	outside := filepath.Join(filepath.Dir(root), "outside")
	sub, real, link := filepath.Join(root, "sub"), filepath.Join(root, "sub.real"), filepath.Join(root, "sub.link")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sub, "secrets.md"), []byte("inside\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	stop, swapped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(swapped)
		for {
			select {
			case <-stop:
				return
			default:
			}
			// sub is a directory, then a link to outside, then the
			// directory again.
			_ = os.Rename(sub, real)
			_ = os.Symlink(outside, link)
			_ = os.Rename(link, sub)
			_ = os.Remove(sub)
			_ = os.Rename(real, sub)
		}
	}()
	defer func() {
		close(stop)
		<-swapped
	}()
	hinted := 0
	for i := 0; i < 10000 && ctx.Err() == nil; i++ {
		_, err := w.Read(ctx, call(t, "fs.read", map[string]any{"path": "sub/secret.tx"}))
		if err == nil {
			t.Fatal("fs.read of a missing file succeeded")
		}
		if strings.Contains(err.Error(), "secret.txt") {
			t.Fatalf("round %d: the hint names a file outside the root: %v", i, err)
		}
		if strings.Contains(err.Error(), "sub/secrets.md") {
			hinted++
		}
	}
	// The twin: with sub in place, the hint names sub's own file.
	close(stop)
	<-swapped
	stop = make(chan struct{})
	swapped = make(chan struct{})
	close(swapped)
	if _, err := os.Lstat(sub); err != nil {
		if err := os.Rename(real, sub); err != nil {
			t.Fatal(err)
		}
	}
	_ = os.Remove(link)
	_, err := w.Read(ctx, call(t, "fs.read", map[string]any{"path": "sub/secret.tx"}))
	if err == nil || !strings.Contains(err.Error(), "nearest existing paths: sub/secrets.md") {
		t.Errorf("the hint of a missing file beside sub/secrets.md: %v (it showed in %d racing rounds)", err, hinted)
	}
}

// No error a tool returns names the absolute root: paths are as the model
// gave them, relative to the workspace. Before, a root that went away
// showed its absolute path, and so did any error of an open file (os.Root's
// files name themselves by their absolute path).
func TestErrorsNameNoAbsolutePath(t *testing.T) {
	t.Parallel()
	w, root, check := setup(t)
	defer check()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := syscall.Mkfifo(filepath.Join(root, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("loop", filepath.Join(root, "loop")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(root, "README.md"), filepath.Join(root, "twin.md")); err != nil {
		t.Fatal(err)
	}
	// A root that went away: the error says so, without its path. (This
	// comes first: on the old code, the FIFO below hangs.)
	gone := filepath.Join(t.TempDir(), "gone")
	if err := os.Mkdir(gone, 0o755); err != nil {
		t.Fatal(err)
	}
	wg, err := New(gone, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(gone); err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"fs.read", "fs.write"} {
		_, err := run(ctx, t, wg, tool, map[string]any{"path": "README.md", "content": "x"})
		if err == nil || strings.Contains(err.Error(), gone) || !strings.Contains(err.Error(), "workspace root") {
			t.Errorf("%s in a removed root: err = %v, want one naming the workspace root but not its path", tool, err)
		}
	}
	parent := filepath.Dir(root)
	cases := []struct {
		tool string
		args map[string]any
	}{
		{"fs.read", map[string]any{"path": "README.md/x"}},
		{"fs.list", map[string]any{"path": "src/main.go/x"}},
		{"fs.search", map[string]any{"path": "README.md/x/y", "pattern": "x"}},
		{"fs.write", map[string]any{"path": "README.md/x", "content": "x"}},
		{"fs.read", map[string]any{"path": "nope.md"}},
		{"fs.read", map[string]any{"path": "src"}},
		{"fs.read", map[string]any{"path": "loop"}},
		{"fs.read", map[string]any{"path": "twin.md"}},
		{"fs.read", map[string]any{"path": "../outside/secret.txt"}},
		{"fs.read", map[string]any{"path": filepath.Join(parent, "outside", "secret.txt")}},
		{"fs.patch", map[string]any{"path": "nope/x.md", "old": "a", "new": "b"}},
		{"fs.read", map[string]any{"path": "pipe"}},
	}
	for _, tc := range cases {
		err := bounded(t, ctx, tc.tool, func() error {
			_, err := run(ctx, t, w, tc.tool, tc.args)
			return err
		})
		if err == nil {
			t.Errorf("%s %v: no error", tc.tool, tc.args)
			continue
		}
		// An absolute path the model gave is echoed as given; nothing else
		// may name the root.
		if p, _ := tc.args["path"].(string); !filepath.IsAbs(p) && strings.Contains(err.Error(), parent) {
			t.Errorf("%s %v: the error names the absolute root: %v", tc.tool, tc.args, err)
		}
	}
	// An error from the file system that this package does not format
	// (a full disk while writing) names the file relative to the root, and
	// still unwraps to what it wraps.
	full := w.relative(fmt.Errorf("write %q: %w", "docs/a.md", &fs.PathError{Op: "write", Path: filepath.Join(root, "docs", "a.md"), Err: syscall.ENOSPC}))
	if got, want := full.Error(), `write "docs/a.md": write docs/a.md: no space left on device`; got != want || !errors.Is(full, syscall.ENOSPC) {
		t.Errorf("relative(a full disk) = %q (Is ENOSPC: %v), want %q", got, errors.Is(full, syscall.ENOSPC), want)
	}
	c := call(t, "fs.list", map[string]any{})
	c.Tool = "fs.nope"
	if _, err := w.Read(ctx, c); !errors.Is(err, tools.ErrNoTool) {
		t.Errorf("unknown tool: err = %v, want tools.ErrNoTool", err)
	}
}

// A regular file with another hard link is neither read nor written, nor
// searched: the other link can be a file outside the workspace. The twin:
// once it has one link again, it reads.
func TestHardLinkedFilesAreRefused(t *testing.T) {
	t.Parallel()
	w, root, check := setup(t)
	defer check()
	ctx := t.Context()
	secret := filepath.Join(filepath.Dir(root), "outside", "secret.txt")
	linked := filepath.Join(root, "linked.txt")
	if err := os.Link(secret, linked); err != nil {
		t.Skipf("no hard links here: %v", err)
	}
	for _, tc := range []struct {
		tool string
		args map[string]any
	}{
		{"fs.read", map[string]any{"path": "linked.txt"}},
		{"fs.write", map[string]any{"path": "linked.txt", "content": "pwned\n"}},
		{"fs.patch", map[string]any{"path": "linked.txt", "old": "top", "new": "pwned"}},
	} {
		out, err := run(ctx, t, w, tc.tool, tc.args)
		if err == nil || !strings.Contains(err.Error(), "has 2 hard links; refused") {
			t.Errorf("%s of a hard-linked file = %v, %v; want a refusal naming the hard links", tc.tool, out, err)
		}
		if out != nil && strings.Contains(out.String(), "top secret") {
			t.Errorf("%s showed the outside file's content: %v", tc.tool, out)
		}
	}
	out, err := w.Read(ctx, call(t, "fs.search", map[string]any{"pattern": "secret"}))
	if err != nil || len(fields(out)["matches"].([]any)) != 0 || fields(out)["skipped_files"] != float64(2) {
		t.Errorf("search over a hard-linked file = %v, %v; want no match, it and the binary file skipped", out, err)
	}
	// A commit of a proposal made before the link is refused too.
	c := call(t, "fs.patch", map[string]any{"path": "README.md", "old": "hello", "new": "bye"})
	preview, err := w.Propose(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(root, "README.md"), filepath.Join(root, "README.twin")); err != nil {
		t.Fatal(err)
	}
	c.Preview = preview
	if _, err := w.Commit(ctx, c, "op_1"); !errors.Is(err, tools.ErrRefused) || !strings.Contains(err.Error(), "hard links") {
		t.Errorf("commit over a file that gained a hard link: err = %v, want a refusal", err)
	}
	// The twin: with one link left, the file reads.
	if err := os.Remove(linked); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(linked, []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = w.Read(ctx, call(t, "fs.read", map[string]any{"path": "linked.txt"}))
	if err != nil || fields(out)["content"] != "mine\n" {
		t.Errorf("fs.read of a file with one link = %v, %v", out, err)
	}
}

// resolve opens each directory as "name/." (see walker.follow) on the word
// that os.Root then opens name with O_DIRECTORY: a FIFO swapped in for a
// directory after its Lstat fails at once. This holds os.Root to it, and
// the twin: a directory opens so.
func TestOpenRootOfAFIFOFailsAtOnce(t *testing.T) {
	t.Parallel()
	_, root, check := setup(t)
	defer check()
	if err := syscall.Mkfifo(filepath.Join(root, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	err = bounded(t, ctx, "OpenRoot of a FIFO", func() error {
		sub, err := r.OpenRoot("pipe" + string(filepath.Separator) + ".")
		if err == nil {
			sub.Close()
		}
		return err
	})
	if !errors.Is(err, syscall.ENOTDIR) {
		t.Errorf("OpenRoot(\"pipe/.\") = %v, want ENOTDIR", err)
	}
	sub, err := r.OpenRoot("src" + string(filepath.Separator) + ".")
	if err != nil {
		t.Fatalf("OpenRoot(\"src/.\") = %v", err)
	}
	defer sub.Close()
	if _, err := sub.Stat("main.go"); err != nil {
		t.Errorf("src/. is not src: %v", err)
	}
}
