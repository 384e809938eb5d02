// Command policyservice is a policy service for rein: a finance team's
// rules for refunds.create, served as a rein.v1.PolicyService, so that rein
// asks it about every call to a tool whose grant names it (`rein serve
// --policy-service finance=ADDR`, and "policyService": "finance" on the
// grant).
//
//	go run ./examples/policyservice --listen 127.0.0.1:7400 [--limits FILE]
//
// A refund in EUR up to 50.00 is allowed with no person, one up to
// 5,000.00 needs a person's approval, one above it two people's; a run
// started by a principal named bot-… always asks; another currency, or a
// missing or malformed amount or currency, is denied with a reason the
// model can act on. --limits sets other thresholds per tenant. Other tools
// it does not decide. The logic is Finance (policy.go). SIGTERM or Ctrl+C
// stops it gracefully: calls in flight finish first.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/reflection"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
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

// newServer is a gRPC server serving p as rein.v1.PolicyService, with
// reflection (so grpcurl needs no .proto files). It is plaintext: keep it
// on loopback or an internal network.
func newServer(p reinv1.PolicyServiceServer) *grpc.Server {
	gs := grpc.NewServer()
	reinv1.RegisterPolicyServiceServer(gs, p)
	reflection.Register(gs)
	return gs
}

// run serves until ctx ends, then stops gracefully; it returns the exit
// code. Logs go to stderr, the first line naming the address it listens on.
func run(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("policyservice", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:7400", "address to listen on (plaintext: keep it on loopback or an internal network)")
	limitsPath := fs.String("limits", "", `a JSON file of per-tenant limits, {"tenants": {"NAME": {"auto_approve_up_to": 100, "two_people_above": 10000}}}; without it every tenant gets 50 and 5000 EUR`)
	grace := fs.Duration("shutdown-timeout", 10*time.Second, "how long a graceful stop may wait for calls in flight")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "policyservice takes no arguments, only flags (got %q)\nusage: policyservice [--listen HOST:PORT] [--limits FILE]\n", fs.Args())
		return exitUsage
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))

	var tenants map[string]Limits
	if *limitsPath != "" {
		var err error
		if tenants, err = LoadLimits(*limitsPath); err != nil {
			log.Error("policyservice cannot start", "error", err)
			return exitError
		}
	}
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Error("policyservice cannot start", "error", fmt.Errorf("listen on %s: %w", *listen, err))
		return exitError
	}
	gs := newServer(NewFinance(tenants, log))
	named := "none (the defaults for all)"
	if len(tenants) > 0 {
		named = strings.Join(slices.Sorted(maps.Keys(tenants)), ",")
	}
	log.Info("policyservice serving", "addr", lis.Addr().String(), "tool", toolRefund, "tenants_with_limits", named)

	served := make(chan error, 1)
	go func() { served <- gs.Serve(lis) }()
	select {
	case err := <-served:
		log.Error("serve", "error", err)
		return exitError
	case <-ctx.Done():
	}
	log.Info("stopping: calls in flight finish first")
	stopped := make(chan struct{})
	go func() {
		gs.GracefulStop()
		close(stopped)
	}()
	timer := time.NewTimer(*grace)
	defer timer.Stop()
	select {
	case <-stopped:
	case <-timer.C:
		log.Warn("calls still in flight after the shutdown timeout; stopping them", "timeout", grace.String())
		gs.Stop()
		<-stopped
	}
	<-served
	log.Info("policyservice stopped")
	return exitOK
}
