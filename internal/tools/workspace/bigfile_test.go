package workspace

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// bigFile is the size of the sparse file the bounded-memory tests write
// over: far over maxPreviewFile, and far over what they let a proposal
// allocate.
const bigFile = 2 << 30

// allocated is how many bytes fn allocates (runtime.MemStats.TotalAlloc).
// The tests that call it are not parallel, so that the figure is fn's.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestWriteOverHugeFileInBoundedMemory: fs.write over a 2 GiB (sparse)
// file is proposed without reading the file whole: the allocations stay far
// under its size (today the proposal allocated about three times it), and
// the preview is a summary whose sizes and hashes bind the write.
func TestWriteOverHugeFileInBoundedMemory(t *testing.T) {
	w, root, check := setup(t)
	defer check()
	f, err := os.Create(filepath.Join(root, "huge.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(bigFile); err != nil {
		t.Skipf("no sparse file of %d bytes here: %v", bigFile, err)
	}
	_ = f.Close()
	c := call(t, "fs.write", map[string]any{"path": "huge.bin", "content": "small now\n"})
	var p map[string]any
	n := allocated(func() {
		preview, err := w.Propose(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		p = fields(preview)
	})
	if n > 16<<20 {
		t.Errorf("the proposal allocated %d bytes over a %d-byte file; want it bounded (under 16 MiB)", n, bigFile)
	}
	if _, ok := p["diff"]; ok {
		t.Errorf("the preview of a write over a %d-byte file carries a diff: %v", bigFile, p)
	}
	if h, _ := p["base_hash"].(string); len(h) != 64 || p["new_hash"] != hashOf([]byte("small now\n")) ||
		p["old_size"] != float64(bigFile) || p["size"] != float64(len("small now\n")) ||
		!strings.Contains(p["diff_omitted"].(string), "over the") {
		t.Errorf("summary preview = %v, want both sizes, both hashes and why the diff is left out", p)
	}
}

// TestWriteOverLargeFileBindsItsHash: a summary preview binds the write as
// a diff does: the commit refuses a file that changed since the proposal
// (the twin: as proposed, it writes, streaming the file's hash again).
func TestWriteOverLargeFileBindsItsHash(t *testing.T) {
	w, root, check := setup(t)
	defer check()
	name := filepath.Join(root, "large.txt")
	old := []byte(strings.Repeat("0123456789abcdef", 4*maxPreviewFile/16))
	if err := os.WriteFile(name, old, 0o644); err != nil {
		t.Fatal(err)
	}
	c := call(t, "fs.write", map[string]any{"path": "large.txt", "content": "small now\n"})
	preview, err := w.Propose(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if p := fields(preview); p["base_hash"] != hashOf(old) || p["old_size"] != float64(len(old)) {
		t.Fatalf("summary preview = %v, want the old file's hash and size", p)
	}
	c.Preview = preview

	old[len(old)/2] = 'X'
	if err := os.WriteFile(name, old, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Commit(context.Background(), c, "op_changed"); err == nil || !strings.Contains(err.Error(), "changed since the proposal") {
		t.Fatalf("commit over a file that changed since = %v, want a refusal", err)
	}
	old[len(old)/2] = '0'
	if err := os.WriteFile(name, old, 0o644); err != nil {
		t.Fatal(err)
	}
	receipt, err := w.Commit(context.Background(), c, "op_1")
	if err != nil || fields(receipt)["hash"] != hashOf([]byte("small now\n")) {
		t.Fatalf("commit as proposed = %v, %v", receipt, err)
	}
	if data, _ := os.ReadFile(name); string(data) != "small now\n" {
		t.Errorf("after the commit the file is %d bytes, want the new content", len(data))
	}
}

// TestPatchOverHugeFileIsRefused: fs.patch edits text it must read whole,
// so over maxPreviewFile it says to use fs.write instead of reading it.
func TestPatchOverHugeFileIsRefused(t *testing.T) {
	w, root, check := setup(t)
	defer check()
	if err := os.WriteFile(filepath.Join(root, "big.txt"), []byte(strings.Repeat("a\n", maxPreviewFile)), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := w.Propose(context.Background(), call(t, "fs.patch", map[string]any{"path": "big.txt", "old": "a", "new": "b"}))
	if err == nil || !strings.Contains(err.Error(), "fs.write") {
		t.Fatalf("patch over a %d-byte file = %v, want a refusal naming fs.write", 2*maxPreviewFile, err)
	}
}

// TestPreviewSummaryOverDiffCap: a diff over maxDiffBytes (a new file of
// maxPreviewFile bytes) is left out, and the summary says why; the twin, a
// small write, carries the diff and none of the summary's fields, as
// before.
func TestPreviewSummaryOverDiffCap(t *testing.T) {
	w, _, check := setup(t)
	defer check()
	for _, tc := range []struct {
		name, content string
		diff          bool
	}{
		{"large", strings.Repeat("line\n", maxPreviewFile/5), false},
		{"small", "one\n", true},
	} {
		preview, err := w.Propose(context.Background(), call(t, "fs.write", map[string]any{"path": tc.name + ".txt", "content": tc.content}))
		if err != nil {
			t.Fatal(err)
		}
		p := fields(preview)
		_, hasDiff := p["diff"]
		_, omitted := p["diff_omitted"]
		_, oldSize := p["old_size"]
		if hasDiff != tc.diff || omitted == tc.diff || oldSize == tc.diff {
			t.Errorf("%s: preview fields %v, want a diff: %v", tc.name, keys(p), tc.diff)
		}
	}
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
