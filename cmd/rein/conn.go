package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/reinhq/rein/client"
	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/server/assembly"
)

// conn is a client of a rein server and how to let it go.
type conn struct {
	*client.Client
	runs reinv1.RunServiceClient
	// remote is true for --server; false for the embedded server.
	remote bool
	// retries is true when calls that find the --server unavailable are
	// tried again (--command-timeout above 0); stderr hears of it.
	retries bool
	stderr  io.Writer
	server  string
	close   func()
}

// connect returns a client of t's --server, or of an embedded server over
// its --db set up as s says; stderr hears of a watch's reconnections and of
// retries.
func connect(ctx context.Context, t *target, stderr io.Writer, s *setup) (*conn, error) {
	if t.server == "" {
		return embedded(ctx, t.db, s)
	}
	if s != nil && s.executor != nil {
		return nil, usageError("--tools, --workspace, --tool-server and --mcp apply to the embedded server; with --server, the server's own tools (rein serve) run")
	}
	// A reply is bounded by the server (its pages, its inline bounds); one
	// blob, such as a large write's preview, may still pass gRPC's 4 MiB
	// default, and rein export and replay must read it whole.
	token, err := t.bearerToken()
	if err != nil {
		return nil, err
	}
	c, err := client.Dial(t.server, client.Options{Token: token, CAFile: t.tlsCA, CertFile: t.tlsCert, KeyFile: t.tlsKey,
		SystemRoots: t.tlsSystemRoots, InsecureToken: t.insecureToken,
		Backoff: client.Backoff{Min: retryMin, Max: retryMax, Patience: t.patience()},
		// A watch that lost its stream says so, and that it goes on.
		OnReconnect: func(err error, wait time.Duration) {
			fmt.Fprintf(stderr, "rein: the stream from %s was cut (%s); reconnecting in %s, resuming where it stopped\n",
				t.server, status.Convert(err).Message(), wait.Round(time.Millisecond))
		},
		DialOptions: []grpc.DialOption{
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxReplyBytes)),
			// gRPC's own reconnection waits up to 2 minutes by default; a
			// server back from a restart is found within retryMax.
			grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{
				BaseDelay: retryMin, Multiplier: 1.6, Jitter: 0.2, MaxDelay: retryMax,
			}, MinConnectTimeout: 20 * time.Second}),
		}})
	if errors.Is(err, client.ErrPlaintextToken) {
		return nil, usageError("%v to %s, which is not a loopback address: use TLS (--tls-ca FILE or --tls-system-roots), or pass --insecure-token on a network you trust", client.ErrPlaintextToken, t.server)
	}
	if err != nil {
		return nil, usageError("%v", err)
	}
	return &conn{Client: c, runs: c.Runs, remote: true, retries: t.timeoutFlag && t.commandTimeout > 0,
		stderr: stderr, server: t.server, close: func() { _ = c.Close() }}, nil
}

// The waits between tries of a --server that is unavailable: from retryMin,
// doubling (with jitter) up to retryMax.
const (
	retryMin = 100 * time.Millisecond
	retryMax = 2 * time.Second
)

// patience is how long the client keeps trying an unavailable --server:
// --command-timeout for the commands that have it (0 there: not at all),
// as long as the command lasts for the others.
func (t *target) patience() time.Duration {
	switch {
	case !t.timeoutFlag:
		return 0
	case t.commandTimeout <= 0:
		return time.Nanosecond
	}
	return t.commandTimeout
}

// retry calls fn, and against a --server calls it again while the server is
// Unavailable, for up to --command-timeout (saying so on stderr once). fn
// must be safe to repeat; see the callers for what a repeat whose first try
// was applied answers.
func (cn *conn) retry(ctx context.Context, fn func(context.Context) error) error {
	if !cn.retries {
		return fn(ctx)
	}
	ctx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	told, mismatched := false, 0
	return cn.Retry(ctx, func(ctx context.Context) error {
		err := fn(ctx)
		if status.Code(err) != codes.Unavailable {
			return err
		}
		if !told {
			told = true
			fmt.Fprintf(cn.stderr, "rein: the server at %s is unavailable; trying again for up to %s (--command-timeout)\n", cn.server, cn.Backoff().Patience)
		}
		// A TLS mismatch does not go away by waiting; one that persists
		// ends the retries (Retry returns this error).
		if mismatched++; !handshakeFailed(status.Convert(err).Message()) {
			mismatched = 0
		} else if mismatched == maxMismatched {
			giveUp()
		}
		return err
	})
}

// maxMismatched is how many TLS handshake failures in a row end a retry: one
// could be a server restarting mid-handshake; a few in a row are a plaintext
// client talking to a TLS server, or the other way round.
const maxMismatched = 3

// embeddedMaxRecv is the largest message between the CLI and its embedded
// server, either way: the server's one caller is this process, `rein
// import` sends a whole export file in one request, and a GetBlobs answer
// holds a blob whatever its size.
const embeddedMaxRecv = math.MaxInt32

// maxReplyBytes is the largest reply the CLI takes from a --server.
const maxReplyBytes = math.MaxInt32

// embedded starts rein in this process on the bbolt file at db and connects
// to it through the generated client over an in-memory gRPC connection, so
// the CLI runs the same service code, interceptors included, as a remote
// server.
func embedded(ctx context.Context, db string, s *setup) (*conn, error) {
	return serveEmbedded(ctx, embeddedConfig(db, false, s))
}

// embeddedReadOnly is embedded on the store at db opened read-only, for the
// commands that only read.
func embeddedReadOnly(ctx context.Context, db string) (*conn, error) {
	return serveEmbedded(ctx, embeddedConfig(db, true, nil))
}

// serveEmbedded starts the server cfg describes (assembly.Start) and
// connects to it in memory.
func serveEmbedded(ctx context.Context, cfg assembly.Config) (*conn, error) {
	r, err := assembly.Start(ctx, cfg)
	if err != nil {
		return nil, startError(err)
	}
	cc, err := grpc.NewClient("passthrough:///rein-embedded",
		grpc.WithContextDialer(r.DialContext),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(embeddedMaxRecv)),
	)
	if err != nil {
		r.Close()
		return nil, err
	}
	c := client.New(cc)
	return &conn{
		Client: c,
		runs:   c.Runs,
		close: func() {
			_ = cc.Close()
			r.Close()
			if err := r.ServeErr(); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				fmt.Fprintln(os.Stderr, "rein: embedded server:", err)
			}
		},
	}, nil
}
