package etcd

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// Appends that add no status change (a run's steps, the most of its
// appends, with the blobs of their model calls' input) share Txns: group
// commit across runs. A Txn is a raft entry applied on its own, so
// pipelined Txns share etcd's fsyncs but not its per-Txn cost; one Txn
// carrying the appends of many runs does.
//
// The first append queued leads: once fewer than maxBatchesInFlight shared
// Txns are in flight, it takes the appends queued at that moment (of
// distinct runs, within etcd's limits), hands the lead to the next append
// queued, sends them as one Txn with every append's compares and answers
// them. Batches in flight at once hold appends of distinct runs but for a
// run appended to twice at once, and then one of the two is a conflict, as
// it would be one after the other. A batch is all or nothing: when any
// compare fails, none is stored, and each append is sent again alone
// (appendOnce), whose Else branch reads what etcd holds and tells a
// conflict from a stale cache. No timer: the batch is what gathered while the Txns before it
// were sent, and at most maxBatchesInFlight are in flight at once.

// maxBatchesInFlight is how many shared Txns may wait for etcd at once:
// while one is in raft and its fsync, the next gathers and is sent, so
// the two share etcd's fsync. rein-bench steps-runs --store etcd measured
// 1,180-1,310 steps/s with two against 1,040-1,110 with one.
const maxBatchesInFlight = 2

// queued is one append waiting for a batch.
type queued struct {
	runID string
	t     *txn
	wake  chan batched // capacity 1
}

// batched is what a queued append learns: that it leads now, or its
// outcome (stored at rev, or not stored and to be sent alone, or err).
type batched struct {
	lead   bool
	stored bool
	rev    int64
	err    error
}

// batch sends t, run runID's append, in a Txn shared with other runs'.
func (s *Store) batch(ctx context.Context, what, runID string, t *txn) batched {
	q := &queued{runID: runID, t: t, wake: make(chan batched, 1)}
	s.batchMu.Lock()
	s.queue = append(s.queue, q)
	lead := len(s.queue) == 1
	s.batchMu.Unlock()
	if !lead {
		if b := <-q.wake; !b.lead {
			return b
		}
	}
	// q leads: it is the queue's head. It waits for a Txn to be free,
	// takes what queued meanwhile and hands the lead on before it sends.
	s.inFlight <- struct{}{}
	s.batchMu.Lock()
	take := s.takeLocked()
	s.queue = s.queue[len(take):]
	if len(s.queue) > 0 {
		s.queue[0].wake <- batched{lead: true}
	} else {
		s.queue = nil
	}
	s.batchMu.Unlock()
	res := s.commitBatch(ctx, what, take)
	<-s.inFlight
	for _, other := range take[1:] {
		other.wake <- res
	}
	return res
}

// takeLocked is the head of the queue that fits one Txn: appends of
// distinct runs (etcd refuses a Txn that puts one key twice; a run's blobs
// are keyed under the run, so the appends of distinct runs put no key in
// common, a blob two of them bring included), within the store's request
// bytes and compares. s.batchMu must be held.
func (s *Store) takeLocked() []*queued {
	runs := map[string]bool{}
	bytes, cmps := 0, 0
	n := 0
	for _, q := range s.queue {
		if n > 0 && (runs[q.runID] || bytes+q.t.bytes > s.opts.MaxRequestBytes-requestMargin || cmps+len(q.t.cmps) > s.opts.MaxTxnOps/2) {
			break
		}
		runs[q.runID] = true
		bytes += q.t.bytes
		cmps += len(q.t.cmps)
		n++
	}
	return s.queue[:n]
}

// commitBatch sends the appends of take as one Txn, without an Else: a
// failed compare sends each again alone. A batch of one is sent so too, so
// that the appends arriving meanwhile queue behind it and share the next.
func (s *Store) commitBatch(ctx context.Context, what string, take []*queued) batched {
	all := &txn{}
	for _, q := range take {
		all.cmps = append(all.cmps, q.t.cmps...)
		all.ops = append(all.ops, q.t.ops...)
		all.bytes += q.t.bytes
	}
	ops, err := nest(all, s.opts.MaxTxnOps)
	if err != nil {
		return batched{} // too wide to share: each alone
	}
	wctx, cancel := s.writeCtx(ctx)
	defer cancel()
	resp, err := send(wctx, s.kv, &pb.TxnRequest{Compare: all.cmps, Success: ops})
	if err != nil {
		// Not the leader's context: its cancellation is not the others'.
		return batched{err: s.etcdErr(context.Background(), what, err)}
	}
	if !resp.Succeeded {
		return batched{}
	}
	s.commits.Add(1)
	return batched{stored: true, rev: resp.Header.Revision}
}
