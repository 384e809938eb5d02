//go:build reinbench

// Command rein-bench measures rein against the disk it runs on: each
// scenario times rein (the store, the engine, the fold, the watch streams)
// and a baseline doing the same work without it, and prints their ratio.
// It is built apart from rein, with the tag that compiles the storage
// backends' raw ceilings in:
//
//	go build -tags reinbench -o .bin/rein-bench ./cmd/rein-bench
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// Exit codes, as rein's (docs/cli.md, "Exit codes").
const (
	exitOK          = 0
	exitError       = 1
	exitUsage       = 2
	exitUnavailable = 5
)

// exitErr carries an exit code out of the command.
type exitErr struct {
	code int
	err  error
}

func (e *exitErr) Error() string { return e.err.Error() }
func (e *exitErr) Unwrap() error { return e.err }

// usageError is an exit-2 error: a bad flag or scenario.
func usageError(format string, args ...any) error {
	return &exitErr{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// env is where the command writes, and how.
type env struct {
	stdout, stderr io.Writer
	json           bool
}

// writeJSON writes v as one line of JSON.
func writeJSON(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, &env{stdout: os.Stdout, stderr: os.Stderr}, os.Args[1:])
	stop()
	os.Exit(code)
}

// run runs the command with args and returns its exit code; an error is
// printed on stderr.
func run(ctx context.Context, e *env, args []string) int {
	cmd := newRootCmd(e)
	cmd.SetArgs(args)
	cmd.SetOut(e.stdout)
	cmd.SetErr(e.stderr)
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitErr{code: exitUsage, err: err} })
	err := cmd.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(e.stderr, "rein-bench:", err)
	var ee *exitErr
	if errors.As(err, &ee) {
		return ee.code
	}
	return exitError
}
