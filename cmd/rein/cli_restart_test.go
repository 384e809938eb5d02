package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/reinhq/rein/client"
	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// startCount counts, across writers, the lines that say a run started.
type startCount struct{ n atomic.Int64 }

// startWriter is one process's stderr; it counts its start line in c.
type startWriter struct {
	c    *startCount
	mu   sync.Mutex // guards buf
	buf  bytes.Buffer
	seen bool
}

func (w *startWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	if !w.seen && strings.Contains(w.buf.String(), " started (") {
		w.seen = true
		w.c.n.Add(1)
	}
	return n, err
}

func (w *startWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// starter is one `rein run --server` process of the restart test.
type starter struct {
	goal   string
	cmd    *exec.Cmd
	stdout bytes.Buffer
	stderr *startWriter
	code   int
}

// startRuns starts n `rein run --server addr` processes of this test binary
// at once, each with its own goal; every other one pauses for input, the
// others complete. done closes when all have exited.
func startRuns(t *testing.T, ctx context.Context, addr string, n int, timeout string, c *startCount) ([]*starter, <-chan struct{}) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	slow := `{"decision": {"final_answer": {"text": "Done."}}, "usage": {"input_tokens": 10, "output_tokens": 5}, "delay_ms": 400}`
	ask := `{"decision": {"ask_human": {"question": "Which invoice?"}}, "delay_ms": 400}`
	complete, pause := writeFile(t, "complete.jsonl", slow+"\n"), writeFile(t, "pause.jsonl", ask+"\n")
	var wg sync.WaitGroup
	out := make([]*starter, n)
	for i := range n {
		s := &starter{goal: fmt.Sprintf("restart test run %d", i), stderr: &startWriter{c: c}}
		task := writeFile(t, "task.json", fmt.Sprintf(`{"goal": %q, "budget": {"max_steps": 2, "timeout": "300s"}}`, s.goal))
		script := complete
		if i%2 == 1 {
			script = pause
		}
		s.cmd = exec.CommandContext(ctx, exe, "run", task, "--model", "script:"+script, "--server", addr, "--json", "--command-timeout", timeout)
		s.cmd.Env = append(os.Environ(), cliEnv+"=1")
		s.cmd.Stdout, s.cmd.Stderr = &s.stdout, s.stderr
		if err := s.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		out[i] = s
		wg.Go(func() {
			_ = s.cmd.Wait()
			s.code = s.cmd.ProcessState.ExitCode()
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t.Cleanup(func() {
		for _, s := range out {
			_ = s.cmd.Process.Kill()
		}
		<-done
	})
	return out, done
}

// freeAddr is a loopback address nothing listens on (yet).
func freeAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().String()
}

// waitAll waits for done, failing the test after a generous bound.
func waitAll(t *testing.T, done <-chan struct{}, starters []*starter) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		for _, s := range starters {
			t.Logf("%s: exit %d\n%s", s.goal, s.code, s.stderr)
		}
		t.Fatal("the rein run processes did not all exit within 3 minutes")
	}
}

// TestStartsSurviveAServerRestart: forty `rein run --server` processes start
// at once; the server is SIGKILLed while they are in flight (some runs
// started, most not) and restarted on the same address and store after a
// pause. Each process retries through the outage with its one request ID,
// so every one ends with its run's own exit code (0 completed, 10 paused)
// and the store holds exactly one run per process, in the status its exit
// code says. Today the starts cut off by the kill exit 5. The twin: a server
// that never comes back makes every start exit 5, saying what to check,
// once --command-timeout (3s here) has passed.
func TestStartsSurviveAServerRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	t.Setenv(cliEnv, "1") // the servers, too, are this binary running the CLI
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	db, addr := newDB(t), freeAddr(t)
	serve := []string{"serve", "--listen", addr, "--db", db}
	first := startGrpcurlServer(t, t.TempDir(), exe, serve)

	var started startCount
	starters, done := startRuns(t, ctx, addr, 40, "60s", &started)
	for started.n.Load() < 3 {
		select {
		case <-done:
			t.Fatal("every process exited before the server was killed")
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			t.Fatal("no run started")
		}
	}
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-first.exited
	atKill := started.n.Load()
	select { // the outage
	case <-time.After(time.Second):
	case <-ctx.Done():
	}
	startGrpcurlServer(t, t.TempDir(), exe, serve)
	waitAll(t, done, starters)

	c, err := client.Dial(addr, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	stored := map[string][]*reinv1.Run{}
	req := &reinv1.ListRunsRequest{PageSize: 100}
	for {
		resp, err := c.Runs.ListRuns(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range resp.GetRuns() {
			stored[r.GetContract().GetGoal()] = append(stored[r.GetContract().GetGoal()], r)
		}
		if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
			break
		}
	}
	want := map[int]reinv1.RunStatus{exitOK: reinv1.RunStatus_RUN_STATUS_COMPLETED, exitPaused: reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT}
	for _, s := range starters {
		runs := stored[s.goal]
		st, ok := want[s.code]
		switch {
		case len(runs) > 1:
			t.Errorf("%s: %d runs stored, want one: the start was doubled", s.goal, len(runs))
		case !ok:
			t.Errorf("%s: exit %d, want 0 or 10 (the server was back well within --command-timeout)\n%s", s.goal, s.code, s.stderr)
		case len(runs) != 1:
			t.Errorf("%s: exit %d but %d runs stored, want one", s.goal, s.code, len(runs))
		case runs[0].GetStatus() != st:
			t.Errorf("%s: exit %d but the run is %v", s.goal, s.code, runs[0].GetStatus())
		}
	}
	if len(stored) != len(starters) {
		t.Errorf("%d goals stored, want %d", len(stored), len(starters))
	}
	t.Logf("%d of %d runs had started when the server was killed", atKill, len(starters))

	t.Run("never back", func(t *testing.T) {
		gone := freeAddr(t)
		var none startCount
		starters, done := startRuns(t, ctx, gone, 8, "3s", &none)
		waitAll(t, done, starters)
		for _, s := range starters {
			if s.code != exitUnavailable {
				t.Errorf("%s: exit %d, want %d\n%s", s.goal, s.code, exitUnavailable, s.stderr)
				continue
			}
			mustContain(t, s.goal+" stderr", s.stderr.String(), "cannot reach a rein server at "+gone, "is `rein serve` running")
		}
	})
}
