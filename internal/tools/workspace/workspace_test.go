package workspace

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/reinhq/rein/internal/tools"
)

// setup makes a workspace root inside a parent directory that also holds a
// sentinel file outside the root; check verifies the outside is untouched.
func setup(t *testing.T) (w *Workspace, root string, check func()) {
	t.Helper()
	parent := t.TempDir()
	root = filepath.Join(parent, "ws")
	outside := filepath.Join(parent, "outside")
	for _, d := range []string{root, outside, filepath.Join(root, "src")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		filepath.Join(outside, "secret.txt"):  "top secret\n",
		filepath.Join(root, "README.md"):      "# Demo\nhello world\n",
		filepath.Join(root, "src", "main.go"): "package main\n\nfunc main() {\n\tprintln(\"hello\")\n}\n",
		filepath.Join(root, "src", "bin.dat"): "hello\x00binary",
	}
	for p, c := range files {
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	w, err := New(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	check = func() {
		t.Helper()
		got, err := os.ReadFile(filepath.Join(outside, "secret.txt"))
		if err != nil || string(got) != "top secret\n" {
			t.Errorf("the sentinel outside the root changed: %q, %v", got, err)
		}
		entries, _ := os.ReadDir(outside)
		if len(entries) != 1 {
			t.Errorf("files appeared outside the root: %v", entries)
		}
		top, _ := os.ReadDir(parent)
		if len(top) != 2 {
			t.Errorf("files appeared beside the root: %v", top)
		}
	}
	return w, root, check
}

func call(t *testing.T, tool string, args map[string]any) tools.Call {
	t.Helper()
	s, err := structpb.NewStruct(args)
	if err != nil {
		t.Fatal(err)
	}
	return tools.Call{RunID: "run_1", CallID: "call_1", Tool: tool, Args: s}
}

func fields(v *structpb.Value) map[string]any {
	return v.GetStructValue().AsMap()
}

func TestReadListSearch(t *testing.T) {
	t.Parallel()
	w, _, check := setup(t)
	defer check()
	ctx := context.Background()

	out, err := w.Read(ctx, call(t, "fs.read", map[string]any{"path": "README.md"}))
	if err != nil {
		t.Fatal(err)
	}
	if f := fields(out); f["content"] != "# Demo\nhello world\n" || f["next_offset"] != nil {
		t.Errorf("fs.read = %v", f)
	}

	out, err = w.Read(ctx, call(t, "fs.list", map[string]any{}))
	if err != nil {
		t.Fatal(err)
	}
	entries := fields(out)["entries"].([]any)
	if len(entries) != 2 || entries[0].(map[string]any)["name"] != "README.md" || entries[1].(map[string]any)["dir"] != true {
		t.Errorf("fs.list = %v, want README.md then the directory src", entries)
	}

	out, err = w.Read(ctx, call(t, "fs.search", map[string]any{"pattern": "hello"}))
	if err != nil {
		t.Fatal(err)
	}
	matches := fields(out)["matches"].([]any)
	if len(matches) != 2 {
		t.Fatalf("fs.search = %v, want 2 matches (the binary file skipped)", matches)
	}
	m := matches[1].(map[string]any)
	if m["path"] != "src/main.go" || m["line"] != float64(4) || !strings.Contains(m["text"].(string), "println") {
		t.Errorf("second match = %v", m)
	}
}

func TestReadErrorsForTheModel(t *testing.T) {
	t.Parallel()
	w, _, check := setup(t)
	defer check()
	ctx := context.Background()
	for _, tc := range []struct {
		tool string
		args map[string]any
		want []string
	}{
		{"fs.read", map[string]any{"path": "READM.md"}, []string{`"READM.md"`, "nearest existing paths: README.md"}},
		{"fs.read", map[string]any{"path": "src/mian.go"}, []string{"src/main.go"}},
		{"fs.list", map[string]any{"path": "nope/deeper"}, []string{"nearest existing paths", "README.md", "src/"}},
		{"fs.read", map[string]any{"path": "src"}, []string{"is a directory", "fs.list"}},
		{"fs.read", map[string]any{"path": "src/bin.dat"}, []string{"not UTF-8 text"}},
		{"fs.search", map[string]any{"pattern": ""}, []string{"pattern must not be empty"}},
		{"fs.write", map[string]any{"path": "x", "content": "y"}, []string{"is a write"}},
	} {
		_, err := w.Read(ctx, call(t, tc.tool, tc.args))
		if err == nil {
			t.Errorf("%s %v: no error", tc.tool, tc.args)
			continue
		}
		for _, s := range tc.want {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s %v: error %q does not say %q", tc.tool, tc.args, err, s)
			}
		}
	}
}

func TestReadCutSaysHowToReadTheRest(t *testing.T) {
	t.Parallel()
	w, _, check := setup(t)
	defer check()
	ctx := context.Background()
	out, err := w.Read(ctx, call(t, "fs.read", map[string]any{"path": "README.md", "limit": 7}))
	if err != nil {
		t.Fatal(err)
	}
	f := fields(out)
	if f["content"] != "# Demo\n" || f["next_offset"] != float64(7) {
		t.Errorf("cut read = %v", f)
	}
	if note, _ := f["note"].(string); !strings.Contains(note, `fs.read {"path": "README.md", "offset": 7}`) {
		t.Errorf("note %q does not say how to read the rest", note)
	}
	out, err = w.Read(ctx, call(t, "fs.read", map[string]any{"path": "README.md", "offset": 7}))
	if err != nil || fields(out)["content"] != "hello world\n" || fields(out)["note"] != nil {
		t.Errorf("the rest = %v, %v", out, err)
	}
	if _, err := w.Read(ctx, call(t, "fs.read", map[string]any{"path": "README.md", "offset": 999})); err == nil || !strings.Contains(err.Error(), "has 19 bytes") {
		t.Errorf("offset past the end: err = %v", err)
	}
}

// proposeCommit proposes c, then commits it with the preview, as the
// harness does after an approval.
func proposeCommit(t *testing.T, w *Workspace, c tools.Call, between func()) (preview, receipt *structpb.Value, err error) {
	t.Helper()
	ctx := context.Background()
	preview, err = w.Propose(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	if between != nil {
		between()
	}
	c.Preview = preview
	receipt, err = w.Commit(ctx, c, "op_"+c.CallID)
	return preview, receipt, err
}

func TestWriteAndPatch(t *testing.T) {
	t.Parallel()
	w, root, check := setup(t)
	defer check()

	preview, receipt, err := proposeCommit(t, w, call(t, "fs.patch", map[string]any{"path": "src/main.go", "old": `println("hello")`, "new": `println("bye")`}), nil)
	if err != nil {
		t.Fatal(err)
	}
	wantDiff := "--- a/src/main.go\n+++ b/src/main.go\n@@ -1,5 +1,5 @@\n package main\n \n func main() {\n-\tprintln(\"hello\")\n+\tprintln(\"bye\")\n }\n"
	if got := fields(preview)["diff"]; got != wantDiff {
		t.Errorf("patch diff:\n%v\nwant:\n%s", got, wantDiff)
	}
	data, _ := os.ReadFile(filepath.Join(root, "src", "main.go"))
	if !strings.Contains(string(data), "bye") || fields(receipt)["hash"] != hashOf(data) {
		t.Errorf("after the patch: %q, receipt %v", data, receipt)
	}
	// The same operation again writes nothing new and returns the receipt.
	c := call(t, "fs.patch", map[string]any{"path": "src/main.go", "old": `println("hello")`, "new": `println("bye")`})
	c.Preview = preview
	again, err := w.Commit(context.Background(), c, "op_call_1")
	if err != nil || fields(again)["hash"] != fields(receipt)["hash"] {
		t.Errorf("repeated commit = %v, %v", again, err)
	}
	got, applied, err := w.Lookup(context.Background(), c, "op_call_1")
	if err != nil || !applied || fields(got)["hash"] != hashOf(data) {
		t.Errorf("Lookup = %v, %v, %v", got, applied, err)
	}

	c = call(t, "fs.write", map[string]any{"path": "docs/new.txt", "content": "one\ntwo"})
	c.CallID = "call_2"
	preview, receipt, err = proposeCommit(t, w, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantDiff = "--- /dev/null\n+++ b/docs/new.txt\n@@ -0,0 +1,2 @@\n+one\n+two\n\\ No newline at end of file\n"
	if got := fields(preview)["diff"]; got != wantDiff || fields(preview)["base_hash"] != "" {
		t.Errorf("write preview = %v\nwant diff:\n%s", fields(preview), wantDiff)
	}
	data, _ = os.ReadFile(filepath.Join(root, "docs", "new.txt"))
	if string(data) != "one\ntwo" || fields(receipt)["hash"] != hashOf(data) {
		t.Errorf("after the write: %q, receipt %v", data, receipt)
	}
}

func TestWriteRefusals(t *testing.T) {
	t.Parallel()
	w, root, check := setup(t)
	defer check()
	main := filepath.Join(root, "src", "main.go")
	before, _ := os.ReadFile(main)

	for _, tc := range []struct {
		name string
		args map[string]any
		want string
	}{
		{"absent", map[string]any{"path": "src/main.go", "old": "nowhere", "new": "x"}, "occurs 0 times"},
		{"twice", map[string]any{"path": "src/main.go", "old": "main", "new": "x"}, "occurs 2 times"},
		{"missing file", map[string]any{"path": "src/man.go", "old": "a", "new": "b"}, "nearest existing paths: src/main.go"},
	} {
		if _, _, err := proposeCommit(t, w, call(t, "fs.patch", tc.args), nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}

	// Stale: the file changes between the proposal and the commit.
	_, _, err := proposeCommit(t, w, call(t, "fs.patch", map[string]any{"path": "src/main.go", "old": "hello", "new": "bye"}), func() {
		if err := os.WriteFile(main, []byte("package main // edited\n\nfunc main() {\n\tprintln(\"hello\")\n}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	if err == nil || !strings.Contains(err.Error(), "the file changed since the proposal") || !strings.Contains(err.Error(), "propose again") {
		t.Errorf("stale patch: err = %v", err)
	}
	if data, _ := os.ReadFile(main); strings.Contains(string(data), "bye") || string(data) == string(before) {
		t.Errorf("stale patch wrote: %q", data)
	}
	// A commit without its proposal's preview writes nothing.
	c := call(t, "fs.write", map[string]any{"path": "README.md", "content": "x"})
	if _, err := w.Commit(context.Background(), c, "op_x"); err == nil || !strings.Contains(err.Error(), "propose the write again") {
		t.Errorf("commit without a preview: err = %v", err)
	}
}

func TestEscapesAreRefused(t *testing.T) {
	t.Parallel()
	w, root, check := setup(t)
	defer check()
	outside := filepath.Join(filepath.Dir(root), "outside")
	if err := os.Symlink(filepath.Join(outside, "secret.txt"), filepath.Join(root, "link-file")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "link-dir")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "new.txt"), filepath.Join(root, "link-dangling")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("missing.txt", filepath.Join(root, "link-dangling-inside")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("README.md", filepath.Join(root, "link-inside")); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		path, want string
	}{
		{"../outside/secret.txt", `climbs out of the workspace root with ".."`},
		{"src/../../outside/secret.txt", `climbs out`},
		{filepath.Join(outside, "secret.txt"), "is absolute"},
		{"link-file", "through a symbolic link"},
		{"link-dir/secret.txt", "through a symbolic link"},
		{"link-dir/new.txt", "through a symbolic link"},
		// A link out is refused as such, whether its target exists or not:
		// nothing outside the root is looked up to tell.
		{"link-dangling", "leads out of the workspace root through a symbolic link"},
		{"link-dangling-inside", "symbolic link whose target does not exist"},
	} {
		for _, tool := range []string{"fs.read", "fs.list", "fs.search"} {
			args := map[string]any{"path": tc.path, "pattern": "secret"}
			if _, err := w.Read(ctx, call(t, tool, args)); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "refused") {
				t.Errorf("%s %q: err = %v, want %q and refused", tool, tc.path, err, tc.want)
			}
		}
		for _, c := range []tools.Call{
			call(t, "fs.write", map[string]any{"path": tc.path, "content": "pwned\n"}),
			call(t, "fs.patch", map[string]any{"path": tc.path, "old": "top", "new": "pwned"}),
		} {
			if _, err := w.Propose(ctx, c); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s %q: err = %v, want %q", c.Tool, tc.path, err, tc.want)
			}
		}
	}
	// The twin: a link that stays inside works.
	out, err := w.Read(ctx, call(t, "fs.read", map[string]any{"path": "link-inside"}))
	if err != nil || fields(out)["content"] != "# Demo\nhello world\n" {
		t.Errorf("link inside the root: %v, %v", out, err)
	}
	// A search from the root does not follow links out.
	out, err = w.Read(ctx, call(t, "fs.search", map[string]any{"pattern": "secret"}))
	if err != nil || len(fields(out)["matches"].([]any)) != 0 {
		t.Errorf("search from the root: %v, %v", out, err)
	}
}

func TestSymlinkSwappedAfterProposal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		path string
		swap func(root, outside string) error
	}{
		{"file", "target.txt", func(root, outside string) error {
			p := filepath.Join(root, "target.txt")
			if err := os.Remove(p); err != nil {
				return err
			}
			return os.Symlink(filepath.Join(outside, "secret.txt"), p)
		}},
		{"dir", "sub/target.txt", func(root, outside string) error {
			p := filepath.Join(root, "sub")
			if err := os.RemoveAll(p); err != nil {
				return err
			}
			return os.Symlink(outside, p)
		}},
		{"new file in a dir", "sub/secret.txt", func(root, outside string) error {
			p := filepath.Join(root, "sub")
			if err := os.RemoveAll(p); err != nil {
				return err
			}
			return os.Symlink(outside, p)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w, root, check := setup(t)
			defer check()
			outside := filepath.Join(filepath.Dir(root), "outside")
			if err := os.MkdirAll(filepath.Join(root, "sub"), 0o755); err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{"target.txt", "sub/target.txt"} {
				if err := os.WriteFile(filepath.Join(root, p), []byte("top secret\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			for _, c := range []tools.Call{
				call(t, "fs.write", map[string]any{"path": tc.path, "content": "pwned\n"}),
				call(t, "fs.patch", map[string]any{"path": tc.path, "old": "top", "new": "pwned"}),
			} {
				if tc.name == "new file in a dir" && c.Tool == "fs.patch" {
					continue
				}
				if err := os.RemoveAll(filepath.Join(root, "sub")); err != nil {
					t.Fatal(err)
				}
				if err := os.MkdirAll(filepath.Join(root, "sub"), 0o755); err != nil {
					t.Fatal(err)
				}
				_ = os.Remove(filepath.Join(root, "target.txt"))
				for _, p := range []string{"target.txt", "sub/target.txt"} {
					if err := os.WriteFile(filepath.Join(root, p), []byte("top secret\n"), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				_, _, err := proposeCommit(t, w, c, func() {
					if err := tc.swap(root, outside); err != nil {
						t.Fatal(err)
					}
				})
				if err == nil || !strings.Contains(err.Error(), "symbolic link") {
					t.Errorf("%s after the swap: err = %v, want a refusal naming the symbolic link", c.Tool, err)
				}
			}
		})
	}
}

func TestNewRoot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := New(dir, nil); err != nil {
		t.Errorf("New(dir) = %v", err)
	}
	if _, err := New(file, nil); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("New(file) = %v, want not a directory", err)
	}
	if _, err := New(filepath.Join(dir, "missing"), nil); err == nil {
		t.Error("New(missing) succeeded")
	}
}
