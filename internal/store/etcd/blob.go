package etcd

import (
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reinhq/rein/internal/store"
)

// checkBlobSizes refuses, before anything is sent, a blob larger than the
// store takes.
func (s *Store) checkBlobSizes(what string, blobs map[string][]byte) error {
	for _, hash := range slices.Sorted(maps.Keys(blobs)) {
		if n := len(blobs[hash]); n > s.opts.MaxBlobBytes {
			return fmt.Errorf("%s: blob %.12s… is %d bytes, more than the %d this etcd store takes (its MaxBlobBytes, bound by etcd's request limit): %w; nothing was stored: cut the content the blob holds",
				what, hash, n, s.opts.MaxBlobBytes, store.ErrInvalidBlob)
		}
	}
	return nil
}

// probeBlobBytes is the size above which a blob is looked up before the
// write that brings it, so that a blob the run stored already is not sent
// again. A smaller one is sent with the write without a look-up, which
// would cost a round trip to etcd on every such append (a step brings new
// transcript blobs each time), and put with it (putBlobs).
const probeBlobBytes = 64 << 10

// missingBlobs is the part of blobs to send with a write to run runID:
// those over probeBlobBytes the run has not stored yet, and every smaller
// one. A blob's value is fixed by its hash, so one stored before this read
// is the same when the write commits; and it is still there, for a run's
// blobs are deleted only with the run, by Archive or Delete (lifecycle.go),
// which move the run's snapshot, so that a write compared at the snapshot
// as read before them is refused. Two writers putting one new blob put the
// same bytes. A blob an older rein kept once for every run (P blob/) is
// not looked up: it is sent again, and the run holds its own copy.
func (s *Store) missingBlobs(ctx context.Context, what, runID string, blobs map[string][]byte) (map[string][]byte, error) {
	if len(blobs) == 0 {
		return nil, nil
	}
	missing := make(map[string][]byte, len(blobs))
	var probe []string
	for _, h := range slices.Sorted(maps.Keys(blobs)) {
		if len(blobs[h]) > probeBlobBytes {
			probe = append(probe, h)
		} else {
			missing[h] = blobs[h]
		}
	}
	for start := 0; start < len(probe); start += s.opts.MaxTxnOps {
		part := probe[start:min(start+s.opts.MaxTxnOps, len(probe))]
		ops := make([]clientv3.Op, len(part))
		for i, h := range part {
			ops[i] = clientv3.OpGet(s.keys.blob(runID, h), clientv3.WithKeysOnly())
		}
		resp, err := s.read(ctx, what+": look up its blobs", ops...)
		if err != nil {
			return nil, err
		}
		for i, h := range part {
			if kvOf(resp, i) == nil {
				missing[h] = blobs[h]
			}
		}
	}
	return missing, nil
}

// putBlobs adds blobs to t, as run runID's (P rblob/<run id>/, doc.go). A
// blob of at most ChunkBytes is one key, its header with the content after
// it (a step's transcript parts are small), and a plain put: its key is the
// run's and its content's hash, so putting it again (a run resumed, or the
// run bringing the same part again) writes the same value, and the write's
// own compares do not depend on it. A nested Txn that put it only if
// absent cost etcd more to apply than the put it saves (rein-bench steps
// --store etcd). A larger blob is its chunks, then its header, in a nested
// Txn that puts them only if the header is absent, so a large blob is
// never sent twice into etcd's log by writers that race. Each run keeps
// its own copy of a blob another run brought too, so that Archive and
// Delete take a run's content with it.
func putBlobs(t *txn, k keys, runID string, blobs map[string][]byte) {
	for _, hash := range slices.Sorted(maps.Keys(blobs)) {
		content := blobs[hash]
		key := k.blob(runID, hash)
		header := binary.BigEndian.AppendUint64(nil, uint64(len(content)))
		if len(content) <= ChunkBytes {
			v := make([]byte, 0, 12+len(content))
			v = binary.BigEndian.AppendUint32(append(v, header...), 0)
			t.ops = append(t.ops, putOp(key, append(v, content...), 0))
		} else {
			var ops []*pb.RequestOp
			n := 0
			for off := 0; off < len(content); off += ChunkBytes {
				ck := chunkOf(key, n)
				ops = append(ops, putOp(ck, content[off:min(off+ChunkBytes, len(content))], 0))
				t.bytes += len(ck) + opOverhead
				n++
			}
			ops = append(ops, putOp(key, binary.BigEndian.AppendUint32(header, uint32(n)), 0))
			t.ops = append(t.ops, txnOp([]*pb.Compare{absent(key)}, ops))
		}
		t.bytes += len(content) + 2*(len(key)+opOverhead) + 12 + opOverhead
		t.blobs += len(content)
	}
}

// Blobs implements store.Store: the run's snapshot key looked up, then each
// blob read from the run's own (P rblob/<run id>/<hash>) or, when the run
// holds none under that hash, from those an older rein kept once for every
// run (P blob/<hash>), which may be another run's.
func (s *Store) Blobs(ctx context.Context, runID string, hashes []string) (map[string][]byte, error) {
	if err := store.CheckHashes(hashes); err != nil {
		return nil, err
	}
	if err := s.enter("read store"); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	resp, err := s.read(ctx, "read run "+runID, clientv3.OpGet(s.keys.run(runID), clientv3.WithCountOnly()),
		clientv3.OpGet(s.keys.event(runID, 1), clientv3.WithCountOnly())) // none: archived (lifecycle.go)
	if err != nil {
		return nil, err
	}
	if resp.Responses[0].GetResponseRange().GetCount() == 0 {
		return nil, notFound(runID)
	}
	if resp.Responses[1].GetResponseRange().GetCount() == 0 {
		return nil, s.logGone(ctx, runID)
	}
	out := make(map[string][]byte, len(hashes))
	for _, h := range hashes {
		if _, ok := out[h]; ok {
			continue
		}
		b, err := s.blob(ctx, runID, h)
		if err != nil {
			return nil, fmt.Errorf("run %s: %w", runID, err)
		}
		out[h] = b
	}
	return out, nil
}

// blob reads one blob of run runID: the run's own, else the legacy shared
// one.
func (s *Store) blob(ctx context.Context, runID, hash string) ([]byte, error) {
	b, found, err := s.blobAt(ctx, s.keys.blob(runID, hash), hash)
	if found || err != nil {
		return b, err
	}
	b, found, err = s.blobAt(ctx, s.keys.legacyBlob(hash), hash)
	if !found && err == nil {
		err = fmt.Errorf("blob %s: %w", hash, store.ErrNoBlob)
	}
	return b, err
}

// blobAt reads the blob whose header key is header: the header and the
// chunks in one range, the content checked against its size, its chunk
// count and its hash. No key under header is found false.
func (s *Store) blobAt(ctx context.Context, header, hash string) ([]byte, bool, error) {
	what := "blob " + hash
	rctx, cancel := s.readCtx(ctx)
	defer cancel()
	resp, err := s.cli.Get(rctx, header, clientv3.WithPrefix())
	if err != nil {
		return nil, false, s.etcdErr(ctx, "read "+what, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, false, nil
	}
	if string(resp.Kvs[0].Key) != header {
		return nil, true, damaged(what, "its chunks are stored but its header is not")
	}
	b, err := assemble(what, hash, header, resp.Kvs[0].Value, resp.Kvs[1:])
	return b, true, err
}

// assemble is the content of a blob from its header's value and its
// chunks' keys and values, checked.
func assemble(what, hash, header string, hv []byte, chunks []*mvccpb.KeyValue) ([]byte, error) {
	if len(hv) < 12 {
		return nil, damaged(what, "its header is %d bytes, not 12 or more", len(hv))
	}
	size, count := binary.BigEndian.Uint64(hv), binary.BigEndian.Uint32(hv[8:])
	if count == 0 && len(chunks) == 0 {
		// A small blob: the content follows its header.
		out := append(make([]byte, 0, len(hv)-12), hv[12:]...)
		if uint64(len(out)) != size {
			return nil, damaged(what, "it holds %d bytes, its header says %d", len(out), size)
		}
		if got := store.BlobHash(out); got != hash {
			return nil, damaged(what, "its content's SHA-256 is %s", got)
		}
		return out, nil
	}
	if len(hv) != 12 {
		return nil, damaged(what, "its header is %d bytes with %d chunks, not 12", len(hv), count)
	}
	if uint64(len(chunks)) != uint64(count) {
		return nil, damaged(what, "%d of its %d chunks are stored", len(chunks), count)
	}
	out := make([]byte, 0, size)
	for i, c := range chunks {
		if string(c.Key) != chunkOf(header, i) {
			return nil, damaged(what, "chunk %d is missing (found %q)", i, c.Key)
		}
		out = append(out, c.Value...)
	}
	if uint64(len(out)) != size {
		return nil, damaged(what, "its chunks hold %d bytes, its header says %d", len(out), size)
	}
	if got := store.BlobHash(out); got != hash {
		return nil, damaged(what, "its content's SHA-256 is %s", got)
	}
	return out, nil
}
