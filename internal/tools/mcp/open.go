package mcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/reinhq/rein/internal/tail"
	"github.com/reinhq/rein/internal/tools"
)

// handshakeTimeout bounds connecting to a server when the caller's context
// has no deadline.
const handshakeTimeout = 30 * time.Second

// How much of a stdio server's stderr is kept for error messages.
const stderrTail = 4 << 10

// Option configures a Client.
type Option func(*options)

type options struct {
	logger *slog.Logger
	stderr io.Writer
	env    []string
}

// BaseEnv is the environment a stdio server gets from rein's: the
// variables a program needs to run, and nothing else, so that model API
// keys and other secrets in rein's environment never reach a tool server.
// WithEnv passes more.
var BaseEnv = []string{"PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TZ", "TERM", "SYSTEMROOT"}

// WithEnv passes the named variables of rein's environment to a stdio
// server, beside BaseEnv.
func WithEnv(names ...string) Option { return func(o *options) { o.env = append(o.env, names...) } }

// environ is the stdio server's environment: BaseEnv and names, from
// rein's.
func environ(names []string) []string {
	var env []string
	for _, n := range append(append([]string{}, BaseEnv...), names...) {
		if v, ok := os.LookupEnv(n); ok {
			env = append(env, n+"="+v)
		}
	}
	return env
}

// WithLogger sends what the client cannot return to a caller (the tools it
// skips) to l.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithStderr copies a stdio server's stderr to w. Without it the stderr is
// only kept, its last few KiB, for error messages.
func WithStderr(w io.Writer) Option { return func(o *options) { o.stderr = w } }

// Open connects to the MCP server target, registered as name (the NAME of
// --mcp NAME=COMMAND|URL). An http:// or https:// target is a streamable
// HTTP endpoint; anything else is a command line, split on whitespace with
// simple double and single quotes (no shell), that rein starts and speaks to
// over its stdin and stdout. ctx bounds the connection (30s when it has no
// deadline), not the session. The Client reconnects to a server that went
// away (see the package doc).
func Open(ctx context.Context, name, target string, opts ...Option) (*Client, error) {
	o := options{}
	for _, opt := range opts {
		opt(&o)
	}
	if err := checkName(name); err != nil {
		return nil, err
	}
	what := describeTarget(target)
	newTransport, stderr, err := transportFor(target, o)
	if err != nil {
		return nil, fmt.Errorf("MCP server %q (%s): %w", name, what, err)
	}
	c, err := connect(ctx, name, newTransport(), newTransport, stderr, o)
	if err != nil {
		hint := "check that the command runs an MCP server over stdio"
		if isURL(target) {
			hint = "check that the server is up and that the URL is its streamable HTTP endpoint (often ending in /mcp)"
		}
		return nil, fmt.Errorf("MCP server %q (%s): %w; %s%s", name, what, err, hint, stderrNote(stderr))
	}
	return c, nil
}

// Connect connects to an MCP server over transport, registered as name. ctx
// bounds the connection (30s when it has no deadline), not the session. A
// transport connects once, so this Client does not reconnect.
func Connect(ctx context.Context, name string, transport sdk.Transport, opts ...Option) (*Client, error) {
	o := options{}
	for _, opt := range opts {
		opt(&o)
	}
	if err := checkName(name); err != nil {
		return nil, err
	}
	c, err := connect(ctx, name, transport, nil, nil, o)
	if err != nil {
		return nil, fmt.Errorf("MCP server %q: %w", name, err)
	}
	return c, nil
}

func checkName(name string) error {
	// No '.', so that the first '.' of a rein tool name ends the server's
	// name and two servers' names never collide.
	if err := tools.CheckServerName(name); err != nil {
		return fmt.Errorf("MCP server name (as in --mcp files=COMMAND): %w", err)
	}
	return nil
}

func describeTarget(target string) string {
	if isURL(target) {
		return fmt.Sprintf("URL %q", target)
	}
	return fmt.Sprintf("command %q", target)
}

// stderrNote is what an error says of a stdio server's stderr: its last
// lines. Not a line cut at its start: the engine redacts the server's
// secrets from a tool's error, and it finds only whole values.
func stderrNote(t *tail.Buffer) string {
	if s := strings.TrimSpace(strings.ToValidUTF8(t.WholeLines(), "\uFFFD")); s != "" {
		return "; its stderr ended with:\n" + s
	}
	return ""
}

// connect runs the MCP handshake over transport and lists the server's
// tools. newTransport, when not nil, makes the transport of a reconnection.
func connect(ctx context.Context, name string, transport sdk.Transport, newTransport func() sdk.Transport, stderr *tail.Buffer, o options) (*Client, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, handshakeTimeout)
		defer cancel()
	}
	c := &Client{name: name, stderr: stderr, logger: o.logger, commits: map[string]*commit{}, redial: make(chan struct{}, 1)}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	client := sdk.NewClient(&sdk.Implementation{Name: "rein", Version: "dev"}, &sdk.ClientOptions{
		Logger: o.logger,
		// rein offers the server nothing (no roots, sampling or
		// elicitation): it only calls tools.
		Capabilities:           &sdk.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) { c.toolsChanged() },
	})
	session, err := client.Connect(ctx, transport, nil)
	if err != nil {
		return nil, fmt.Errorf("the MCP handshake failed: %w", err)
	}
	if newTransport != nil {
		c.dial = func(ctx context.Context) (*sdk.ClientSession, error) {
			cs, err := client.Connect(ctx, newTransport(), nil)
			if err != nil {
				return nil, fmt.Errorf("the MCP handshake failed: %w", err)
			}
			return cs, nil
		}
	}
	c.sess = c.watch(session)
	if err := c.refresh(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// transportFor makes the transports a target names, one per connection:
// an http(s) URL is a streamable HTTP endpoint; anything else is a command
// line run over stdio, started anew by each transport. For a command it
// also returns the tail of its stderr, written as its processes run.
func transportFor(target string, o options) (func() sdk.Transport, *tail.Buffer, error) {
	if isURL(target) {
		scheme, _, _ := strings.Cut(target, "://")
		switch strings.ToLower(scheme) {
		case "http", "https":
		default:
			return nil, nil, fmt.Errorf("scheme %q is not supported; give an http:// or https:// URL of a streamable HTTP endpoint, or a command line run over stdio", scheme)
		}
		u, err := url.Parse(target)
		if err != nil {
			return nil, nil, fmt.Errorf("not a URL: %v; give an http(s) URL such as http://127.0.0.1:8080/mcp", err)
		}
		if u.Host == "" {
			return nil, nil, errors.New("the URL has no host; give an http(s) URL such as http://127.0.0.1:8080/mcp")
		}
		return func() sdk.Transport { return &sdk.StreamableClientTransport{Endpoint: target} }, nil, nil
	}
	argv, err := splitCommand(target)
	if err != nil {
		return nil, nil, err
	}
	if _, err := exec.LookPath(argv[0]); err != nil {
		return nil, nil, fmt.Errorf("cannot run %q: %v; give a command on PATH or its absolute path (or an http(s) URL)", argv[0], err)
	}
	t := &tail.Buffer{Max: stderrTail}
	env := environ(o.env)
	return func() sdk.Transport {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = env
		detach(cmd)
		cmd.Stderr = t
		if o.stderr != nil {
			cmd.Stderr = &teeWriter{t, o.stderr}
		}
		// A child that leaves its stderr open in a grandchild must not
		// hold Close forever.
		cmd.WaitDelay = 5 * time.Second
		return &sdk.CommandTransport{Command: cmd}
	}, t, nil
}

// isURL says whether a target is a URL (SCHEME://…) rather than a command.
func isURL(target string) bool {
	scheme, _, ok := strings.Cut(target, "://")
	return ok && isScheme(scheme)
}

// isScheme says whether s is a URL scheme (RFC 3986: a letter, then
// letters, digits, '+', '-' or '.').
func isScheme(s string) bool {
	for i, r := range s {
		letter := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
		if !letter && (i == 0 || !(r >= '0' && r <= '9' || r == '+' || r == '-' || r == '.')) {
			return false
		}
	}
	return s != ""
}

// splitCommand splits a command line into argv on spaces and tabs. A
// double- or single-quoted part is kept whole, quotes removed; there are no
// escapes, variables or other shell syntax.
func splitCommand(line string) ([]string, error) {
	var (
		argv  []string
		cur   strings.Builder
		inArg bool
		quote rune
	)
	for _, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '"' || r == '\'':
			quote, inArg = r, true
		case r == ' ' || r == '\t' || r == '\n' || r == '\r':
			if inArg {
				argv = append(argv, cur.String())
				cur.Reset()
				inArg = false
			}
		default:
			cur.WriteRune(r)
			inArg = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("the command line has an unclosed %c quote; close it", quote)
	}
	if inArg {
		argv = append(argv, cur.String())
	}
	if len(argv) == 0 || argv[0] == "" {
		return nil, errors.New("no command given; give a command line such as \"my-mcp-server --flag\" or an http(s) URL")
	}
	return argv, nil
}

// teeWriter writes to the tail, then to w; an error of w is ignored so that
// a broken log never stalls the server.
type teeWriter struct {
	t *tail.Buffer
	w io.Writer
}

func (tw *teeWriter) Write(p []byte) (int, error) {
	tw.t.Write(p)
	tw.w.Write(p) //nolint:errcheck // see the type's comment
	return len(p), nil
}
