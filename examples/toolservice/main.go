// Command toolservice is a tool service for rein: invoices and refunds on
// its own bbolt file, served as a rein.v1.ToolService, so that rein runs
// its tools over gRPC (`rein serve --tool-server billing=ADDR`).
//
//	go run ./examples/toolservice --db /tmp/billing.db --listen 127.0.0.1:7300
//
// invoices.get reads an invoice; refunds.create refunds part of a paid one.
// A refund is proposed (a preview, nothing written), committed once per
// operation ID in the same bbolt transaction as its record, and refused if
// its approved preview no longer matches the invoice. LookupWrite finds a
// refund by its operation ID. The logic is a tools.Executor (refunds.go)
// served by remote.NewServer. SIGTERM or Ctrl+C stops it gracefully: calls
// in flight finish, then the file closes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/reflection"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/tools/remote"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}

// Exit codes of run.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// run serves until ctx ends, then stops gracefully; it returns the exit
// code. Logs go to stderr, the first line naming the address it listens on.
func run(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("toolservice", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dbPath := fs.String("db", "", "the service's bbolt file, created with a few invoices on first use (required)")
	listen := fs.String("listen", "127.0.0.1:7300", "address to listen on (plaintext: keep it on loopback or an internal network)")
	grace := fs.Duration("shutdown-timeout", 10*time.Second, "how long a graceful stop may wait for calls in flight")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if *dbPath == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: toolservice --db FILE [--listen HOST:PORT]")
		return exitUsage
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))

	billing, err := Open(*dbPath)
	if err != nil {
		log.Error("toolservice cannot start", "error", err)
		return exitError
	}
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		_ = billing.Close()
		log.Error("toolservice cannot start", "error", fmt.Errorf("listen on %s: %w", *listen, err))
		return exitError
	}
	gs := grpc.NewServer()
	reinv1.RegisterToolServiceServer(gs, remote.NewServer(billing))
	reflection.Register(gs)
	log.Info("toolservice serving", "addr", lis.Addr().String(), "db", *dbPath, "tools", "invoices.get refunds.create")

	served := make(chan error, 1)
	go func() { served <- gs.Serve(lis) }()
	code := exitOK
	select {
	case err := <-served:
		log.Error("serve", "error", err)
		code = exitError
	case <-ctx.Done():
		log.Info("stopping: calls in flight finish, then the file closes")
		stopped := make(chan struct{})
		go func() {
			gs.GracefulStop()
			close(stopped)
		}()
		timer := time.NewTimer(*grace)
		select {
		case <-stopped:
			timer.Stop()
		case <-timer.C:
			log.Warn("calls still in flight after the shutdown timeout; stopping them", "timeout", grace.String())
			gs.Stop()
			<-stopped
		}
		<-served
	}
	if err := billing.Close(); err != nil {
		log.Error("close the file", "error", err)
		return exitError
	}
	log.Info("toolservice stopped")
	return code
}
