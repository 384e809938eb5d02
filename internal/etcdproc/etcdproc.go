// Package etcdproc runs etcd members as processes of the pinned etcd binary
// (.bin/etcd, which scripts/tools.sh builds from tools/go.mod): the member
// tests start a cluster of them (internal/etcdtest), and `rein-bench --store
// etcd` starts one when it is given no cluster. rein never links etcd's
// server: it runs the binary.
//
// A member listens on 127.0.0.1 only, keeps its data in the directory it is
// given (a restart with the same directory rejoins the cluster), and writes
// its log to the writer it is given. It runs as an internal/childproc
// child: on Linux it is killed when the process that started it dies, so a
// crashed test leaves no etcd behind.
package etcdproc

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/reinhq/rein/internal/childproc"
)

// BinEnv names an etcd binary to use instead of the one FindBinary looks for.
const BinEnv = "REIN_ETCD_BIN"

// Member is one member of a cluster: its name, data directory and URLs
// (http://127.0.0.1:port).
type Member struct {
	Name      string
	Dir       string
	ClientURL string
	PeerURL   string
}

// Endpoint is the member's client address as etcd's client takes it
// (host:port).
func (m Member) Endpoint() string { return strings.TrimPrefix(m.ClientURL, "http://") }

// Cluster is what every member of one cluster is started with.
type Cluster struct {
	// Bin is the etcd binary.
	Bin string
	// Members are the cluster's members, every one named in each member's
	// --initial-cluster.
	Members []Member
	// Token is the --initial-cluster-token: distinct clusters on one
	// machine take distinct tokens.
	Token string
	// HeartbeatInterval and ElectionTimeout are etcd's raft timings; zero
	// takes etcd's defaults (100ms, 1s).
	HeartbeatInterval, ElectionTimeout time.Duration
	// NoFsync skips fsync (--unsafe-no-fsync): for tests and benchmarks
	// that do not measure durability.
	NoFsync bool
	// MaxRequestBytes is --max-request-bytes; zero takes etcd's 1.5 MiB.
	MaxRequestBytes int
	// QuotaBackendBytes is --quota-backend-bytes, the size past which etcd
	// refuses writes and raises its NOSPACE alarm; zero takes etcd's 2 GiB.
	QuotaBackendBytes int64
	// LogLevel is --log-level; empty is "warn".
	LogLevel string
}

// NewMembers names n members m0, m1, … with data directories under dir and
// ports free a moment ago on 127.0.0.1.
func NewMembers(dir string, n int) ([]Member, error) {
	ports, err := FreePorts(2 * n)
	if err != nil {
		return nil, err
	}
	ms := make([]Member, n)
	for i := range ms {
		name := "m" + strconv.Itoa(i)
		ms[i] = Member{
			Name:      name,
			Dir:       filepath.Join(dir, name),
			ClientURL: "http://127.0.0.1:" + strconv.Itoa(ports[2*i]),
			PeerURL:   "http://127.0.0.1:" + strconv.Itoa(ports[2*i+1]),
		}
	}
	return ms, nil
}

// FreePorts returns n distinct TCP ports of 127.0.0.1 that were free a
// moment ago.
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port on 127.0.0.1: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// args are member i's command-line flags.
func (c Cluster) args(i int) []string {
	m := c.Members[i]
	var initial []string
	for _, o := range c.Members {
		initial = append(initial, o.Name+"="+o.PeerURL)
	}
	level := c.LogLevel
	if level == "" {
		level = "warn"
	}
	token := c.Token
	if token == "" {
		token = "rein"
	}
	a := []string{
		"--name", m.Name,
		"--data-dir", m.Dir,
		"--listen-client-urls", m.ClientURL,
		"--advertise-client-urls", m.ClientURL,
		"--listen-peer-urls", m.PeerURL,
		"--initial-advertise-peer-urls", m.PeerURL,
		"--initial-cluster", strings.Join(initial, ","),
		"--initial-cluster-state", "new",
		"--initial-cluster-token", token,
		"--log-level", level,
		"--log-outputs", "stderr",
	}
	if c.HeartbeatInterval > 0 {
		a = append(a, "--heartbeat-interval", strconv.FormatInt(c.HeartbeatInterval.Milliseconds(), 10))
	}
	if c.ElectionTimeout > 0 {
		a = append(a, "--election-timeout", strconv.FormatInt(c.ElectionTimeout.Milliseconds(), 10))
	}
	if c.NoFsync {
		a = append(a, "--unsafe-no-fsync")
	}
	if c.MaxRequestBytes > 0 {
		a = append(a, "--max-request-bytes", strconv.Itoa(c.MaxRequestBytes))
	}
	if c.QuotaBackendBytes > 0 {
		a = append(a, "--quota-backend-bytes", strconv.FormatInt(c.QuotaBackendBytes, 10))
	}
	return a
}

// Proc is a running member process. Its Done, Pid, Exited, Signal, Kill
// and Stop are those of the childproc.Proc it embeds.
type Proc struct {
	Member Member
	*childproc.Proc
}

// Start starts member i of c, its output (stdout and stderr) to log. A
// member whose directory holds its data from an earlier start rejoins the
// cluster with it.
func (c Cluster) Start(i int, log io.Writer) (*Proc, error) {
	if i < 0 || i >= len(c.Members) {
		return nil, fmt.Errorf("start etcd member %d: the cluster has members 0 to %d", i, len(c.Members)-1)
	}
	m := c.Members[i]
	if err := os.MkdirAll(filepath.Dir(m.Dir), 0o700); err != nil {
		return nil, fmt.Errorf("start etcd member %s: %w", m.Name, err)
	}
	p, err := childproc.Start("etcd member "+m.Name, exec.Command(c.Bin, c.args(i)...), log)
	if err != nil {
		return nil, fmt.Errorf("start etcd member %s from %s: %w", m.Name, c.Bin, err)
	}
	return &Proc{Member: m, Proc: p}, nil
}

// Healthy asks the member at clientURL whether it serves: its /health says
// so only when it has a leader and its store answers.
func Healthy(ctx context.Context, clientURL string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, clientURL+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("etcd member at %s: %w", clientURL, err)
	}
	defer resp.Body.Close()
	var h struct {
		Health string `json:"health"`
		Reason string `json:"reason"`
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err := json.Unmarshal(body, &h); err != nil {
		return fmt.Errorf("etcd member at %s: /health answered %s %q", clientURL, resp.Status, body)
	}
	if h.Health != "true" {
		return fmt.Errorf("etcd member at %s is not healthy: %s", clientURL, strings.TrimSpace(h.Reason+" "+resp.Status))
	}
	return nil
}

// WaitHealthy polls every member of procs until each is healthy, or ctx
// ends; a member that exits meanwhile fails the wait at once.
func WaitHealthy(ctx context.Context, procs ...*Proc) error {
	for {
		var last error
		for _, p := range procs {
			if exited, err := p.Exited(); exited {
				return fmt.Errorf("etcd member %s exited before it was healthy (%v); its log says why", p.Member.Name, err)
			}
			hctx, cancel := context.WithTimeout(ctx, time.Second)
			last = Healthy(hctx, p.Member.ClientURL)
			cancel()
			if last != nil {
				break
			}
		}
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcd not healthy in time: %w (%v)", ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// FindBinary looks for the etcd binary: $REIN_ETCD_BIN, then each of dirs
// (the first that holds an etcd wins), then .bin/etcd in the Go module that
// holds the working directory, then etcd on $PATH. The error says how to
// build it.
func FindBinary(dirs ...string) (string, error) {
	return childproc.FindBinary("etcd", BinEnv, dirs...)
}
