package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/reinhq/rein/internal/version"
)

// Exit codes (docs/cli.md, "Exit codes").
const (
	exitOK          = 0
	exitError       = 1
	exitUsage       = 2
	exitNotFound    = 3
	exitDenied      = 4
	exitUnavailable = 5
	exitPaused      = 10
	exitBudget      = 11
	exitFailed      = 12
	exitRefused     = 13
	exitCancelled   = 130
)

// exitErr carries an exit code out of a command (one of the exit codes
// above; exitError is only the generic one). Its message, if any, is
// printed on stderr.
type exitErr struct {
	code int
	err  error
}

func (e *exitErr) Error() string {
	if e.err == nil {
		return ""
	}
	return e.err.Error()
}

func (e *exitErr) Unwrap() error { return e.err }

// usageError is an exit-2 error: bad flags, a malformed file.
func usageError(format string, args ...any) error {
	return &exitErr{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// env is what every command shares, in parts by what they are for: its
// streams, where its calls go (target), how it prints (outputFlags) and
// the config file's settings (globals). A helper takes the part it uses,
// not the whole.
type env struct {
	streams
	target
	outputFlags
	profiles
	// started is set once flags and arguments were accepted; an error before
	// that is a usage error.
	started bool
}

// newEnv is an environment on these streams, its settings unresolved.
func newEnv(stdin io.Reader, stdout, stderr io.Writer) *env {
	return &env{streams: streams{stdin: stdin, stdout: stdout, stderr: stderr}}
}

// streams are a command's standard streams.
type streams struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
}

// target is where a command's calls go, and how long it keeps trying: the
// embedded server on db, or a --server with its credentials.
type target struct {
	// db is the bbolt file of the embedded server.
	db string
	// server, when set, is a rein server to talk to instead of the embedded
	// one; token and the TLS files go with it.
	server, token, tokenFile string
	tlsCA, tlsCert, tlsKey   string
	// tlsSystemRoots turns TLS on, verified by the system's roots;
	// insecureToken lets a token go in plaintext to a host not loopback.
	tlsSystemRoots, insecureToken bool
	// commandTimeout bounds how long a command retries a --server that is
	// unavailable; timeoutFlag is set for the commands that have the flag
	// (the others wait as long as they last).
	commandTimeout time.Duration
	timeoutFlag    bool
}

// outputFlags are how a command prints its result.
type outputFlags struct {
	// output is --output: json or table.
	output string
	// json asks for JSON output (--json, or --output json).
	json bool
}

// profiles are the config file of profiles and the global settings as
// resolved from it, the environment and the flags (rein config shows
// them).
type profiles struct {
	// configPath is the config file of profiles and profileName the
	// profile in use ("" none); their sources are for `rein config`.
	configPath, configSource   string
	profileName, profileSource string
	config                     *configFile
	configExists               bool
	// settings are the global settings as resolved, with their sources;
	// resolved is set once they are.
	settings []settingValue
	resolved bool
}

// commandTimeoutFlag gives cmd --command-timeout.
func (t *target) commandTimeoutFlag(cmd *cobra.Command) {
	cmd.Flags().DurationVar(&t.commandTimeout, "command-timeout", defaultCommandTimeout,
		"with --server: how long to keep trying a server that is unavailable (restarting, unreachable) before exiting 5; each call, and a watch cut off, has this long (0: do not retry)")
}

// defaultCommandTimeout is --command-timeout's default.
const defaultCommandTimeout = 30 * time.Second

// Run runs the CLI with args and returns the process's exit code. main and
// the tests both call it.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return run(ctx, newEnv(stdin, stdout, stderr), args)
}

// run is Run on an environment the caller made (with its stdin, stdout and
// stderr, and any of its optional fields set).
func run(ctx context.Context, e *env, args []string) int {
	root := newRoot(e)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	code := exitCode(err)
	if !e.started {
		code = exitUsage
	}
	if st, ok := status.FromError(err); ok {
		fmt.Fprintf(e.stderr, "rein: %s (%s)\n", st.Message(), st.Code())
		if hint := unreachable(&e.target, st); hint != "" {
			fmt.Fprintln(e.stderr, "rein: "+hint)
		}
	} else if msg := err.Error(); msg != "" {
		fmt.Fprintln(e.stderr, "rein: "+msg)
	}
	return code
}

// newRoot is the rein command and its subcommands, on e.
func newRoot(e *env) *cobra.Command {
	root := &cobra.Command{
		Use:   "rein",
		Short: "rein runs AI-agent runs under a contract: budgets, granted tools, approvals, an event log",
		Long: `rein is a control plane for AI-agent runs. A model proposes one action per step;
rein decides whether it happens, and records every change as an event.

Without --server, commands run an embedded rein over a local bbolt file (--db).`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		e.started = true
		e.timeoutFlag = cmd.Flags().Lookup("command-timeout") != nil
		return e.resolve(root, cmd, cmd.Annotations[annotationNoProfile] == "")
	}
	root.Version = version.String(version.Get())
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetIn(e.stdin)
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	e.registerGlobals(root.PersistentFlags())
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return usageError("%v", err)
	})
	root.AddCommand(
		newRunCmd(e),
		newInspectCmd(e),
		newEventsCmd(e),
		newExportCmd(e),
		newImportCmd(e),
		newListCmd(e),
		newServeCmd(e),
		newApproveCmd(e),
		newDenyCmd(e),
		newInputCmd(e),
		newSteerCmd(e),
		newScheduleCmd(e),
		newWebhookCmd(e),
		newTasksCmd(e),
		newMCPCmd(e),
		newBudgetCmd(e),
		newCancelCmd(e),
		newDeleteCmd(e),
		newDeletionsCmd(e),
		newPendingCmd(e),
		newReplayCmd(e),
		newUpgradeCmd(e),
		newForkCmd(e),
		newWatchCmd(e),
		newEvaluateCmd(e),
		newCheckCmd(e),
		newCompactCmd(e),
		newBackupCmd(e),
		newRestoreCmd(e),
		newClusterCmd(e),
		newMovedBenchCmd(),
		newVersionCmd(e),
		newConfigCmd(e),
	)
	for _, c := range root.Commands() {
		switch c.Name() {
		case "inspect", "events", "watch", "approve", "deny", "input", "cancel", "export", "fork", "delete":
			c.ValidArgsFunction = completeRunIDs(e)
		}
	}
	// Known before cobra looks for the subcommand, so that "rein --help
	// --db FILE" does not read --db as --help's value.
	root.InitDefaultHelpFlag()
	return root
}

// annotationNoProfile marks the commands that edit the config file: they
// read it but choose no profile (one named may not exist yet).
const annotationNoProfile = "rein/no-profile"

// unreachable says, in words, what to check when the CLI could not talk to
// its --server at all (the connection failed, as opposed to the server
// answering Unavailable), or "".
func unreachable(t *target, st *status.Status) string {
	if t.server == "" || st.Code() != codes.Unavailable {
		return ""
	}
	msg := st.Message()
	switch {
	case handshakeFailed(msg):
		if t.tlsCA == "" && !t.tlsSystemRoots {
			return fmt.Sprintf("the server at %s did not speak plaintext gRPC: if it serves TLS, pass --tls-ca with the CA that signed its certificate", t.server)
		}
		return fmt.Sprintf("the TLS connection to %s failed: check that --tls-ca is the CA that signed the server's certificate, and that the server serves TLS", t.server)
	case strings.Contains(msg, "connection error"), strings.Contains(msg, "dial"), strings.Contains(msg, "connection refused"), strings.Contains(msg, "no such host"):
		return fmt.Sprintf("cannot reach a rein server at %s: is `rein serve` running there, listening on that address?", t.server)
	}
	return ""
}

// handshakeFailed reports whether an Unavailable's message says the
// connection was made but the two sides did not agree on TLS: plaintext to
// a TLS server, or TLS to a plaintext one or with the wrong CA.
func handshakeFailed(msg string) bool {
	for _, s := range []string{"server preface", "first record does not look like a TLS handshake", "tls:", "x509:", "authentication handshake failed"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// exitCode maps an error to its exit code (docs/cli.md, "Exit codes").
func exitCode(err error) int {
	var ee *exitErr
	if errors.As(err, &ee) {
		return ee.code
	}
	if st, ok := status.FromError(err); ok {
		switch st.Code() {
		case codes.InvalidArgument, codes.OutOfRange:
			return exitUsage
		case codes.NotFound:
			return exitNotFound
		case codes.Unauthenticated, codes.PermissionDenied:
			return exitDenied
		case codes.Unavailable:
			return exitUnavailable
		}
		return exitError
	}
	return exitError
}

// clientFlags are the root's persistent flags that only a client of a rein
// server uses (`rein serve` has its own --tls-cert and --tls-key).
var clientFlags = []string{"server", "token", "token-file", "tls-ca", "tls-cert", "tls-key", "tls-system-roots", "insecure-token"}

// hideClientFlags keeps the client-only flags out of cmd's help: they are
// persistent on the root, so cobra would list them as cmd's global flags. The
// flags are shared with the root, so they are hidden only while the help is
// written.
func hideClientFlags(cmd *cobra.Command) {
	help := cmd.HelpFunc()
	cmd.SetHelpFunc(func(c *cobra.Command, args []string) {
		inherited := c.InheritedFlags()
		for _, name := range clientFlags {
			if f := inherited.Lookup(name); f != nil && !f.Hidden {
				f.Hidden = true
				defer func() { f.Hidden = false }()
			}
		}
		help(c, args)
	})
}

// defaultDB is a file under the user's state directory.
func defaultDB() string {
	dir := os.Getenv("XDG_STATE_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "rein.db"
		}
		dir = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(dir, "rein", "rein.db")
}

// newMovedBenchCmd is the hidden `rein bench`, which says where the
// benchmark went: it is its own binary, rein-bench.
func newMovedBenchCmd() *cobra.Command {
	return &cobra.Command{
		Use:                "bench",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(*cobra.Command, []string) error {
			return usageError("the benchmark is its own binary now, rein-bench, with the same scenarios and flags: build it with " +
				"go build -tags reinbench -o .bin/rein-bench ./cmd/rein-bench (docs/benchmarks.md)")
		},
	}
}
