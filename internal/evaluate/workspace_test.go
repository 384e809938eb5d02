package evaluate

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeTree writes files (path → content) under a new temporary directory.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		full := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestCopyWorkspace(t *testing.T) {
	src := writeTree(t, map[string]string{"README.md": "hello\n", "sub/deep/x.txt": "x", "run.sh": "#!/bin/sh\nexit 0\n"})
	if err := os.Chmod(filepath.Join(src, "run.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(src, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := CheckWorkspace(src); err != nil {
		t.Fatalf("CheckWorkspace: %v", err)
	}
	dst := filepath.Join(t.TempDir(), "copy")
	if err := CopyWorkspace(src, dst); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{"README.md": "hello\n", "sub/deep/x.txt": "x"} {
		got, err := os.ReadFile(filepath.Join(dst, filepath.FromSlash(p)))
		if err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", p, got, err, want)
		}
	}
	if info, err := os.Stat(filepath.Join(dst, "run.sh")); err != nil || info.Mode().Perm()&0o100 == 0 {
		t.Errorf("run.sh lost its execute bit: %v, %v", info, err)
	}
	if info, err := os.Stat(filepath.Join(dst, "empty")); err != nil || !info.IsDir() {
		t.Errorf("empty directory not copied: %v", err)
	}
	// The copy is a copy: writing it leaves the source as it was.
	if err := os.WriteFile(filepath.Join(dst, "README.md"), []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(src, "README.md")); string(got) != "hello\n" {
		t.Errorf("source README.md = %q after writing the copy", got)
	}
	// A second copy into the same place is refused, not merged.
	if err := CopyWorkspace(src, dst); err == nil {
		t.Error("a copy over an existing directory succeeded")
	}
}

// A symbolic link to the workspace is followed: the link is the operator's.
func TestCopyWorkspaceRootLink(t *testing.T) {
	src := writeTree(t, map[string]string{"a.txt": "a"})
	link := filepath.Join(t.TempDir(), "ws")
	if err := os.Symlink(src, link); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "copy")
	if err := CopyWorkspace(link, dst); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(dst, "a.txt")); err != nil || string(got) != "a" {
		t.Errorf("a.txt = %q, %v", got, err)
	}
}

func TestCopyWorkspaceRefuses(t *testing.T) {
	outside := writeTree(t, map[string]string{"secret": "s"})
	linked := writeTree(t, map[string]string{"sub/a.txt": "a"})
	if err := os.Symlink(filepath.Join(outside, "secret"), filepath.Join(linked, "sub", "link")); err != nil {
		t.Fatal(err)
	}
	inner := writeTree(t, map[string]string{"a.txt": "a"})
	if err := os.Symlink("a.txt", filepath.Join(inner, "b.txt")); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(writeTree(t, map[string]string{"f": "x"}), "f")
	for _, tc := range []struct{ name, src, want string }{
		{"link out", linked, "sub/link is a symbolic link"},
		{"link in", inner, "b.txt is a symbolic link"},
		{"missing", filepath.Join(t.TempDir(), "none"), "no such file"},
		{"file", file, "is not a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := CheckWorkspace(tc.src); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("CheckWorkspace = %v, want an error containing %q", err, tc.want)
			}
			dst := filepath.Join(t.TempDir(), "copy")
			if err := CopyWorkspace(tc.src, dst); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("CopyWorkspace = %v, want an error containing %q", err, tc.want)
			}
			if _, err := os.Stat(filepath.Join(dst, "sub", "link")); err == nil {
				t.Error("the symbolic link was copied")
			}
		})
	}
}

func TestGradeWorkspacePasses(t *testing.T) {
	root := writeTree(t, map[string]string{"README.md": "hello world\n", "sub/inner.txt": "in"})
	e := Expect{
		Files: map[string]string{"README.md": "hello", "sub/inner.txt": "", "./README.md": "world"},
		WorkspaceChecks: []WorkspaceCheck{
			{Name: "readme", Argv: []string{"sh", "-c", "test -f README.md"}},
			{Name: "in sub", Argv: []string{"test", "-f", "inner.txt"}, Dir: "sub", Timeout: "10s"},
			{Name: "root dir", Argv: []string{"test", "-f", "README.md"}, Dir: "."},
		},
	}
	if f := GradeWorkspace(context.Background(), e, root); len(f) != 0 {
		t.Errorf("GradeWorkspace = %q, want a pass", f)
	}
	if f := GradeWorkspace(context.Background(), Expect{}, root); len(f) != 0 {
		t.Errorf("no graders: %q, want a pass", f)
	}
}

func TestGradeWorkspaceFails(t *testing.T) {
	root := writeTree(t, map[string]string{"README.md": "hello\n", "sub/inner.txt": "in"})
	outside := writeTree(t, map[string]string{"secret.txt": "the secret"})
	if err := os.Symlink(filepath.Join(outside, "secret.txt"), filepath.Join(root, "leak.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "out")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		e    Expect
		want string
	}{
		{"missing file", Expect{Files: map[string]string{"gone.txt": ""}}, "file gone.txt does not exist"},
		{"wrong content", Expect{Files: map[string]string{"README.md": "goodbye"}}, `file README.md does not contain "goodbye"`},
		{"a directory", Expect{Files: map[string]string{"sub": ""}}, "file sub is not a regular file"},
		{"link out", Expect{Files: map[string]string{"leak.txt": "secret"}}, "file leak.txt:"},
		{"check exits 1", Expect{WorkspaceChecks: []WorkspaceCheck{{Name: "boom", Argv: []string{"sh", "-c", "echo one; echo two; echo boom >&2; exit 3"}}}},
			"workspace check \"boom\" (sh -c echo one; echo two; echo boom >&2; exit 3) exited 3; the last of its output:\none\ntwo\nboom"},
		{"check silent", Expect{WorkspaceChecks: []WorkspaceCheck{{Name: "quiet", Argv: []string{"false"}}}}, `workspace check "quiet" (false) exited 1, with no output`},
		{"check not found", Expect{WorkspaceChecks: []WorkspaceCheck{{Name: "nope", Argv: []string{"rein-no-such-command"}}}}, `workspace check "nope" (rein-no-such-command) could not run`},
		{"check times out", Expect{WorkspaceChecks: []WorkspaceCheck{{Name: "slow", Argv: []string{"sleep", "30"}, Timeout: "50ms"}}}, `workspace check "slow" (sleep 30) timed out after 50ms`},
		{"check dir missing", Expect{WorkspaceChecks: []WorkspaceCheck{{Name: "d", Argv: []string{"true"}, Dir: "nowhere"}}}, `workspace check "d" (true) did not run: directory "nowhere" does not exist`},
		{"check dir a file", Expect{WorkspaceChecks: []WorkspaceCheck{{Name: "d", Argv: []string{"true"}, Dir: "README.md"}}}, `"README.md" is not a directory`},
		{"check dir link out", Expect{WorkspaceChecks: []WorkspaceCheck{{Name: "d", Argv: []string{"true"}, Dir: "out"}}}, `directory "out" leads out of the workspace`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := GradeWorkspace(context.Background(), tc.e, root)
			if len(f) != 1 || !strings.Contains(f[0], tc.want) {
				t.Errorf("GradeWorkspace = %q, want one failure containing %q", f, tc.want)
			}
			if strings.Contains(strings.Join(f, "\n"), "the secret") {
				t.Errorf("a grader read outside the workspace: %q", f)
			}
		})
	}
}

// Every grader runs: a failure does not hide the next, and each is named.
func TestGradeWorkspaceReportsAll(t *testing.T) {
	root := writeTree(t, map[string]string{"a.txt": "a"})
	e := Expect{
		Files: map[string]string{"a.txt": "b", "c.txt": ""},
		WorkspaceChecks: []WorkspaceCheck{
			{Name: "first", Argv: []string{"false"}},
			{Name: "passes", Argv: []string{"true"}},
			{Name: "third", Argv: []string{"sh", "-c", "exit 2"}},
		},
	}
	f := GradeWorkspace(context.Background(), e, root)
	got := strings.Join(f, "\n")
	for _, want := range []string{"file a.txt does not contain", "file c.txt does not exist", `"first"`, `"third"`} {
		if !strings.Contains(got, want) {
			t.Errorf("failures do not contain %q:\n%s", want, got)
		}
	}
	if len(f) != 4 || strings.Contains(got, `"passes"`) {
		t.Errorf("%d failures, want 4: %q", len(f), f)
	}
}

// A check sees its output cut to its last lines.
func TestGradeWorkspaceTail(t *testing.T) {
	root := t.TempDir()
	e := Expect{WorkspaceChecks: []WorkspaceCheck{{Name: "long", Argv: []string{"sh", "-c", "i=1; while [ $i -le 50 ]; do echo line$i; i=$((i+1)); done; exit 1"}}}}
	f := GradeWorkspace(context.Background(), e, root)
	if len(f) != 1 {
		t.Fatalf("failures %q", f)
	}
	if !strings.HasSuffix(f[0], "\nline41\nline42\nline43\nline44\nline45\nline46\nline47\nline48\nline49\nline50") || strings.Contains(f[0], "line40\n") {
		t.Errorf("failure does not end with the last 10 lines:\n%s", f[0])
	}
}
