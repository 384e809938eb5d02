//go:build reinbench

package etcd

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// Ceiling is the raw etcd work this package's appends and scans come down
// to, in the same layout (P event/<run id>/<seq>), with none of the store's
// logic: no read, no fold, no compare, no index. rein-bench compares the
// store against it; it implements the bench's Ceiling and StateCeiling
// (whose commits also put the snapshot and the blobs the store puts with
// a step's events, as raw bytes), whose stores are named by a path: Prefix
// maps the path to the key prefix the store of that path is opened on.
type Ceiling struct {
	Client *clientv3.Client
	Prefix func(path string) string
	// Timeout bounds each request; zero means DefaultTimeout.
	Timeout time.Duration
}

// CreateLog returns put, which writes data[i] as sequence seqs[i] of run
// runIDs[runs[i]] under the prefix of path in one Txn (concurrent puts are
// concurrent Txns: etcd batches them into shared raft entries and fsyncs),
// and closeLog, which does nothing: the Ceiling does not own the client.
func (c Ceiling) CreateLog(path string, runIDs []string) (put func(runs []int, seqs []uint64, data [][]byte) error, closeLog func() error, err error) {
	k := keys{c.Prefix(path)}
	write, err := c.writer()
	if err != nil {
		return nil, nil, err
	}
	put = func(runs []int, seqs []uint64, data [][]byte) error {
		t := &txn{ops: make([]*pb.RequestOp, len(runs))}
		for i, run := range runs {
			t.ops[i] = putOp(k.event(runIDs[run], seqs[i]), data[i], 0)
		}
		return write(t)
	}
	return put, func() error { return nil }, nil
}

// writer returns write, which sends a Txn's puts as the store sends its
// writes: nested over --max-txn-ops as the store nests them, with no
// compare, bounded by the Ceiling's timeout.
func (c Ceiling) writer() (write func(t *txn) error, err error) {
	timeout := Options{Timeout: c.Timeout}.withDefaults().Timeout
	kv, err := kvClient(c.Client)
	if err != nil {
		return nil, err
	}
	return func(t *txn) error {
		ops, err := nest(t, DefaultMaxTxnOps)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		_, err = send(ctx, kv, &pb.TxnRequest{Success: ops})
		return err
	}, nil
}

// CreateStateLog returns put, which writes, in one Txn and in the store's
// layout, data[i] as sequence first+i of run runIDs[run] under the prefix
// of path, snapshot as the run's snapshot (P run/<run id>) and each blob
// as the store puts a run's blob (putBlobs): the same bytes as the store's
// append of those events, with none of its compares, reads or folds. It
// implements the bench's StateCeiling.
func (c Ceiling) CreateStateLog(path string, runIDs []string) (put func(run int, first uint64, data [][]byte, snapshot []byte, blobs map[string][]byte) error, closeLog func() error, err error) {
	k := keys{c.Prefix(path)}
	write, err := c.writer()
	if err != nil {
		return nil, nil, err
	}
	put = func(run int, first uint64, data [][]byte, snapshot []byte, blobs map[string][]byte) error {
		id := runIDs[run]
		t := &txn{}
		for i, d := range data {
			t.put(k.event(id, first+uint64(i)), d)
		}
		t.put(k.run(id), snapshot)
		putBlobs(t, k, id, blobs)
		return write(t)
	}
	return put, func() error { return nil }, nil
}

// Scan calls fn with each stored event of runID under the prefix of path,
// in order, its seal skipped unchecked (checking it is the store's work,
// not the raw scan's), a page of keys per range.
func (c Ceiling) Scan(path, runID string, fn func(seq uint64, data []byte) error) error {
	k := keys{c.Prefix(path)}
	timeout := Options{Timeout: c.Timeout}.withDefaults().Timeout
	prefix := k.events(runID)
	from := prefix
	for {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		resp, err := c.Client.Get(ctx, from, clientv3.WithRange(clientv3.GetPrefixRangeEnd(prefix)), clientv3.WithLimit(scanPage))
		cancel()
		if err != nil {
			return fmt.Errorf("scan run %s: %w", runID, err)
		}
		for _, kv := range resp.Kvs {
			seq, err := strconv.ParseUint(strings.TrimPrefix(string(kv.Key), prefix), 16, 64)
			if err != nil {
				return fmt.Errorf("scan run %s: key %q is not an event's", runID, kv.Key)
			}
			v := kv.Value
			if len(v) >= sealLen && v[0] == sealMarker {
				v = v[sealLen:]
			}
			if err := fn(seq, v); err != nil {
				return err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// scanPage is how many events one range of a scan reads.
const scanPage = 1024

// Commits is the number of write Txns this Store sent that etcd took (the
// bench's count of commits: here one per append, create or acquire).
func (s *Store) Commits() uint64 { return s.commits.Load() }

// ScanEvents calls fn with each stored event of a run after a sequence, in
// order, decoding into one reused Event, a page of keys per range. fn must
// not keep ev.
func (s *Store) ScanEvents(runID string, after uint64, fn func(ev *reinv1.Event) error) error {
	if err := s.enter("read store"); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	ctx := context.Background()
	prefix := s.keys.events(runID)
	ev := &reinv1.Event{}
	want := after + 1
	for {
		resp, err := s.read(ctx, fmt.Sprintf("read run %s events from %d", runID, want),
			clientv3.OpGet(s.keys.run(runID), clientv3.WithKeysOnly()),
			clientv3.OpGet(s.keys.event(runID, want), clientv3.WithRange(clientv3.GetPrefixRangeEnd(prefix)), clientv3.WithLimit(scanPage)))
		if err != nil {
			return err
		}
		if kvOf(resp, 0) == nil {
			if _, err := s.load(ctx, runID); err != nil {
				return err
			}
			return notFound(runID)
		}
		r := resp.Responses[1].GetResponseRange()
		for _, kv := range r.GetKvs() {
			ev.Reset()
			if err := decodeEvent(runID, want, prefix, kv, ev); err != nil {
				return err
			}
			if err := fn(ev); err != nil {
				return err
			}
			want++
		}
		if !r.GetMore() {
			return nil
		}
	}
}
