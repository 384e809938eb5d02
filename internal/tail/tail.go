// Package tail keeps the end of a command's output: a writer that holds
// only its last bytes, and the last lines of a text. Completion checks and
// evaluation checks show a person or a model what a failing command said
// last, and an MCP server's errors what its stderr said.
package tail

import (
	"bytes"
	"strings"
	"sync"
)

// Buffer keeps the last Max bytes written to it (at most 2*Max held). It is
// safe for a writer and readers on other goroutines (a child's stderr read
// while it runs).
type Buffer struct {
	mu sync.Mutex
	// b is what was written, or its end: Max bytes and the one before
	// them, which says whether they start a line.
	b   []byte
	Max int
}

func (t *Buffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > 2*t.Max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.Max-1:]...)
	}
	return len(p), nil
}

// WholeLines is String without the line it starts inside of, when bytes
// before it were dropped: "" when that is all of it. A line cut at its
// start may begin inside a secret's value, and what rein redacts from a
// command's output it finds only whole (the server's secrets hold no
// newline: a --secrets file has a value a line).
func (t *Buffer) WholeLines() string {
	if t == nil {
		return ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	start := len(t.b) - min(len(t.b), t.Max)
	if start == 0 || t.b[start-1] == '\n' {
		return string(t.b[start:]) // it starts a line
	}
	i := bytes.IndexByte(t.b[start:], '\n')
	if i < 0 {
		return ""
	}
	return string(t.b[start+i+1:])
}

// String is the last Max bytes written; "" for a nil Buffer.
func (t *Buffer) String() string {
	if t == nil {
		return ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.b
	if len(b) > t.Max {
		b = b[len(b)-t.Max:]
	}
	return string(b)
}

// Lines is the last n lines of s (trailing newlines dropped), at most
// maxBytes of them, as valid UTF-8.
func Lines(s string, n, maxBytes int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	out := strings.Join(lines, "\n")
	if len(out) > maxBytes {
		out = out[len(out)-maxBytes:]
	}
	return strings.ToValidUTF8(out, "\uFFFD")
}
