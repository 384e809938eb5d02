package step

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

var hex64 = regexp.MustCompile(`^[0-9a-f]{64}$`)

// The workspace hash covers paths and contents and skips .git.
func TestWorkspaceHash(t *testing.T) {
	root := t.TempDir()
	write := func(rel, body string) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("a/b.txt", "one")
	h1 := workspaceHash(root)
	if !hex64.MatchString(h1) {
		t.Fatalf("hash %q, want 64 hex digits", h1)
	}
	write(".git/HEAD", "ref")
	if h := workspaceHash(root); h != h1 {
		t.Errorf("a change under .git changed the hash")
	}
	write("a/b.txt", "two")
	if h := workspaceHash(root); h == h1 {
		t.Errorf("a content change left the hash as it was")
	}
}
