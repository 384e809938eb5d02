package bench

// The rein serve process a recovery round starts, and how it is watched:
// its log, its serving, its runs resumed, its memory, its stop.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// recoveryRound is what one start of a server measured.
type recoveryRound struct {
	// logged is the time from the process's start to its "rein serving"
	// line; serving to its first SERVING health check; resumed to no run
	// left running (0 when none was expected).
	logged, serving, resumed time.Duration
	// rssServing is VmRSS once serving; rss is VmRSS and peak VmHWM at the
	// end (every run resumed and ended, or serving for an empty store), in
	// MiB; anon and file split rss into the process's own memory (RssAnon)
	// and the store's mapped pages (RssFile, which counts the pages the
	// kernel maps around each one touched when the file is cached);
	// anonPeak is the highest RssAnon sampled.
	rssServing, rss, peak, anon, file, anonPeak float64
}

// recoveryServer is a started `rein serve` process.
type recoveryServer struct {
	cmd    *exec.Cmd
	addrc  chan string
	exited chan struct{} // closed once Wait returned
	err    error         // Wait's result, set before exited closes

	mu   sync.Mutex
	tail []string // the last lines of its log
}

func (s *recoveryServer) log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.tail, "\n")
}

// failed is err with the server's last log lines.
func (s *recoveryServer) failed(err error) error {
	return fmt.Errorf("%w; the server's log ends:\n%s", err, s.log())
}

// recoveryStart starts bin's serve on db and times it to serving and, when
// runs > 0, to every run of the store's runs completed. It stops the server
// with SIGTERM and checks that it exits cleanly.
func recoveryStart(ctx context.Context, bin, db string, runs int) (recoveryRound, error) {
	var out recoveryRound
	ctx, cancel := context.WithTimeout(ctx, recoveryTimeout)
	defer cancel()
	s := &recoveryServer{addrc: make(chan string, 1), exited: make(chan struct{})}
	// No rate limit: the bench polls. No reflection: not needed.
	s.cmd = exec.Command(bin, "--db", db, "serve", "--listen", "127.0.0.1:0", "--reflection=false", "--rate", "0")
	s.cmd.Stdout = io.Discard
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		return out, err
	}
	t0 := time.Now()
	if err := s.cmd.Start(); err != nil {
		return out, fmt.Errorf("start %s: %w", bin, err)
	}
	go s.read(stderr)
	stopped := false
	defer func() {
		if !stopped {
			s.kill()
		}
	}()

	select {
	case addr := <-s.addrc:
		out.logged = time.Since(t0)
		if out.serving, err = s.awaitServing(ctx, addr, t0); err != nil {
			return out, err
		}
		pid := s.cmd.Process.Pid
		out.rssServing = procStatusMiB(pid, "VmRSS")
		sampleAnon := func() { out.anonPeak = max(out.anonPeak, procStatusMiB(pid, "RssAnon")) }
		sampleAnon()
		if runs > 0 {
			if out.resumed, err = s.awaitResumed(ctx, addr, t0, sampleAnon); err != nil {
				return out, err
			}
		}
		out.rss, out.peak = procStatusMiB(pid, "VmRSS"), procStatusMiB(pid, "VmHWM")
		out.anon, out.file = procStatusMiB(pid, "RssAnon"), procStatusMiB(pid, "RssFile")
		out.anonPeak = max(out.anonPeak, out.anon)
		if out.rss <= 0 || out.peak <= 0 {
			return out, fmt.Errorf("read the server's memory from /proc/%d/status", pid)
		}
		if runs > 0 {
			if err := s.checkCompleted(ctx, addr, runs); err != nil {
				return out, err
			}
		}
	case <-s.exited:
		return out, s.failed(fmt.Errorf("the server exited before serving: %v", s.err))
	case <-ctx.Done():
		return out, s.failed(fmt.Errorf("the server did not log its address: %w", ctx.Err()))
	}
	stopped = true
	return out, s.stop()
}

// read keeps the tail of the server's log and sends the address it logs
// serving on; at the log's end it waits for the process.
func (s *recoveryServer) read(stderr io.Reader) {
	sc := bufio.NewScanner(stderr)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		s.mu.Lock()
		s.tail = append(s.tail, line)
		if len(s.tail) > 20 {
			s.tail = s.tail[1:]
		}
		s.mu.Unlock()
		if addr := servingAddr(line); addr != "" {
			select {
			case s.addrc <- addr:
			default:
			}
		}
	}
	_, _ = io.Copy(io.Discard, stderr)
	s.err = s.cmd.Wait()
	close(s.exited)
}

// awaitServing polls the health check until it answers SERVING and returns
// the time since t0.
func (s *recoveryServer) awaitServing(ctx context.Context, addr string, t0 time.Time) (time.Duration, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		res, err := health.Check(cctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && res.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return time.Since(t0), nil
		}
		last = err
		if err == nil {
			last = fmt.Errorf("status %v", res.GetStatus())
		}
		select {
		case <-tick.C:
		case <-s.exited:
			return 0, s.failed(fmt.Errorf("the server exited before its health check answered: %v", s.err))
		case <-ctx.Done():
			return 0, s.failed(fmt.Errorf("the health check did not answer SERVING: %v (%w)", last, ctx.Err()))
		}
	}
}

// awaitResumed polls ListRuns of running runs until none is left and
// returns the time since t0; it calls sample after each poll.
func (s *recoveryServer) awaitResumed(ctx context.Context, addr string, t0 time.Time, sample func()) (time.Duration, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	client := reinv1.NewRunServiceClient(conn)
	req := &reinv1.ListRunsRequest{Statuses: []reinv1.RunStatus{reinv1.RunStatus_RUN_STATUS_RUNNING}, PageSize: 1}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		res, err := client.ListRuns(ctx, req)
		if err != nil {
			return 0, s.failed(fmt.Errorf("list the running runs: %w", err))
		}
		sample()
		if len(res.GetRuns()) == 0 {
			return time.Since(t0), nil
		}
		select {
		case <-tick.C:
		case <-s.exited:
			return 0, s.failed(fmt.Errorf("the server exited before every run was resumed: %v", s.err))
		case <-ctx.Done():
			return 0, s.failed(fmt.Errorf("runs still running (such as %s): %w", res.GetRuns()[0].GetRunId(), ctx.Err()))
		}
	}
}

// checkCompleted checks that every run is completed: none is in any other
// status, and the store holds runs of them.
func (s *recoveryServer) checkCompleted(ctx context.Context, addr string, runs int) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := reinv1.NewRunServiceClient(conn)
	var others []reinv1.RunStatus
	for v := range reinv1.RunStatus_name {
		if st := reinv1.RunStatus(v); st != reinv1.RunStatus_RUN_STATUS_UNSPECIFIED && st != reinv1.RunStatus_RUN_STATUS_COMPLETED {
			others = append(others, st)
		}
	}
	res, err := client.ListRuns(ctx, &reinv1.ListRunsRequest{Statuses: others, PageSize: 1})
	if err != nil {
		return s.failed(fmt.Errorf("list the runs not completed: %w", err))
	}
	if len(res.GetRuns()) > 0 {
		run := res.GetRuns()[0]
		return s.failed(fmt.Errorf("run %s ended %s, not completed: %s %s", run.GetRunId(), run.GetStatus(), run.GetStatusReason(), run.GetLastError()))
	}
	n := 0
	req := &reinv1.ListRunsRequest{Statuses: []reinv1.RunStatus{reinv1.RunStatus_RUN_STATUS_COMPLETED}, PageSize: 1000}
	for {
		res, err := client.ListRuns(ctx, req, grpc.MaxCallRecvMsgSize(64<<20))
		if err != nil {
			return s.failed(fmt.Errorf("list the completed runs: %w", err))
		}
		n += len(res.GetRuns())
		if res.GetNextPageToken() == "" {
			break
		}
		req.PageToken = res.GetNextPageToken()
	}
	if n != runs {
		return s.failed(fmt.Errorf("%d runs completed, want %d", n, runs))
	}
	return nil
}

// stop sends SIGTERM and waits for a clean exit.
func (s *recoveryServer) stop() error {
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	t := time.NewTimer(recoveryStopTimeout)
	defer t.Stop()
	select {
	case <-s.exited:
	case <-t.C:
		s.kill()
		return s.failed(fmt.Errorf("the server did not stop within %v of SIGTERM", recoveryStopTimeout))
	}
	if s.err != nil {
		return s.failed(fmt.Errorf("the server after SIGTERM: %w, want exit 0", s.err))
	}
	return nil
}

// kill stops the server at once (after a failure) and waits for it.
func (s *recoveryServer) kill() {
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
}
