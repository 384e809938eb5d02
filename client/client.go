// Package client is the Go client of a rein server: Dial with a token and
// TLS, the generated RunService stub, and a Watch that survives dropped
// connections and server restarts.
package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// Options configure Dial.
type Options struct {
	// Token is sent as "authorization: Bearer TOKEN" on every call.
	Token string
	// CAFile verifies the server's certificate; setting it turns TLS on.
	CAFile string
	// CertFile and KeyFile are the client's certificate for mTLS.
	CertFile, KeyFile string
	// SystemRoots turns TLS on, the server's certificate verified by the
	// system's roots (when CAFile is empty).
	SystemRoots bool
	// InsecureToken lets Token go in plaintext to a host that is not
	// loopback; without it Dial refuses (ErrPlaintextToken), before any
	// connection is made.
	InsecureToken bool
	// DialOptions are added to grpc.NewClient's.
	DialOptions []grpc.DialOption
	// Backoff bounds Watch's and WatchRuns' waits between reconnections;
	// a zero field takes its default.
	Backoff Backoff
	// OnReconnect, when set, is told each time Watch or WatchRuns lost its
	// stream and will open it again after wait: err is why it ended. It
	// must not block.
	OnReconnect func(err error, wait time.Duration)
}

// Backoff bounds the waits between a watch's reconnections, and Retry's
// tries: the first wait is Min, each next one doubles (with jitter) up to
// Max.
type Backoff struct {
	Min, Max time.Duration
	// Patience, when set, is how long Retry goes on trying a server that is
	// Unavailable, and a watch reconnecting with no event handed over,
	// before they return the last error (the CLI's --command-timeout);
	// zero: for as long as ctx allows.
	Patience time.Duration
}

// The default Backoff.
const (
	DefaultBackoffMin = 50 * time.Millisecond
	DefaultBackoffMax = 5 * time.Second
)

// orDefault fills b's zero fields with the defaults.
func (b Backoff) orDefault() Backoff {
	if b.Min <= 0 {
		b.Min = DefaultBackoffMin
	}
	if b.Max <= 0 {
		b.Max = DefaultBackoffMax
	}
	return b
}

// Client is a connection to a rein server.
type Client struct {
	Runs reinv1.RunServiceClient
	// Storage is the server's StorageService: its store as a whole (a
	// backup); it needs the admin role.
	Storage reinv1.StorageServiceClient
	// Cluster shows and finalizes the store format (admin role).
	Cluster reinv1.ClusterServiceClient
	// Webhooks keeps the tenant's webhook subscriptions.
	Webhooks    reinv1.WebhookServiceClient
	conn        *grpc.ClientConn
	backoff     Backoff
	onReconnect func(error, time.Duration)
}

// Dial connects to the rein server at target (host:port), or to any of
// several servers sharing one store (host:port,host:port,…): the client
// connects to the first that answers, in order, and when that one stops
// answering it moves to the next. The connection is made lazily, on the
// first call. A unary call answered ResourceExhausted with a RetryInfo is
// sent again after the server's delay (see MaxRetryInfoAttempts).
func Dial(target string, opts Options) (*Client, error) {
	creds := insecure.NewCredentials()
	tlsOn := opts.CAFile != "" || opts.CertFile != "" || opts.SystemRoots
	servers := strings.Split(target, ",")
	for _, s := range servers {
		if strings.TrimSpace(s) == "" {
			return nil, fmt.Errorf("dial rein server %q: an empty address in the list; give host:port[,host:port…]", target)
		}
		if opts.Token != "" && !tlsOn && !opts.InsecureToken && !loopback(strings.TrimSpace(s)) {
			return nil, fmt.Errorf("%w to %s, which is not a loopback address: use TLS (Options.CAFile or SystemRoots), or set Options.InsecureToken on a network you trust", ErrPlaintextToken, s)
		}
	}
	if tlsOn {
		cfg, err := tlsConfig(opts)
		if err != nil {
			return nil, err
		}
		creds = credentials.NewTLS(cfg)
	}
	// honourRetryInfo comes first, so that interceptors in DialOptions see
	// each try.
	// The OpenTelemetry stats handler sends the caller's trace context (from
	// ctx, with the global propagator) so that its trace continues into
	// rein; with no tracing set up it does nothing.
	dopts := append([]grpc.DialOption{grpc.WithTransportCredentials(creds), grpc.WithChainUnaryInterceptor(honourRetryInfo),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler())}, opts.DialOptions...)
	if opts.Token != "" {
		dopts = append(dopts, grpc.WithPerRPCCredentials(bearer(opts.Token)))
	}
	dialed := target
	if len(servers) > 1 {
		// The list is the channel's addresses, tried in order (gRPC's
		// pick_first); each is verified under its own host name with TLS.
		r := manual.NewBuilderWithScheme("rein-servers")
		var addrs []resolver.Address
		for _, s := range servers {
			s = strings.TrimSpace(s)
			host, _, err := net.SplitHostPort(s)
			if err != nil {
				return nil, fmt.Errorf("dial rein server %s: %w; give host:port", s, err)
			}
			addrs = append(addrs, resolver.Address{Addr: s, ServerName: host})
		}
		r.InitialState(resolver.State{Addresses: addrs})
		dopts = append(dopts, grpc.WithResolvers(r))
		dialed = r.Scheme() + ":///servers"
	}
	cc, err := grpc.NewClient(dialed, dopts...)
	if err != nil {
		return nil, fmt.Errorf("dial rein server %s: %w", target, err)
	}
	return &Client{Runs: reinv1.NewRunServiceClient(cc), Storage: reinv1.NewStorageServiceClient(cc), Cluster: reinv1.NewClusterServiceClient(cc), Webhooks: reinv1.NewWebhookServiceClient(cc), conn: cc, backoff: opts.Backoff.orDefault(), onReconnect: opts.OnReconnect}, nil
}

// ErrPlaintextToken is Dial's refusal to send a bearer token without TLS to
// a host that is not loopback, where anyone on the path could read it.
var ErrPlaintextToken = errors.New("refusing to send the bearer token in plaintext")

// loopback reports whether target (host:port, optionally dns:/// or
// passthrough:///, or a unix socket) is this machine: "localhost" or a
// loopback IP. Names are not resolved: one that happens to point here is
// not known to be loopback.
func loopback(target string) bool {
	if strings.HasPrefix(target, "unix:") || strings.HasPrefix(target, "unix-abstract:") {
		return true
	}
	for _, scheme := range []string{"dns:///", "passthrough:///"} {
		target = strings.TrimPrefix(target, scheme)
	}
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		host = target
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// New wraps an existing connection (an in-process server, say); its
// watches reconnect with the default Backoff.
func New(cc *grpc.ClientConn) *Client {
	return &Client{Runs: reinv1.NewRunServiceClient(cc), Storage: reinv1.NewStorageServiceClient(cc), Cluster: reinv1.NewClusterServiceClient(cc), Webhooks: reinv1.NewWebhookServiceClient(cc), conn: cc, backoff: Backoff{}.orDefault()}
}

// Backoff is the client's Backoff, its defaults filled in.
func (c *Client) Backoff() Backoff { return c.backoff }

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

func tlsConfig(opts Options) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if opts.CAFile != "" {
		pem, err := os.ReadFile(opts.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read CA file: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: no PEM certificate found", opts.CAFile)
		}
	}
	if opts.CertFile != "" || opts.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(opts.CertFile, opts.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("load client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// bearer sends a token with every call.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

// RequireTransportSecurity is false so that a token works over plaintext
// loopback too; use TLS for anything else.
func (bearer) RequireTransportSecurity() bool { return false }

// Watch follows a run's events after a sequence and hands each event to fn
// exactly once, in order. When the stream breaks (a dropped connection, a
// server restarting), it reconnects with Options.Backoff and resumes from
// the last sequence it handed over. It returns nil when the run is terminal and every
// event was handed over, fn's error if fn fails, ctx's error when ctx ends,
// and the server's error for anything that retrying cannot fix (NotFound,
// PermissionDenied, OutOfRange, …), or that did not go away after
// maxStuckRetries tries in a row with no progress (ResourceExhausted,
// Internal, …: only Unavailable is retried for as long as ctx, and
// Backoff.Patience if set, allow).
func (c *Client) Watch(ctx context.Context, runID string, after uint64, fn func(*reinv1.Event) error) error {
	return c.watch(ctx, runID, after, fn, nil)
}

// WatchOutput is Watch that also hands out the text of the run's model
// calls in flight as the server sends it (WatchRunRequest.model_output),
// in order with the events. The text is not events: after a reconnection
// the call in flight is sent again from its start (a ModelOutput at offset
// 0), so out must start the call's text over at offset 0.
func (c *Client) WatchOutput(ctx context.Context, runID string, after uint64, fn func(*reinv1.Event) error, out func(*reinv1.ModelOutput) error) error {
	return c.watch(ctx, runID, after, fn, out)
}

func (c *Client) watch(ctx context.Context, runID string, after uint64, fn func(*reinv1.Event) error, out func(*reinv1.ModelOutput) error) error {
	r := c.reconnector()
	for {
		done, err := c.watchOnce(ctx, runID, &after, fn, out, r)
		if done {
			return err
		}
		if retry, err := r.reconnect(ctx, err); !retry {
			return err
		}
	}
}

// watchOnce is one attempt of watch: one stream, which it cancels however
// it ends, so that a callback's error or a refused gap never leaves the
// stream open on the server until ctx ends. It returns done with the
// error to return (the callbacks' or a gap's), or the stream's error for
// reconnect to judge.
func (c *Client) watchOnce(ctx context.Context, runID string, after *uint64, fn func(*reinv1.Event) error, out func(*reinv1.ModelOutput) error, r *reconnector) (done bool, _ error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.Runs.WatchRun(ctx, &reinv1.WatchRunRequest{RunId: runID, AfterSequence: *after, ModelOutput: out != nil})
	for err == nil {
		var resp *reinv1.WatchRunResponse
		if resp, err = stream.Recv(); err != nil {
			break
		}
		if o := resp.GetOutput(); o != nil {
			if out == nil {
				continue // not asked for
			}
			if err := out(o); err != nil {
				return true, err
			}
			r.progress()
			continue
		}
		ev := resp.GetEvent()
		if ev.GetSequence() <= *after {
			continue // never twice
		}
		if ev.GetSequence() != *after+1 {
			return true, fmt.Errorf("watch run %s: got sequence %d after %d: the server skipped events", runID, ev.GetSequence(), *after)
		}
		if err := fn(ev); err != nil {
			return true, err
		}
		*after = ev.GetSequence()
		r.progress()
	}
	return false, err
}

// maxStuckRetries bounds how many times in a row a watch tries again after
// an error other than Unavailable with no event handed over in between: a
// ResourceExhausted (a message over the limit, a full disk) or an Internal
// that persists is the server's answer, not a dropped connection, and
// retrying it for ever would hide it.
const maxStuckRetries = 5

// reconnector is a watch's state between reconnections: the next wait, the
// tries in a row with no progress, and since when.
type reconnector struct {
	b     Backoff
	wait  time.Duration
	stuck int
	since time.Time // the first failure since the last progress; zero: none
	told  func(error, time.Duration)
}

func (c *Client) reconnector() *reconnector {
	return &reconnector{b: c.backoff, wait: c.backoff.Min, told: c.onReconnect}
}

// progress records an event handed over: the next failure starts afresh.
func (r *reconnector) progress() {
	r.wait, r.stuck, r.since = r.b.Min, 0, time.Time{}
}

// reconnect decides what follows a stream that ended with err: a normal end
// (nil, no retry), an error retrying cannot fix, one that persisted past
// maxStuckRetries tries in a row, or past Backoff.Patience with no progress,
// or the end of ctx (that error, no retry), or a retry after a jittered
// pause that doubles up to Backoff.Max (at least a RetryInfo's delay).
func (r *reconnector) reconnect(ctx context.Context, err error) (retry bool, _ error) {
	switch {
	case ctx.Err() != nil:
		return false, ctx.Err()
	case errors.Is(err, io.EOF):
		return false, nil
	case !retryable(err):
		return false, err
	case status.Code(err) != codes.Unavailable:
		if r.stuck++; r.stuck > maxStuckRetries {
			return false, err
		}
	}
	if r.since.IsZero() {
		r.since = time.Now()
	}
	pause := r.wait/2 + rand.N(r.wait/2+1)
	if d, ok := RetryDelay(err); ok {
		pause = max(pause, d)
	}
	if r.b.Patience > 0 && time.Since(r.since)+pause > r.b.Patience {
		return false, err
	}
	if r.told != nil {
		r.told(err, pause)
	}
	if !sleep(ctx, pause) {
		return false, ctx.Err()
	}
	r.wait = min(2*r.wait, r.b.Max)
	return true, nil
}

// WatchRuns follows status changes across the caller's runs after a cursor,
// reconnecting like Watch. It returns only with fn's error, ctx's, or an
// error retrying cannot fix.
func (c *Client) WatchRuns(ctx context.Context, req *reinv1.WatchRunsRequest, fn func(*reinv1.RunChange) error) error {
	req = proto.Clone(req).(*reinv1.WatchRunsRequest)
	r := c.reconnector()
	for {
		done, err := c.watchRunsOnce(ctx, req, fn, r)
		if done {
			return err
		}
		if retry, err := r.reconnect(ctx, err); !retry {
			return err
		}
	}
}

// watchRunsOnce is one attempt of WatchRuns, on a stream of its own that it
// cancels however it ends (watchOnce).
func (c *Client) watchRunsOnce(ctx context.Context, req *reinv1.WatchRunsRequest, fn func(*reinv1.RunChange) error, r *reconnector) (done bool, _ error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.Runs.WatchRuns(ctx, req)
	for err == nil {
		var resp *reinv1.WatchRunsResponse
		if resp, err = stream.Recv(); err != nil {
			break
		}
		ch := resp.GetChange()
		if ch.GetCursor() <= req.GetAfterCursor() {
			continue
		}
		if err := fn(ch); err != nil {
			return true, err
		}
		req.AfterCursor = ch.GetCursor()
		r.progress()
	}
	return false, err
}

// retryable reports whether a watch error may go away by reconnecting
// (all but Unavailable only a few times: maxStuckRetries).
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.Internal, codes.Aborted, codes.ResourceExhausted, codes.Unknown, codes.DeadlineExceeded:
		return true
	}
	return false
}
