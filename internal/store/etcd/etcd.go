package etcd

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
)

// The values of P meta/layout. layoutV1 marks a prefix written before runs
// kept their blobs apart (P blob/ only); layoutV2 one whose runs may hold
// P rblob/ keys, which a build that knows only layoutV1 would not read.
// This package reads both and marks every prefix it opens layoutV2, so a
// build that knows only layoutV1 refuses the prefix instead of missing
// blobs. layoutV3 marks a prefix finalized to store format 7 or later
// (FinalizeFormat puts it): the builds from before store formats check
// only the layout, and refuse it.
const (
	layoutV1 = "rein-etcd-1"
	layoutV2 = "rein-etcd-2"
	layoutV3 = "rein-etcd-3"
)

// ChunkBytes is the most a blob chunk holds.
const ChunkBytes = 256 << 10

// Defaults of Options, those of an etcd server started without flags.
const (
	DefaultTimeout         = 5 * time.Second
	DefaultMaxRequestBytes = 1536 << 10 // etcd's --max-request-bytes
	DefaultMaxTxnOps       = 128        // etcd's --max-txn-ops
	DefaultMaxBlobBytes    = 1 << 20
)

// requestMargin is what a Txn's size estimate leaves for the request's own
// framing (the compares, the Else branch, protobuf tags).
const requestMargin = 8 << 10

// maxAttempts bounds how often a write is validated again after a Txn
// failed for a reason that was not a conflict of its own (the change cursor
// moved, a cached value was stale).
const maxAttempts = 64

// maxCached bounds the cache of run states.
const maxCached = 16384

// Options tune Open. Zero fields take the defaults above.
type Options struct {
	// Timeout bounds every request to etcd; past it the call fails with
	// store.ErrUnavailable.
	Timeout time.Duration
	// MaxRequestBytes is the etcd server's --max-request-bytes: a Txn
	// larger is refused before it is sent. Writes go over the client's
	// connection without its MaxCallSendMsgSize (send, txn.go), so this is
	// their one bound on the client's side.
	MaxRequestBytes int
	// MaxTxnOps is the etcd server's --max-txn-ops.
	MaxTxnOps int
	// MaxBlobBytes is the largest blob the store takes; it must leave room
	// in MaxRequestBytes for the events that bring it.
	MaxBlobBytes int
	// Outbox, when set, makes the webhook deliveries of each create,
	// import and append, put in its Txn (outbox.go). Every server on the
	// prefix must set it once any tenant has a subscription.
	Outbox store.Outbox
}

func (o Options) withDefaults() Options {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxRequestBytes <= 0 {
		o.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if o.MaxTxnOps <= 0 {
		o.MaxTxnOps = DefaultMaxTxnOps
	}
	if o.MaxBlobBytes <= 0 {
		o.MaxBlobBytes = min(DefaultMaxBlobBytes, o.MaxRequestBytes-2*requestMargin)
	}
	return o
}

// Store is the etcd event store. It implements store.Store. It embeds its
// satellites, each a job of its own over the Store's etcd client (doc.go),
// so that a Store is also the Follower, the Relay, the Locks and the
// RateCells its servers are given; Close closes them with it.
type Store struct {
	*conn             // the etcd client, shared with the satellites
	kv    pb.KVClient // cli's KV service, for writes (send)
	opts  Options

	// The satellites: each its own job over the one client (conn).
	*Follower  // what the other servers commit (follower.go)
	*Relay     // the model output of calls in flight (relay.go)
	*Locks     // the locks the replicas share (locks.go)
	*RateCells // the rate buckets the replicas share (ratecells.go)

	// changesMu serialises this Store's writes that add a status change
	// (they share the change cursor); it guards head. Lock order: changesMu
	// before cacheMu.
	changesMu sync.Mutex
	head      cursorAt

	// cacheMu guards cache: each run's state, snapshot revision and lease as
	// this Store last wrote or read them. A stale entry costs one failed
	// Txn, never a wrong write: the Txn compares what the entry says.
	cacheMu sync.Mutex
	cache   map[string]runAt

	// batchMu guards queue, the appends waiting for a shared Txn
	// (batch.go); queue[0] leads.
	batchMu sync.Mutex
	queue   []*queued
	// inFlight holds a token for each shared Txn sent and not yet
	// answered: at most maxBatchesInFlight at once.
	inFlight chan struct{}

	// commits counts the write Txns etcd took, for the benchmarks.
	commits atomic.Uint64

	// outbox is Options.Outbox; hooks caches the tenants' webhook
	// subscriptions it matches (webhooks.go).
	outbox store.Outbox
	hooks  hookCache
}

var _ store.Store = (*Store)(nil)

// cursorAt is the change cursor and the ModRevision of its key (0: absent).
type cursorAt struct {
	known  bool
	cursor uint64
	rev    int64
}

// runAt is a run as stored at a revision.
type runAt struct {
	st       runstate.State // with its contract, unless the run ended or it was not read
	snapRev  int64          // ModRevision of P run/<id>
	epoch    uint64
	owner    string
	leaseRev int64 // ModRevision of P lease/<id>; 0 when there is none
	own      ownerAt
}

// Open opens the rein store under prefix on the etcd cluster cli talks to.
// An empty prefix gets the layout marker; a prefix that holds keys but no
// marker, or a marker of a layout this rein does not know, is refused, and
// nothing is written. The caller keeps cli and closes it after the Store.
func Open(ctx context.Context, cli *clientv3.Client, prefix string, opts Options) (*Store, error) {
	if prefix == "" || !strings.HasSuffix(prefix, "/") {
		return nil, fmt.Errorf("open etcd store: prefix %q must be non-empty and end in \"/\" (for example /rein/), so that it names a key range of its own", prefix)
	}
	kv, err := kvClient(cli)
	if err != nil {
		return nil, fmt.Errorf("open etcd store: %w", err)
	}
	opts = opts.withDefaults()
	c := &conn{cli: cli, keys: keys{prefix}, timeout: opts.Timeout}
	s := &Store{conn: c, Follower: &Follower{c}, Relay: &Relay{c}, Locks: &Locks{conn: c}, RateCells: &RateCells{c}, kv: kv, opts: opts, cache: map[string]runAt{}, inFlight: make(chan struct{}, maxBatchesInFlight), outbox: opts.Outbox}
	if s.opts.MaxBlobBytes > s.opts.MaxRequestBytes-2*requestMargin {
		return nil, fmt.Errorf("open etcd store: MaxBlobBytes %d leaves no room for events in a request of MaxRequestBytes %d; lower it or raise both",
			s.opts.MaxBlobBytes, s.opts.MaxRequestBytes)
	}
	what := fmt.Sprintf("open the rein store at etcd prefix %q", prefix)
	for {
		rctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
		resp, err := cli.Txn(rctx).Then(
			clientv3.OpGet(s.keys.layout()),
			clientv3.OpGet(prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(1)),
		).Commit()
		cancel()
		if err != nil {
			return nil, s.etcdErr(ctx, what, err)
		}
		if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
			switch v := string(kvs[0].Value); v {
			case layoutV2, layoutV3:
			case layoutV1:
				upgraded, err := s.markLayout(ctx, what, clientv3.Compare(clientv3.Value(s.keys.layout()), "=", layoutV1))
				if err != nil {
					return nil, err
				}
				if !upgraded {
					continue // another server changed the marker meanwhile: look again
				}
			default:
				return nil, fmt.Errorf("%s: its layout is %q, and this rein knows only %q, %q and %q; run a rein that knows it (a newer build), or point this one at another prefix",
					what, v, layoutV1, layoutV2, layoutV3)
			}
			if err := s.backfillEnded(ctx); err != nil {
				return nil, err
			}
			return s, nil
		}
		if r := resp.Responses[1].GetResponseRange(); r.GetCount() > 0 {
			return nil, fmt.Errorf("%s: the prefix holds %d keys (the first %q) but no rein layout marker (%s); it is not a rein store, so rein writes nothing there: point rein at an empty prefix or at one a rein made",
				what, r.GetCount(), r.GetKvs()[0].Key, s.keys.layout())
		}
		// Empty: mark it, only if it still holds no key at all.
		marked, err := s.markLayout(ctx, what, clientv3.Compare(clientv3.CreateRevision(prefix).WithPrefix(), "=", 0), clientv3.OpPut(s.keys.endedMark(), "1"))
		if err != nil {
			return nil, err
		}
		if marked {
			return s, nil
		}
		// Someone wrote under the prefix meanwhile: look again.
	}
}

// markLayout puts layoutV2 as the prefix's layout marker, with also, if
// cond still holds; it reports whether it did.
func (s *Store) markLayout(ctx context.Context, what string, cond clientv3.Cmp, also ...clientv3.Op) (bool, error) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.Timeout)
	defer cancel()
	tr, err := s.cli.Txn(wctx).If(cond).Then(append([]clientv3.Op{clientv3.OpPut(s.keys.layout(), layoutV2)}, also...)...).Commit()
	if err != nil {
		return false, s.etcdErr(ctx, what, err)
	}
	return tr.Succeeded, nil
}

// Close waits for the calls in flight, then refuses every later one. It does
// not close the etcd client.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("close etcd store %s: %w", s.keys.p, store.ErrClosed)
	}
	s.closed = true
	s.Locks.close()
	return nil
}

// cached returns the run as this Store last saw it.
func (s *Store) cached(runID string) (runAt, bool) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	r, ok := s.cache[runID]
	return r, ok
}

// remember caches r as the run's. Its contract, which the state an append
// returns holds, is kept while the run lives (a run's contract never
// changes, so one remembered before is kept with a newer r that was read
// without it); a run that ended is cached without it, so the cache keeps
// no contract alive that no driver holds.
func (s *Store) remember(runID string, r runAt) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	if r.st.Contract == nil {
		r.st.Contract = s.cache[runID].st.Contract
	}
	if runstate.Terminal(r.st.Status) {
		r.st.Contract = nil
	}
	if len(s.cache) >= maxCached {
		clear(s.cache)
	}
	s.cache[runID] = r
}

func (s *Store) forget(runID string) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	delete(s.cache, runID)
}

func notFound(runID string) error {
	return fmt.Errorf("run %q: %w", runID, store.ErrNotFound)
}
