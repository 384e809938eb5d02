package etcd

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/reinhq/rein/internal/store"
)

// opOverhead is a generous estimate of the framing of one operation or
// compare in a TxnRequest (tags, lengths, the op's own fields).
const opOverhead = 32

// txn gathers the compares and operations of one write as etcd's own
// request messages, sent over the client's connection (send). The
// client's builder (clientv3.Txn) clones every compare through
// proto.Clone and copies every key and value twice: on a step's appends
// that was a sixth of rein's CPU in rein-bench steps-runs --store etcd.
type txn struct {
	cmps  []*pb.Compare
	ops   []*pb.RequestOp
	els   []*pb.RequestOp
	bytes int
	blobs int // bytes of blob chunks among them
}

func (t *txn) cmp(c *pb.Compare) {
	t.cmps = append(t.cmps, c)
	t.bytes += len(c.Key) + opOverhead
}

// modIs compares key's ModRevision with rev (0: the key is absent).
func modIs(key string, rev int64) *pb.Compare {
	return &pb.Compare{Key: []byte(key), Target: pb.Compare_MOD, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_ModRevision{ModRevision: rev}}
}

// absent compares key's CreateRevision with 0: the key is absent.
func absent(key string) *pb.Compare {
	return &pb.Compare{Key: []byte(key), Target: pb.Compare_CREATE, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_CreateRevision{CreateRevision: 0}}
}

// present compares key's CreateRevision with 0: the key is stored.
func present(key string) *pb.Compare {
	return &pb.Compare{Key: []byte(key), Target: pb.Compare_CREATE, Result: pb.Compare_GREATER, TargetUnion: &pb.Compare_CreateRevision{CreateRevision: 0}}
}

// leasedBy compares the etcd lease key is attached to with lease.
func leasedBy(key string, lease int64) *pb.Compare {
	return &pb.Compare{Key: []byte(key), Target: pb.Compare_LEASE, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Lease{Lease: lease}}
}

// put puts value under key; t keeps value, which must not change until
// the Txn is sent.
func (t *txn) put(key string, value []byte) {
	t.ops = append(t.ops, putOp(key, value, 0))
	t.bytes += len(key) + len(value) + opOverhead
}

// putLeased puts key attached to an etcd lease: etcd deletes it when the
// lease ends.
func (t *txn) putLeased(key string, value []byte, lease clientv3.LeaseID) {
	t.ops = append(t.ops, putOp(key, value, lease))
	t.bytes += len(key) + len(value) + opOverhead + 8
}

func (t *txn) del(key string) {
	t.ops = append(t.ops, &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(key)}}})
	t.bytes += len(key) + opOverhead
}

// orElse reads key when the compares fail.
func (t *txn) orElse(key string) {
	t.els = append(t.els, &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte(key)}}})
	t.bytes += len(key) + opOverhead
}

func putOp(key string, value []byte, lease clientv3.LeaseID) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(key), Value: value, Lease: int64(lease)}}}
}

// txnOp is a Txn nested in another's operations.
func txnOp(cmps []*pb.Compare, ops []*pb.RequestOp) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Compare: cmps, Success: ops}}}
}

// commit sends the Txn. what names the write in errors. It refuses, before
// sending anything, a Txn over the store's request limit; more puts than
// MaxTxnOps go as nested Txns without compares (nest), which etcd applies
// with the outer one, atomically.
func (s *Store) commit(ctx context.Context, what string, t *txn) (*clientv3.TxnResponse, error) {
	if err := s.fits(what, t); err != nil {
		return nil, err
	}
	ops, err := nest(t, s.opts.MaxTxnOps)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	wctx, cancel := s.writeCtx(ctx)
	defer cancel()
	resp, err := send(wctx, s.kv, &pb.TxnRequest{Compare: t.cmps, Success: ops, Failure: t.els})
	if err != nil {
		return nil, s.etcdErr(ctx, what, err)
	}
	if resp.Succeeded {
		s.commits.Add(1)
	}
	return resp, nil
}

// send sends a write Txn as the client's own Txn.Commit does: over its
// connection, waiting for it to be ready, taking a response of any size
// (an Else branch reads a snapshot back, which may pass gRPC's default
// 4 MiB), not retried, its error translated (clientv3.ContextError). The
// request's size is the store's to bound (fits), before it is sent.
func send(ctx context.Context, kv pb.KVClient, req *pb.TxnRequest) (*clientv3.TxnResponse, error) {
	resp, err := kv.Txn(ctx, req, grpc.WaitForReady(true), grpc.MaxCallRecvMsgSize(math.MaxInt32))
	if err != nil {
		return nil, clientv3.ContextError(ctx, err)
	}
	return (*clientv3.TxnResponse)(resp), nil
}

// kvClient is the KV service on cli's connection, which send uses.
func kvClient(cli *clientv3.Client) (pb.KVClient, error) {
	conn := cli.ActiveConnection()
	if conn == nil {
		return nil, errors.New("the etcd client has no connection of its own (clientv3.NewCtxClient); give it one made with clientv3.New")
	}
	return pb.NewKVClient(conn), nil
}

// fits refuses a Txn over the store's request limit, before anything is
// sent.
func (s *Store) fits(what string, t *txn) error {
	if limit := s.opts.MaxRequestBytes - requestMargin; t.bytes > limit {
		if t.blobs > 0 {
			return fmt.Errorf("%s: %w: the write is %d bytes, %d of them blobs, more than etcd takes in one request (%d, the store's MaxRequestBytes less framing); nothing was stored: bring fewer or smaller blobs with one append",
				what, store.ErrInvalidBlob, t.bytes, t.blobs, limit)
		}
		return fmt.Errorf("%s: the write is %d bytes, more than etcd takes in one request (%d, the store's MaxRequestBytes less framing); nothing was stored: append fewer or smaller events at once",
			what, t.bytes, limit)
	}
	return nil
}

// nest returns t's puts as a Txn's Then branch within maxOps: as they are
// when they fit, else as k nested Txns without compares of m puts each.
// etcd gives a nested Txn what its parent leaves of --max-txn-ops (m at most
// maxOps less the parent's widest branch), so k·m stays under (maxOps/2)².
func nest(t *txn, maxOps int) ([]*pb.RequestOp, error) {
	wide := max(len(t.cmps), len(t.els))
	if len(t.ops) <= maxOps && wide <= maxOps {
		return t.ops, nil
	}
	for k := 1; k <= maxOps; k++ {
		m := maxOps - max(k, wide)
		if m <= 0 {
			break
		}
		if k*m < len(t.ops) {
			continue
		}
		nested := make([]*pb.RequestOp, 0, k)
		for i := 0; i < len(t.ops); i += m {
			nested = append(nested, txnOp(nil, t.ops[i:min(i+m, len(t.ops))]))
		}
		return nested, nil
	}
	return nil, fmt.Errorf("the write is %d operations, more than etcd takes in one transaction even nested (--max-txn-ops %d); nothing was stored",
		len(t.ops), maxOps)
}

// kvOf is the one key-value of the range response at i of a failed Txn's
// Else branch (or of a read Txn), or nil.
func kvOf(resp *clientv3.TxnResponse, i int) *mvccpb.KeyValue {
	if i >= len(resp.Responses) {
		return nil
	}
	kvs := resp.Responses[i].GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		return nil
	}
	return kvs[0]
}

// A lease value is the epoch (8 bytes, big-endian) and the owner's name.
func encodeLease(epoch uint64, owner string) []byte {
	b := binary.BigEndian.AppendUint64(nil, epoch)
	return append(b, owner...)
}

func decodeLease(kv *mvccpb.KeyValue) (epoch uint64, owner string, rev int64) {
	if kv == nil || len(kv.Value) < 8 {
		return 0, "", 0
	}
	return binary.BigEndian.Uint64(kv.Value[:8]), string(kv.Value[8:]), kv.ModRevision
}

// decodeHead is the change cursor stored in kv (absent: 0).
func decodeHead(kv *mvccpb.KeyValue) (cursorAt, error) {
	if kv == nil {
		return cursorAt{known: true}, nil
	}
	n, err := strconv.ParseUint(string(kv.Value), 10, 64)
	if err != nil {
		return cursorAt{}, damaged("the change cursor", "%q is not a number", kv.Value)
	}
	return cursorAt{known: true, cursor: n, rev: kv.ModRevision}, nil
}
