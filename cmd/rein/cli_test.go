package main

// End-to-end tests of the CLI through Run, each over a real bbolt file in a
// temporary directory, with scripted models and fixture tools. This file
// holds the helpers and the usage tests; cli_run_test.go tests `run`,
// cli_read_test.go tests `inspect`, `events` and `list`.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// result is what one CLI invocation left behind.
type result struct {
	code   int
	stdout string
	stderr string
}

// cli runs the CLI with args and no stdin.
func cli(t *testing.T, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := Run(context.Background(), args, strings.NewReader(""), &out, &errb)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// mustExit fails the test unless r exited with want.
func (r result) mustExit(t *testing.T, want int) result {
	t.Helper()
	if r.code != want {
		t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, want, r.stdout, r.stderr)
	}
	return r
}

// watchWriter is a thread-safe writer that closes seen the first time what
// it was written contains want.
type watchWriter struct {
	want string
	seen chan struct{}
	// grew is signalled after each write (capacity 1: signals coalesce).
	grew chan struct{}

	mu   sync.Mutex // guards buf and done
	buf  bytes.Buffer
	done bool
}

func newWatchWriter(want string) *watchWriter {
	return &watchWriter{want: want, seen: make(chan struct{}), grew: make(chan struct{}, 1)}
}

// waitFor waits, at most d, until ok holds for what was written; it
// reports whether it did.
func (w *watchWriter) waitFor(d time.Duration, ok func(string) bool) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for !ok(w.String()) {
		select {
		case <-w.grew:
		case <-deadline.C:
			return ok(w.String())
		}
	}
	return true
}

func (w *watchWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	if !w.done && strings.Contains(w.buf.String(), w.want) {
		w.done = true
		close(w.seen)
	}
	select {
	case w.grew <- struct{}{}:
	default:
	}
	return n, err
}

func (w *watchWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// newDB returns the path of a store that does not exist yet, in a directory
// that does not exist yet either, so a test can tell that nothing was made.
func newDB(t *testing.T) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "state", "rein.db")
}

// mustNotExist fails the test if the store at db, or its directory, exists.
func mustNotExist(t *testing.T, db string) {
	t.Helper()
	for _, p := range []string{db, filepath.Dir(db)} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exists (stat error %v); a refused command must write nothing", p, err)
		}
	}
}

// writeFile writes content into a new file of a temporary directory.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// example is the path of a file of one of the examples.
func example(name, file string) string {
	return filepath.Join("..", "..", "examples", name, file)
}

// exampleRun is the argument list that runs an example on db.
func exampleRun(name, db string, extra ...string) []string {
	args := []string{"run", example(name, "task.json"),
		"--model", "script:" + example(name, "model.jsonl"),
		"--tools", "fixture:" + example(name, "tools.json"),
		"--db", db}
	return append(args, extra...)
}

// decodeOne decodes s as exactly one JSON object.
func decodeOne(t *testing.T, s string) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("stdout is not a JSON object: %v\n%s", err, s)
	}
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		t.Fatalf("stdout holds more than one JSON value (next: %v, %v):\n%s", extra, err, s)
	}
	return m
}

// decodeLines decodes s as NDJSON: one JSON object a line.
func decodeLines(t *testing.T, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for i, line := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
		if line == "" && i == 0 && s == "" {
			break
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %d is not a JSON object: %v\n%s", i+1, err, line)
		}
		out = append(out, m)
	}
	return out
}

// events runs `events RUN_ID --json` on db and decodes its lines.
func events(t *testing.T, db, runID string, extra ...string) []map[string]any {
	t.Helper()
	r := cli(t, append([]string{"events", runID, "--json", "--db", db}, extra...)...).mustExit(t, 0)
	return decodeLines(t, r.stdout)
}

// num is a JSON number as an int; it fails the test for anything else.
func num(t *testing.T, v any, what string) int {
	t.Helper()
	f, ok := v.(float64)
	if !ok {
		t.Fatalf("%s = %#v (%T), want a JSON number", what, v, v)
	}
	return int(f)
}

// obj is a JSON object; it fails the test for anything else.
func obj(t *testing.T, v any, what string) map[string]any {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%s = %#v (%T), want a JSON object", what, v, v)
	}
	return m
}

// mustContain fails the test unless s contains every one of subs.
func mustContain(t *testing.T, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("%s does not contain %q:\n%s", what, sub, s)
		}
	}
}

// progressLine matches a progress line of `run`: time, sequence, type.
var progressLine = regexp.MustCompile(`^\d\d:\d\d:\d\d\.\d{3}\s+(\d+) (\w+)\s`)

func TestHelpWritesNothing(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"root", []string{"--help"}, []string{"Usage:", "run", "inspect", "events", "list"}},
		{"root short", []string{"-h"}, []string{"Usage:"}},
		{"run", []string{"run", "--help"}, []string{"run TASK.json", "--model", "--tools", "--request-id"}},
		{"inspect", []string{"inspect", "--help"}, []string{"inspect RUN_ID"}},
		{"events", []string{"events", "--help"}, []string{"events RUN_ID", "--after"}},
		{"list", []string{"list", "--help"}, []string{"--status"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := newDB(t)
			r := cli(t, append([]string{"--db", db}, tc.args...)...).mustExit(t, 0)
			mustContain(t, "stdout", r.stdout, tc.want...)
			mustNotExist(t, db)
			// Without --db, the default store under XDG_STATE_HOME is not
			// made either.
			cli(t, tc.args...).mustExit(t, 0)
			mustNotExist(t, filepath.Join(os.Getenv("XDG_STATE_HOME"), "rein", "rein.db"))
		})
	}
	// Help before the persistent flags works too.
	db := newDB(t)
	r := cli(t, "--help", "--db", db).mustExit(t, 0)
	mustContain(t, "stdout", r.stdout, "Usage:")
	mustNotExist(t, db)
}

// `rein serve --help` lists no client-only flag (it serves; it talks to no
// server), and a client command's help lists them all.
func TestHelpListsClientFlagsOnClientsOnly(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	client := []string{"--server ", "--token ", "--tls-ca "}
	serve := cli(t, "serve", "--help").mustExit(t, 0).stdout
	for _, f := range client {
		if strings.Contains(serve, f) {
			t.Errorf("rein serve --help lists the client flag %s:\n%s", f, serve)
		}
	}
	// serve's own TLS flags and the store stay.
	mustContain(t, "rein serve --help", serve, "--listen ", "--tls-cert ", "--tls-key ", "--db ")
	list := cli(t, "list", "--help").mustExit(t, 0).stdout
	mustContain(t, "rein list --help", list, append(client, "--tls-cert ", "--tls-key ", "--db ")...)
	// The flags were hidden only for serve's help: a client's help written
	// after it, in the same process, still lists them.
	var out, errb bytes.Buffer
	e := newEnv(strings.NewReader(""), &out, &errb)
	if code := run(context.Background(), e, []string{"serve", "--help"}); code != 0 {
		t.Fatalf("serve --help: exit %d\n%s", code, errb.String())
	}
	out.Reset()
	if code := run(context.Background(), e, []string{"list", "--help"}); code != 0 {
		t.Fatalf("list --help: exit %d\n%s", code, errb.String())
	}
	mustContain(t, "rein list --help after serve --help", out.String(), client...)
}

// Every documented command is listed by `rein --help`. The twin: bench is
// not a command of rein (rein-bench is its own binary): it is not listed,
// and asking for it is a usage error that says where it went.
func TestRootHelpListsEveryCommand(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	help := cli(t, "--help").mustExit(t, 0).stdout
	for _, c := range []string{"run", "watch", "approve", "deny", "input", "cancel", "pending", "inspect",
		"events", "export", "import", "list", "serve", "fork", "replay", "upgrade", "check", "evaluate", "version"} {
		if !regexp.MustCompile(`(?m)^  ` + c + `\s`).MatchString(help) {
			t.Errorf("rein --help does not list %s:\n%s", c, help)
		}
	}
	if regexp.MustCompile(`(?m)^  bench\s`).MatchString(help) {
		t.Errorf("rein --help lists bench, which is rein-bench's:\n%s", help)
	}
	r := cli(t, "bench", "steps").mustExit(t, exitUsage)
	mustContain(t, "rein bench steps", r.stderr, "rein-bench", "-tags reinbench")
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want string // on stderr
	}{
		{"unknown command", []string{"bogus"}, `unknown command "bogus"`},
		{"run without a task", []string{"run"}, "arg"},
		{"run with two tasks", []string{"run", "a.json", "b.json"}, "arg"},
		{"unknown flag", []string{"run", example("invoice", "task.json"), "--bogus"}, "--bogus"},
		{"inspect without a run", []string{"inspect"}, "arg"},
		{"events with a bad --after", []string{"events", "run_x", "--after", "x"}, "--after"},
		{"list with a bad --status", []string{"list", "--status", "bogus"}, `"bogus"`},
		{"list with a bad --limit", []string{"list", "--limit", "0"}, "--limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := newDB(t)
			r := cli(t, append(tc.args, "--db", db)...).mustExit(t, 2)
			mustContain(t, "stderr", r.stderr, tc.want)
			if r.stdout != "" {
				t.Errorf("stdout %q, want nothing", r.stdout)
			}
			mustNotExist(t, db)
		})
	}
}
