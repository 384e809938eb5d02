package s3test

import (
	"bytes"
	"strings"
	"sync"
)

// logBuffer is the server's log, kept in memory across restarts.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 1<<20 { // keep the last part only
		rest := append([]byte(nil), l.b.Bytes()[l.b.Len()-(256<<10):]...)
		l.b.Reset()
		l.b.Write(rest)
	}
	return l.b.Write(p)
}

func (l *logBuffer) tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.b.String()
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return strings.TrimRight(s, "\n")
}
