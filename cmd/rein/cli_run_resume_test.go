package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// cutProxy relays TCP connections to a server. cut closes every connection
// open; while down, new ones are closed at once.
type cutProxy struct {
	lis      net.Listener
	upstream string

	mu    sync.Mutex // guards conns and down
	conns []net.Conn
	down  bool
}

func newCutProxy(t *testing.T, upstream string) *cutProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{lis: lis, upstream: upstream}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = lis.Close()
		p.cut(false)
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { p.relay(c) })
		}
	})
	return p
}

func (p *cutProxy) relay(c net.Conn) {
	up, err := net.Dial("tcp", p.upstream)
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	if p.down {
		p.mu.Unlock()
		_ = c.Close()
		_ = up.Close()
		return
	}
	p.conns = append(p.conns, c, up)
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
	_ = c.Close()
	_ = up.Close()
	<-done
}

// cut closes every open connection; with down, new ones are refused until
// cut(false).
func (p *cutProxy) cut(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns, p.down = nil, down
}

func (p *cutProxy) addr() string { return p.lis.Addr().String() }

// slowAnswer is a script whose one reply takes a while, so that the run is
// still going when the test cuts the stream that follows it.
const slowAnswer = `{"decision": {"final_answer": {"text": "Done."}}, "usage": {"input_tokens": 10, "output_tokens": 5}, "delay_ms": 1500}`

// runThrough starts `rein run --server` through the proxy, cuts the
// connection once the run's model call was printed, and returns the run's
// stderr and a channel with its exit code and stdout.
func runThrough(t *testing.T, ctx context.Context, p *cutProxy, down bool) (*watchWriter, <-chan result) {
	t.Helper()
	stderr := newWatchWriter("model_requested")
	done := make(chan result, 1)
	args := []string{"run", writeFile(t, "task.json", lookupTask),
		"--model", "script:" + writeFile(t, "model.jsonl", slowAnswer+"\n"), "--server", p.addr(), "--json"}
	go func() {
		var out bytes.Buffer
		code := Run(ctx, args, strings.NewReader(""), &out, stderr)
		done <- result{code: code, stdout: out.String(), stderr: stderr.String()}
	}()
	select {
	case <-stderr.seen:
	case r := <-done:
		t.Fatalf("run exited %d before its model call:\n%s", r.code, r.stderr)
	case <-time.After(30 * time.Second):
		t.Fatalf("no model call printed:\n%s", stderr)
	}
	p.cut(down)
	return stderr, done
}

// TestRunFollowsThroughADroppedStream: rein run follows its run with the
// client's Watch, so a stream cut mid-run is resumed from the last event
// printed: every event once, in order, and the run's own exit code.
func TestRunFollowsThroughADroppedStream(t *testing.T) {
	addr := serveInProcess(t, newDB(t), "--tools", "fixture:"+writeFile(t, "tools.json", lookupFixtures))
	p := newCutProxy(t, addr)
	_, done := runThrough(t, context.Background(), p, false)
	var r result
	select {
	case r = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("rein run did not finish after the stream was cut")
	}
	r.mustExit(t, exitOK)
	if s := decodeOne(t, r.stdout); s["status"] != "completed" {
		t.Errorf("summary %v, want completed", s)
	}
	var seqs []string
	for _, m := range regexp.MustCompile(`(?m)^\S+\s+(\d+) \w+`).FindAllStringSubmatch(r.stderr, -1) {
		seqs = append(seqs, m[1])
	}
	if got := strings.Join(seqs, " "); got != "1 2 3 4" {
		t.Errorf("events printed: %s, want 1 2 3 4, each once:\n%s", got, r.stderr)
	}
	// It said on stderr that the stream was cut and that it reconnects.
	mustContain(t, "rein run through a cut stream", r.stderr, "was cut", "reconnecting in")

	// The twin: a server that stays unreachable is waited for, not given up
	// on; Ctrl+C then cannot record the cancel either, and says so.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stderr, done := runThrough(t, ctx, p, true)
	select {
	case r := <-done:
		t.Fatalf("rein run exited %d while the server was unreachable, want it to wait:\n%s", r.code, r.stderr)
	case <-time.After(2 * time.Second):
	}
	cancel()
	select {
	case r = <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("rein run did not stop on Ctrl+C:\n%s", stderr)
	}
	r.mustExit(t, exitUnavailable)
	p.cut(false)
}
