//go:build reinbench

package etcd

import (
	"fmt"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/reinhq/rein/internal/store"
)

// txnShape is what one of BenchmarkTxnShapes' Txns carries beside a step's
// two events.
type txnShape struct {
	name string
	// compares: the version's (the run key's revision) and the epoch's
	// (the lease key's), as the engine's fenced appends carry them.
	compares bool
	snapshot bool
	// blobs: the transcript's two blobs, every other Txn (the commit that
	// holds model_requested).
	blobs bool
}

var txnShapes = []txnShape{
	{name: "events"},
	{name: "compares", compares: true},
	{name: "snapshot", snapshot: true},
	{name: "compares+snapshot", compares: true, snapshot: true},
	{name: "blobs", blobs: true},
	{name: "store", compares: true, snapshot: true, blobs: true},
}

// BenchmarkTxnShapes measures what etcd itself charges for the shape of a
// step's Txn, with none of rein's work: serial Txns (each waits for the
// one before it, as one run's steps do) against one durable member, of the
// sizes a step's appends carry in rein-bench steps (events of ~120 and
// ~350 bytes, a ~150-byte snapshot, blobs of 259 and 66 bytes with keys
// of their hash). "events" is the ceiling of the events alone, "store"
// the store's whole shape. Each iteration sends one Txn of every shape, in
// turn, so that the machine's drift falls on every shape alike; the
// median of each shape's round trips is reported as <shape>-µs:
//
//	go test -run '^$' -bench TxnShapes -benchtime 3000x ./internal/store/etcd/
func BenchmarkTxnShapes(b *testing.B) {
	cli := durableEtcdClient(b)
	kv, err := kvClient(cli)
	if err != nil {
		b.Fatal(err)
	}
	const run = "run_01M8TME4QYB14MMA62C7VEFHF3"
	pair := [2][2][]byte{
		{[]byte(strings.Repeat("r", 129)), []byte(strings.Repeat("t", 118))}, // model_returned, tool_requested
		{[]byte(strings.Repeat("o", 331)), []byte(strings.Repeat("m", 366))}, // tool_returned, model_requested
	}
	snapshot := []byte(strings.Repeat("s", 150))
	blobs := [2][]byte{[]byte(strings.Repeat("b", 259)), []byte(strings.Repeat("c", 66))}
	round := benchRound.Add(1)
	ks := make([]keys, len(txnShapes))
	revs := make([]int64, len(txnShapes))
	times := make([][]time.Duration, len(txnShapes))
	for j := range txnShapes {
		ks[j] = keys{fmt.Sprintf("/shapes/%d/%d/", round, j)}
	}
	for i := 0; b.Loop(); i++ {
		seq := uint64(2*i + 2)
		events := pair[i%2]
		for j, shape := range txnShapes {
			k := ks[j]
			req := &pb.TxnRequest{Success: []*pb.RequestOp{
				putOp(k.event(run, seq), events[0], 0),
				putOp(k.event(run, seq+1), events[1], 0),
			}}
			if shape.compares {
				version := revs[j]
				if !shape.snapshot {
					version = 0 // no snapshot is put: the run key stays absent
				}
				req.Compare = []*pb.Compare{modIs(k.run(run), version), modIs(k.lease(run), 0)}
			}
			if shape.snapshot {
				req.Success = append(req.Success, putOp(k.run(run), snapshot, 0))
			}
			if shape.blobs && i%2 == 1 {
				for n, blob := range blobs {
					hash := store.BlobHash(fmt.Appendf(nil, "%d/%d/%d", j, i, n))
					req.Success = append(req.Success, putOp(k.blob(run, hash), blob, 0))
				}
			}
			t0 := time.Now()
			resp, err := send(b.Context(), kv, req)
			if err != nil || !resp.Succeeded {
				b.Fatalf("%s Txn %d: succeeded %v, %v", shape.name, i, resp != nil && resp.Succeeded, err)
			}
			times[j] = append(times[j], time.Since(t0))
			revs[j] = resp.Header.Revision
		}
	}
	for j, shape := range txnShapes {
		b.ReportMetric(median(times[j]), shape.name+"-µs")
	}
}
