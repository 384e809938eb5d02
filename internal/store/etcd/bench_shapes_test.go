package etcd

import (
	"fmt"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// BenchmarkTxnShapes measures what etcd itself charges for the shape of a
// step's Txn, with none of rein's work: serial Txns (each waits for the
// one before it, as one run's steps do) against one durable member, of the
// bytes a step's append carries in rein bench steps. "events" is the
// ceiling's shape: two ~400-byte events. "events+snapshot" adds the
// ~300-byte snapshot and the compares of its revision and of the lease
// key's (the engine's appends are fenced); "events+blobs" adds two
// ~350-byte transcript blobs every other Txn; "store" is both, the store's
// shape. -count runs one shape's rounds back to back, so the machine's
// drift lands on one shape; interleave whole runs instead:
//
//	go test -c -o etcd.test ./internal/store/etcd/
//	for i in 1 2 3 4 5 6; do ./etcd.test -test.run '^$' -test.bench TxnShapes -test.benchtime 1500x; done
func BenchmarkTxnShapes(b *testing.B) {
	cli := durableEtcdClient(b)
	kv, err := kvClient(cli)
	if err != nil {
		b.Fatal(err)
	}
	event := []byte(strings.Repeat("e", 400))
	snapshot := []byte(strings.Repeat("s", 300))
	blob := []byte(strings.Repeat("b", 350))
	for _, shape := range []struct {
		name            string
		snapshot, blobs bool
	}{
		{"events", false, false},
		{"events+snapshot", true, false},
		{"events+blobs", false, true},
		{"store", true, true},
	} {
		b.Run(shape.name, func(b *testing.B) {
			k := keys{fmt.Sprintf("/shapes/%d/", benchRound.Add(1))}
			run, lease := k.run("run_1"), k.lease("run_1")
			var rev int64
			seq := uint64(0)
			for i := 0; b.Loop(); i++ {
				req := &pb.TxnRequest{Success: []*pb.RequestOp{
					putOp(k.event("run_1", seq+1), event, 0),
					putOp(k.event("run_1", seq+2), event, 0),
				}}
				seq += 2
				if shape.snapshot {
					// The version and the epoch (the lease key, which
					// this run has none of: revision 0).
					req.Compare = append(req.Compare, modIs(run, rev), modIs(lease, 0))
					req.Success = append(req.Success, putOp(run, snapshot, 0))
				}
				if shape.blobs && i%2 == 1 {
					req.Success = append(req.Success,
						putOp(k.blob(hex16("", seq)+strings.Repeat("0", 48)), blob, 0),
						putOp(k.blob(hex16("", seq+1)+strings.Repeat("0", 48)), blob, 0))
				}
				resp, err := send(b.Context(), kv, req)
				if err != nil || !resp.Succeeded {
					b.Fatalf("Txn %d: succeeded %v, %v", i, resp != nil && resp.Succeeded, err)
				}
				rev = resp.Header.Revision
			}
		})
	}
}
