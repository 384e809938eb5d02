package main

// The rein serve process TestGrpcurlDocs runs the page's commands against.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// grpcurlServer is a running `rein serve`.
type grpcurlServer struct {
	cmd    *exec.Cmd
	addr   string
	exited chan struct{} // closed once Wait returned
	err    error         // Wait's result, set before exited closes

	mu  sync.Mutex // guards log
	log bytes.Buffer
}

func (s *grpcurlServer) output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.String()
}

// startGrpcurlServer starts bin with args in dir and waits until its health
// check answers SERVING.
func startGrpcurlServer(t *testing.T, dir, bin string, args []string) *grpcurlServer {
	t.Helper()
	s := &grpcurlServer{exited: make(chan struct{})}
	s.cmd = exec.Command(bin, args...)
	s.cmd.Dir = dir
	s.cmd.Stdout = io.Discard
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start %s %q: %v", bin, args, err)
	}
	addrRe := regexp.MustCompile(`msg="rein serving" addr=(\S+)`)
	addrc := make(chan string, 1)
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			s.mu.Lock()
			s.log.WriteString(sc.Text() + "\n")
			s.mu.Unlock()
			if m := addrRe.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addrc <- m[1]:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	go func() {
		<-scanned // Wait closes the pipe: read it to the end first
		s.err = s.cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-s.exited:
		default:
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
		if t.Failed() {
			t.Logf("rein serve's log:\n%s", s.output())
		}
	})

	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	select {
	case s.addr = <-addrc:
	case <-s.exited:
		t.Fatalf("rein serve exited before serving: %v\n%s", s.err, s.output())
	case <-deadline.C:
		t.Fatalf("rein serve did not log its address within 20s:\n%s", s.output())
	}

	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		res, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && res.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return s
		}
		last = err
		if err == nil {
			last = fmt.Errorf("status %v", res.GetStatus())
		}
		select {
		case <-tick.C:
		case <-s.exited:
			t.Fatalf("rein serve exited before its health check answered: %v\n%s", s.err, s.output())
		case <-deadline.C:
			t.Fatalf("rein serve's health check did not answer SERVING within 20s: %v", last)
		}
	}
}

// stop sends SIGTERM and checks that the server exits 0 within a deadline.
func (s *grpcurlServer) stop(t *testing.T) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	deadline := time.NewTimer(15 * time.Second)
	defer deadline.Stop()
	select {
	case <-s.exited:
	case <-deadline.C:
		t.Fatalf("rein serve did not exit within 15s of SIGTERM:\n%s", s.output())
	}
	if s.err != nil {
		t.Fatalf("rein serve after SIGTERM: %v, want exit 0\n%s", s.err, s.output())
	}
	if out := s.output(); !strings.Contains(out, "the database is closed") {
		t.Errorf("rein serve's log does not say it closed the database:\n%s", out)
	}
}
