package bench

// The mcp scenario: what a tool call through the MCP face (/mcp, the Go
// SDK's client over Streamable HTTP) costs the server, against the same
// call through the HTTP face's Connect protocol.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/auth"
)

const (
	// mcpCalls is how many calls each side of a round makes, at scale 1,
	// spread over mcpClients clients calling at once.
	mcpCalls   = 4000
	mcpClients = 8
	// mcpTarget is the ratio of calls per server CPU-second through /mcp
	// to the same through Connect that the scenario must reach: the MCP
	// face within 2× of Connect's CPU per call.
	mcpTarget = 0.5
	// clockTicks is Linux's USER_HZ, the unit of /proc/PID/stat's times.
	clockTicks = 100
	mcpToken   = "rein-bench-mcp-token"
)

// MCP measures the MCP face's cost per tool call. One `rein serve --http
// --http-mcp --tokens` process serves both faces; the bench starts one
// run, then calls get_run on it: the figure through /mcp (mcpClients
// sessions of the Go SDK's client, each a tools/call over Streamable
// HTTP), the baseline the same GetRun through Connect (connect-go's
// client with the JSON codec, as a browser's call is). Both carry the
// same bearer token over the same kept-alive connections.
//
// The rate is calls per CPU-second of the server process (its user and
// system time from /proc), so Ratio is Connect's CPU per call over the
// MCP face's; Seconds are CPU seconds. Extra reports each side's calls
// per wall second and the server's and the client's CPU per call, in
// microseconds.
func MCP(ctx context.Context, o Options) (Result, error) {
	r := Result{Scenario: "mcp", Unit: "calls/cpu-s", Target: mcpTarget, Runs: 1, Extra: map[string]float64{}}
	dir, err := tempDir(o, r.Scenario)
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	bin, _, err := reinBinary(ctx, o.Rein, dir)
	if err != nil {
		return r, err
	}
	srv, err := startMCPServer(ctx, bin, dir)
	if err != nil {
		return r, err
	}
	defer srv.stop()

	hc := &http.Client{Transport: bearerTransport{&http.Transport{MaxIdleConnsPerHost: mcpClients * 2}}}
	base := "http://" + srv.httpAddr
	runID, err := seedRun(ctx, hc, base)
	if err != nil {
		return r, srv.failed(err)
	}
	getRun := connect.NewClient[reinv1.GetRunRequest, reinv1.GetRunResponse](hc, base+"/rein.v1.RunService/GetRun", connect.WithProtoJSON())
	sessions := make([]*mcp.ClientSession, mcpClients)
	for i := range sessions {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "rein-bench", Version: "1"}, nil).Connect(ctx,
			&mcp.StreamableClientTransport{Endpoint: base + "/mcp", HTTPClient: hc}, nil)
		if err != nil {
			return r, srv.failed(fmt.Errorf("mcp: open an MCP session: %w", err))
		}
		defer cs.Close()
		sessions[i] = cs
	}

	n := o.scaled(mcpCalls, mcpClients*10)
	viaMCP := func(ctx context.Context, client int) error {
		res, err := sessions[client].CallTool(ctx, &mcp.CallToolParams{Name: "get_run", Arguments: map[string]any{"run_id": runID}})
		if err == nil && res.IsError {
			err = fmt.Errorf("get_run: %v", res.Content)
		}
		return err
	}
	viaConnect := func(ctx context.Context, _ int) error {
		_, err := getRun.CallUnary(ctx, connect.NewRequest(&reinv1.GetRunRequest{RunId: runID}))
		return err
	}
	side := func(name string, call func(context.Context, int) error) func(int) (measure, error) {
		return func(int) (measure, error) {
			m, wall, client, err := mcpRound(ctx, srv.pid(), n, call)
			if err != nil {
				return m, srv.failed(err)
			}
			bestOf(r.Extra, name+"_calls_per_s", float64(n)/wall.Seconds())
			lowestOf(r.Extra, name+"_server_cpu_us_per_call", float64(m.elapsed.Microseconds())/float64(n))
			lowestOf(r.Extra, name+"_client_cpu_us_per_call", float64(client.Microseconds())/float64(n))
			return m, nil
		}
	}
	if err := alternateOrder(ctx, &r, o.rounds(), true, side("mcp", viaMCP), side("connect", viaConnect)); err != nil {
		return r, err
	}
	r.Events = n
	r.Extra["calls"] = float64(n)
	r.Extra["clients"] = mcpClients
	return r, nil
}

// mcpRound makes n calls over mcpClients goroutines and measures them by
// the server's CPU time; wall is the round's duration and client the
// bench process's own CPU time.
func mcpRound(ctx context.Context, pid, n int, call func(context.Context, int) error) (m measure, wall, client time.Duration, err error) {
	cpu0, err := procCPU(pid)
	if err != nil {
		return m, 0, 0, err
	}
	self0, t0 := cpuTime(), time.Now()
	var wg sync.WaitGroup
	errs := make([]error, mcpClients)
	for c := range mcpClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := c; i < n && errs[c] == nil; i += mcpClients {
				errs[c] = call(ctx, c)
			}
		}()
	}
	wg.Wait()
	wall, client = time.Since(t0), cpuTime()-self0
	if err := errors.Join(errs...); err != nil {
		return m, 0, 0, err
	}
	cpu1, err := procCPU(pid)
	if err != nil {
		return m, 0, 0, err
	}
	return measure{units: float64(n), elapsed: cpu1 - cpu0}, wall, client, nil
}

// procCPU is the user and system time process pid has used so far, every
// thread's, from /proc/PID/stat (in clock ticks, 10 ms).
func procCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("mcp: read the server's CPU time (the scenario needs Linux's /proc): %w", err)
	}
	// The command (field 2) may hold spaces; the fields after its ")"
	// start at field 3, so utime and stime (14, 15) are at 11 and 12.
	i := strings.LastIndexByte(string(data), ')')
	fields := strings.Fields(string(data)[i+1:])
	if i < 0 || len(fields) < 13 {
		return 0, fmt.Errorf("mcp: /proc/%d/stat is not as Linux writes it: %q", pid, data)
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("mcp: /proc/%d/stat: %w", pid, err)
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// seedRun starts the run every call reads (through Connect, as the local
// bench principal) and waits for it to end.
func seedRun(ctx context.Context, hc *http.Client, base string) (string, error) {
	start := connect.NewClient[reinv1.StartRunRequest, reinv1.StartRunResponse](hc, base+"/rein.v1.RunService/StartRun", connect.WithProtoJSON())
	c := &reinv1.TaskContract{Goal: "answer", Model: &reinv1.ModelSpec{Provider: "script", Name: "bench",
		Script: []*reinv1.ScriptedReply{scripted(finalDecision("done"))}}}
	resp, err := start.CallUnary(ctx, connect.NewRequest(&reinv1.StartRunRequest{RequestId: "mcp-bench", Contract: c}))
	if err != nil {
		return "", fmt.Errorf("mcp: start the run the calls read: %w", err)
	}
	return resp.Msg.GetRun().GetRunId(), nil
}

// bearerTransport carries the bench principal's token.
type bearerTransport struct{ base http.RoundTripper }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+mcpToken)
	return b.base.RoundTrip(r)
}

// mcpServer is the started `rein serve` of the scenario.
type mcpServer struct {
	cmd      *exec.Cmd
	httpAddr string
	exited   chan struct{}

	mu   sync.Mutex
	tail []string
}

func (s *mcpServer) pid() int { return s.cmd.Process.Pid }

func (s *mcpServer) failed(err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Errorf("%w; the server's log ends:\n%s", err, strings.Join(s.tail, "\n"))
}

func (s *mcpServer) stop() {
	_ = s.cmd.Process.Kill()
	<-s.exited
}

// startMCPServer starts bin's serve on a new store in dir with both
// faces on a free loopback port, the bench principal in a tokens file, and
// no rate limit, and returns once it logs the HTTP face's address.
func startMCPServer(ctx context.Context, bin, dir string) (*mcpServer, error) {
	tokens := filepath.Join(dir, "tokens.json")
	doc := `{"principals": [{"id": "bench", "tenant": "bench", "roles": ["operator"], "token_sha256": "` + auth.HashToken(mcpToken) + `"}]}`
	if err := os.WriteFile(tokens, []byte(doc), 0o600); err != nil {
		return nil, err
	}
	s := &mcpServer{exited: make(chan struct{})}
	s.cmd = exec.Command(bin, "serve", "--db", filepath.Join(dir, "rein.db"), "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
		"--http-mcp", "--tokens", tokens, "--reflection=false", "--rate", "0")
	s.cmd.Stdout = io.Discard
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("mcp: start %s: %w", bin, err)
	}
	addrc := make(chan string, 1)
	go func() {
		defer close(s.exited)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			s.mu.Lock()
			s.tail = append(s.tail[max(0, len(s.tail)-19):], line)
			s.mu.Unlock()
			if _, rest, ok := strings.Cut(line, "http_addr="); ok {
				select {
				case addrc <- strings.Fields(rest)[0]:
				default:
				}
			}
		}
		_ = s.cmd.Wait()
	}()
	select {
	case s.httpAddr = <-addrc:
		return s, nil
	case <-s.exited:
		return nil, s.failed(errors.New("mcp: the server exited before serving"))
	case <-time.After(time.Minute):
		s.stop()
		return nil, s.failed(errors.New("mcp: the server did not log its HTTP address within a minute"))
	case <-ctx.Done():
		s.stop()
		return nil, ctx.Err()
	}
}
