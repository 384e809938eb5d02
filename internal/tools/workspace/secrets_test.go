package workspace

// The tools show no piece of a value of the server's secrets, whichever
// part of a file they show; files without one read as they did.

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/reinhq/rein/internal/secret"
)

const testKey = "sk-live-7Qx9ZpL2mN4vR8tY1wK6"

var testMarker = secret.Marker("TEST_API_KEY")

// keyed is a workspace over a new root holding files, whose secret is
// testKey; plain is one over the same root with no secrets.
func keyed(t *testing.T, files map[string]string) (keyed, plain *Workspace) {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := secret.New(map[string]string{"TEST_API_KEY": testKey})
	var err error
	if keyed, err = New(root, r); err != nil {
		t.Fatal(err)
	}
	if plain, err = New(root, nil); err != nil {
		t.Fatal(err)
	}
	return keyed, plain
}

// piece is a piece of testKey of 4 bytes or more that s holds, in any
// case; "" when it holds none.
func piece(s string) string {
	s = strings.ToLower(s)
	key := strings.ToLower(testKey)
	for i := 0; i+4 <= len(key); i++ {
		if strings.Contains(s, key[i:i+4]) {
			return key[i : i+4]
		}
	}
	return ""
}

func readAt(t *testing.T, w *Workspace, path string, offset, limit int) map[string]any {
	t.Helper()
	args := map[string]any{"path": path, "offset": offset}
	if limit > 0 {
		args["limit"] = limit
	}
	out, err := w.Read(context.Background(), call(t, "fs.read", args))
	if err != nil {
		t.Fatalf("fs.read %v: %v", args, err)
	}
	return fields(out)
}

// TestReadSlicesNoKey: a file that holds a key, read at every offset with
// every limit up to past the key's length, shows no piece of it: each
// slice that shares a byte with it shows the marker and says why.
func TestReadSlicesNoKey(t *testing.T) {
	t.Parallel()
	head := "name: demo\ntoken: "
	content := head + testKey + "\nend: yes\n"
	w, _ := keyed(t, map[string]string{"config.yaml": content})
	for offset := 0; offset <= len(content); offset++ {
		for limit := 1; limit <= len(testKey)+3; limit++ {
			f := readAt(t, w, "config.yaml", offset, limit)
			got := f["content"].(string)
			if p := piece(got); p != "" {
				t.Fatalf("offset %d limit %d: content %q holds %q of the key", offset, limit, got, p)
			}
			overlaps := offset < len(head)+len(testKey) && offset+limit > len(head)
			if overlaps != strings.Contains(got, testMarker) || overlaps != (f["redacted"] != nil) {
				t.Fatalf("offset %d limit %d: content %q, redacted %v; want the marker and a note: %v", offset, limit, got, f["redacted"], overlaps)
			}
		}
	}
	// The pieces a model reads one after the other hold none either.
	for limit := 1; limit <= len(testKey)+1; limit++ {
		var all strings.Builder
		for offset := 0; ; {
			f := readAt(t, w, "config.yaml", offset, limit)
			all.WriteString(f["content"].(string))
			next, ok := f["next_offset"].(float64)
			if !ok {
				break
			}
			offset = int(next)
		}
		if p := piece(all.String()); p != "" {
			t.Fatalf("limit %d: the pieces read %q hold %q of the key", limit, all.String(), p)
		}
	}
	note := readAt(t, w, "config.yaml", 0, 0)["redacted"].(string)
	for _, want := range []string{"TEST_API_KEY", "never shows a secret's value", "count the file's own bytes"} {
		if !strings.Contains(note, want) {
			t.Errorf("redacted = %q, want it to say %q", note, want)
		}
	}
}

// TestReadKeyAtTheBoundary: a key that straddles the default read's end is
// the marker at the end of the first read and at the start of the next,
// whose offsets count the file's bytes; the key at the end of a file larger
// than the most a read returns too, read from anywhere; a key upper-cased
// too.
func TestReadKeyAtTheBoundary(t *testing.T) {
	t.Parallel()
	filler := func(n int) string { return strings.Repeat("0123456789 abc\n", n/15+1)[:n] }
	straddle := filler(defaultReadLimit-10) + testKey + "\n" + filler(100)
	large := filler(maxReadLimit+4096-len(testKey)) + testKey
	upper := "token=" + strings.ToUpper(testKey) + "\n"
	w, _ := keyed(t, map[string]string{"straddle.txt": straddle, "large.txt": large, "upper.txt": upper})

	first := readAt(t, w, "straddle.txt", 0, 0)
	if got := first["content"].(string); !strings.HasSuffix(got, testMarker) || piece(got) != "" {
		t.Errorf("first read ends %q, want the marker", got[len(got)-40:])
	}
	if first["next_offset"] != float64(defaultReadLimit) {
		t.Errorf("next_offset = %v, want %d: offsets count the file's bytes", first["next_offset"], defaultReadLimit)
	}
	if got := readAt(t, w, "straddle.txt", defaultReadLimit, 0)["content"].(string); !strings.HasPrefix(got, testMarker) || piece(got) != "" {
		t.Errorf("second read starts %q, want the marker", got[:40])
	}

	size := len(large)
	for _, tc := range []struct{ offset, limit int }{
		{size - len(testKey)/2, 0},                           // the key's end
		{size - len(testKey)/2 - maxReadLimit, maxReadLimit}, // the most a read returns, ending in the key
		{size - len(testKey) - 1, 2},                         // one byte before, one of the key
	} {
		got := readAt(t, w, "large.txt", tc.offset, tc.limit)["content"].(string)
		if !strings.Contains(got, testMarker) || piece(got) != "" {
			t.Errorf("large.txt at %d, limit %d: %q, want the marker and no piece", tc.offset, tc.limit, got[max(0, len(got)-40):])
		}
	}

	if got := readAt(t, w, "upper.txt", 0, 0)["content"].(string); got != "token="+testMarker+"\n" {
		t.Errorf("upper.txt = %q, want the upper-cased key replaced", got)
	}
}

// TestSearchShowsNoKey: fs.search shows no piece of a key in a line it
// clips through the key, matches its pattern against the lines as shown
// (so a part of the key finds nothing), and replaces the lines of a value
// that spans lines.
func TestSearchShowsNoKey(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", maxMatchText-10) + testKey + " tail\n"
	w, _ := keyed(t, map[string]string{"long.txt": long, "plain.txt": "nothing here\n"})
	search := func(w *Workspace, pattern string, path ...string) map[string]any {
		t.Helper()
		args := map[string]any{"pattern": pattern}
		if len(path) > 0 {
			args["path"] = path[0]
		}
		out, err := w.Read(context.Background(), call(t, "fs.search", args))
		if err != nil {
			t.Fatal(err)
		}
		return fields(out)
	}
	f := search(w, "xxx")
	matches := f["matches"].([]any)
	if len(matches) != 1 {
		t.Fatalf("matches = %v, want the long line", matches)
	}
	if text := matches[0].(map[string]any)["text"].(string); piece(text) != "" || !strings.Contains(text, "[secret") {
		t.Errorf("clipped line = %q, want no piece of the key, and the marker's start", text)
	}
	if note, _ := f["redacted"].(string); !strings.Contains(note, "TEST_API_KEY") || !strings.Contains(note, "as shown") {
		t.Errorf("redacted = %q, want it to name the secret and say how lines match", note)
	}
	for _, pattern := range []string{testKey[:8], testKey[10:14], strings.ToUpper(testKey[3:12])} {
		if m := search(w, pattern)["matches"].([]any); len(m) != 0 {
			t.Errorf("pattern %q, a part of the key, matched %v", pattern, m)
		}
	}
	// The twin: the marker itself and the text around it are found.
	if m := search(w, "tail")["matches"].([]any); len(m) != 1 {
		t.Errorf("pattern tail: %v, want the long line", m)
	}
	if f := search(w, "nothing", "plain.txt"); f["redacted"] != nil || len(f["matches"].([]any)) != 1 {
		t.Errorf("a search that shows no key's line: %v", f)
	}

	// A value with a newline: each line it spans shows the marker.
	root := t.TempDir()
	pem := "-----BEGIN KEY-----\nMIIEvQIBADANBgkq\n-----END KEY-----"
	if err := os.WriteFile(filepath.Join(root, "key.pem"), []byte("# key\n"+pem+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wp, err := New(root, secret.New(map[string]string{"PEM": pem}))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		pattern string
		want    []string
	}{
		{"[secret PEM]", []string{"[secret PEM]", "[secret PEM]", "[secret PEM]"}},
		{"#", []string{"# key"}},
		{"BEGIN", nil},
		{"MIIE", nil},
	} {
		var got []string
		for _, m := range search(wp, tc.pattern)["matches"].([]any) {
			got = append(got, m.(map[string]any)["text"].(string))
		}
		if strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("pattern %q: %q, want %q", tc.pattern, got, tc.want)
		}
	}
}

// TestWritesOfAKeyedFile: fs.patch does not edit a file that holds a key
// (whether old occurs would say what the key is), and fs.write's preview of
// one leaves the diff out; a file without is patched and diffed as ever.
func TestWritesOfAKeyedFile(t *testing.T) {
	t.Parallel()
	w, _ := keyed(t, map[string]string{".env": "MODE=dev\nKEY=" + testKey + "\n", "app.env": "MODE=dev\n"})
	ctx := context.Background()
	for _, old := range []string{"MODE=dev", "KEY=sk-l", "KEY=sk-x"} {
		_, err := w.Propose(ctx, call(t, "fs.patch", map[string]any{"path": ".env", "old": old, "new": "MODE=prod"}))
		if err == nil || !strings.Contains(err.Error(), "secret TEST_API_KEY") || !strings.Contains(err.Error(), "fs.write") {
			t.Errorf("fs.patch of .env, old %q: %v, want a refusal that names the secret", old, err)
		}
	}
	out, err := w.Propose(ctx, call(t, "fs.write", map[string]any{"path": ".env", "content": "MODE=prod\n"}))
	if err != nil {
		t.Fatal(err)
	}
	if f := fields(out); f["diff"] != nil || !strings.Contains(f["diff_omitted"].(string), "TEST_API_KEY") {
		t.Errorf("fs.write preview of .env = %v, want the diff left out, saying why", f)
	}
	out, err = w.Propose(ctx, call(t, "fs.write", map[string]any{"path": "app.env", "content": "KEY=" + testKey + "\n"}))
	if err != nil {
		t.Fatal(err)
	}
	if f := fields(out); f["diff"] != nil {
		t.Errorf("fs.write of a key into app.env: preview %v, want the diff left out", f)
	}
	// The twin: a file without a key.
	out, err = w.Propose(ctx, call(t, "fs.patch", map[string]any{"path": "app.env", "old": "dev", "new": "prod"}))
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := fields(out)["diff"].(string); !strings.Contains(d, "+MODE=prod") {
		t.Errorf("fs.patch of app.env: diff %q", d)
	}
}

// TestFilesWithoutKeysReadAsBefore: a workspace with secrets answers every
// read and search of files that hold none exactly as one without secrets
// does, character cuts and large files included.
func TestFilesWithoutKeysReadAsBefore(t *testing.T) {
	t.Parallel()
	files := map[string]string{
		"a.txt":     "name: demo\ntoken: sk-live-7Qx9Zp\nend: yes\n", // a key cut short is no key
		"utf8.txt":  strings.Repeat("héllo wörld ✓\n", 6000),
		"large.txt": strings.Repeat("0123456789abcdef", (maxReadLimit+100)/16),
	}
	w, plain := keyed(t, files)
	ctx := context.Background()
	var calls []map[string]any
	for name, content := range files {
		for _, offset := range []int{0, 1, 5, len(content) / 2, len(content) - 3, len(content)} {
			for _, limit := range []int{1, 2, 7, 100, defaultReadLimit, maxReadLimit} {
				calls = append(calls, map[string]any{"tool": "fs.read", "path": name, "offset": offset, "limit": limit})
			}
		}
	}
	for _, p := range []string{"token", "sk-live", "wörld", "abcdef0"} {
		calls = append(calls, map[string]any{"tool": "fs.search", "pattern": p})
	}
	for _, c := range calls {
		tool := c["tool"].(string)
		delete(c, "tool")
		got, gerr := w.Read(ctx, call(t, tool, c))
		want, werr := plain.Read(ctx, call(t, tool, c))
		if (gerr == nil) != (werr == nil) || gerr != nil && gerr.Error() != werr.Error() {
			t.Fatalf("%s %v: error %v, without secrets %v", tool, c, gerr, werr)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("%s %v: %v, without secrets %v", tool, c, abbrev(got), abbrev(want))
		}
	}
}

func abbrev(v *structpb.Value) string {
	s := v.String()
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}
