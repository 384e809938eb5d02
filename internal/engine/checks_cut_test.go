package engine

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/secret"
)

// TestChecksOutputCutHoldsNoKeyPiece: a check whose output, past what the
// step holds of it (1 MiB), starts the part held inside a key's value
// records no piece of it, though the redacted tail is short enough to
// keep that start (a long key's marker is much shorter than the key). The
// twin: output of whole lines keeps its lines, the key redacted.
func TestChecksOutputCutHoldsNoKeyPiece(t *testing.T) {
	var b strings.Builder
	b.WriteString("sk-long-")
	for i := 0; b.Len() < 2000; i++ {
		fmt.Fprintf(&b, "%04x", i*7919%65536)
	}
	key := b.String()
	root := t.TempDir()
	files := map[string]string{
		"one-line": strings.Repeat(key, 600),           // 1.2 MB, no newline
		"lines":    strings.Repeat("k="+key+"\n", 600), // the twin
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for name := range files {
		e, s := setup(t, Config{Workspace: root, NoProgressSteps: 1, Secrets: secret.New(map[string]string{"LONG_KEY": key})})
		c := checkContract([]*reinv1.Check{{Name: "cat", Argv: []string{"cat", name}}}, finalReply("done"))
		_, evs := runToRest(t, e, s, c)
		tail := checksOf(t, evs)[0].GetResults()[0].GetOutputTail()
		for i := 0; i+16 <= len(key); i++ {
			if strings.Contains(tail, key[i:i+16]) {
				t.Fatalf("%s: the check's output tail holds %q of the key", name, key[i:i+16])
			}
		}
		if name == "lines" && !strings.HasSuffix(tail, "k=[secret LONG_KEY]") {
			t.Errorf("lines: the tail ends %q, want the last line, redacted", tail[max(0, len(tail)-40):])
		}
	}
}
