package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"testing"
)

// cliEnv, set, makes the test binary run the CLI with its arguments instead
// of the tests: tests that start `rein serve` in a separate process (to
// kill it, or restart it) start this binary so.
const cliEnv = "REIN_TEST_RUN_CLI"

func TestMain(m *testing.M) {
	if os.Getenv(cliEnv) != "" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}
