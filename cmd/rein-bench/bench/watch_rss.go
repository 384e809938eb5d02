package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// watchRSS is the server process's resident memory, in MiB: before the
// streams opened, with every stream open and idle, and its peak. -1 when
// unknown.
type watchRSS struct{ before, idle, peak float64 }

// servingAddr is the address in the line a rein server logs once it
// listens (msg="rein serving" ... addr=HOST:PORT), or "" for another line.
func servingAddr(line string) string {
	_, rest, ok := strings.Cut(line, `msg="rein serving" `)
	if !ok {
		return ""
	}
	for _, f := range strings.Fields(rest) {
		if addr, ok := strings.CutPrefix(f, "addr="); ok {
			return addr
		}
	}
	return ""
}

// watchIdleRSS starts o.WatchServer on a store holding p.runs runs that wait
// for input (the server leaves them alone), opens p.streams WatchRun
// streams on them, waits until every stream received the run's history and
// reads the server's VmRSS.
func watchIdleRSS(ctx context.Context, o Options, be Backend, p watchPlan, dir string) (watchRSS, error) {
	none := watchRSS{-1, -1, -1}
	if o.WatchServer == nil {
		return none, nil
	}
	ctx, cancel := context.WithTimeout(ctx, watchTimeout)
	defer cancel()
	db := filepath.Join(dir, "idle.db")
	defer os.Remove(db)
	if err := createWaitingRuns(ctx, be, db, p.ids); err != nil {
		return none, err
	}
	cmd, err := o.WatchServer(db)
	if err != nil {
		return none, err
	}
	cmd.Stdout = io.Discard
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return none, err
	}
	if err := cmd.Start(); err != nil {
		return none, fmt.Errorf("start the server: %w", err)
	}
	exited := make(chan struct{})
	var logMu sync.Mutex
	var logTail []string
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			logMu.Lock()
			logTail = append(logTail, line)
			if len(logTail) > 20 {
				logTail = logTail[1:]
			}
			logMu.Unlock()
			if addr := servingAddr(line); addr != "" {
				select {
				case addrc <- addr:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		_ = cmd.Wait()
		close(exited)
	}()
	serverLog := func() string {
		logMu.Lock()
		defer logMu.Unlock()
		return strings.Join(logTail, "\n")
	}
	defer func() {
		select {
		case <-exited:
			return
		default:
		}
		// A graceful stop first (it closes the store), then a kill.
		_ = cmd.Process.Signal(os.Interrupt)
		t := time.NewTimer(10 * time.Second)
		defer t.Stop()
		select {
		case <-exited:
		case <-t.C:
			_ = cmd.Process.Kill()
			<-exited
		}
	}()

	var addr string
	select {
	case addr = <-addrc:
	case <-exited:
		return none, fmt.Errorf("the server exited before serving:\n%s", serverLog())
	case <-ctx.Done():
		return none, fmt.Errorf("the server did not log its address: %w\n%s", ctx.Err(), serverLog())
	}
	pid := cmd.Process.Pid
	var out watchRSS
	out.before = procStatusMiB(pid, "VmRSS")

	conns, err := dialConns(addr, p.conns)
	if err != nil {
		return none, err
	}
	defer closeConns(conns)
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	var established sync.WaitGroup
	errc := make(chan error, p.streams)
	var streams sync.WaitGroup
	defer streams.Wait()
	defer stop()
	for i := range p.streams {
		established.Add(1)
		streams.Add(1)
		go func() {
			defer streams.Done()
			ok := false
			defer func() {
				if !ok {
					established.Done()
				}
			}()
			client := reinv1.NewRunServiceClient(conns[i%len(conns)])
			stream, err := client.WatchRun(sctx, &reinv1.WatchRunRequest{RunId: p.ids[i%p.runs]})
			if err != nil {
				errc <- err
				return
			}
			for {
				res, err := stream.Recv()
				if err != nil {
					if sctx.Err() == nil {
						errc <- fmt.Errorf("stream %d: %w", i, err)
					}
					return
				}
				if res.GetEvent().GetSequence() == waitingRunVersion && !ok {
					ok = true
					established.Done()
				}
			}
		}()
	}
	all := make(chan struct{})
	go func() {
		established.Wait()
		close(all)
	}()
	select {
	case <-all:
	case err := <-errc:
		return none, fmt.Errorf("open the idle streams: %w\n%s", err, serverLog())
	case <-exited:
		return none, fmt.Errorf("the server exited:\n%s", serverLog())
	case <-ctx.Done():
		return none, fmt.Errorf("the idle streams were not established: %w", ctx.Err())
	}
	select {
	case err := <-errc:
		return none, fmt.Errorf("an idle stream failed: %w", err)
	default:
	}
	out.idle = procStatusMiB(pid, "VmRSS")
	out.peak = procStatusMiB(pid, "VmHWM")
	return out, nil
}

// waitingRunVersion is the last sequence of a run createWaitingRuns makes.
const waitingRunVersion = 3

// createWaitingRuns makes a store with runs that asked a question and wait
// for input: a server does not resume them, and their watch streams stay
// open and idle.
func createWaitingRuns(ctx context.Context, be Backend, path string, ids []string) error {
	s, err := be.Open(path, false)
	if err != nil {
		return err
	}
	defer s.Close()
	for _, id := range ids {
		if _, _, err := s.Create(ctx, watchRunStarted(id)); err != nil {
			return err
		}
		at := benchTime()
		evs := []*reinv1.Event{
			{RunId: id, Sequence: 2, RecordedAt: at, Actor: "model", Payload: &reinv1.Event_InputRequested{
				InputRequested: &reinv1.InputRequested{Question: &reinv1.Question{Text: "which file?"}},
			}},
			{RunId: id, Sequence: waitingRunVersion, RecordedAt: at, Actor: "harness", Payload: &reinv1.Event_StatusChanged{
				StatusChanged: &reinv1.StatusChanged{
					From: reinv1.RunStatus_RUN_STATUS_RUNNING, To: reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT, Reason: "asked a question",
				},
			}},
		}
		if _, err := s.Append(ctx, id, 1, evs); err != nil {
			return err
		}
	}
	return s.Close()
}

// procStatusMiB reads a size field (VmRSS, VmHWM) of /proc/PID/status in
// MiB, or -1 when it cannot.
func procStatusMiB(pid int, field string) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		v, ok := strings.CutPrefix(line, field+":")
		if !ok {
			continue
		}
		f := strings.Fields(v) // "123456 kB"
		if len(f) != 2 || f[1] != "kB" {
			return -1
		}
		kb, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return -1
		}
		return kb / 1024
	}
	return -1
}
