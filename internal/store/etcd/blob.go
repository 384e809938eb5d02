package etcd

import (
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
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
// write that brings it, so that a blob already stored is not sent again. A
// smaller one is sent with the write without a look-up, which would cost a
// round trip to etcd on every such append (a step brings new transcript
// blobs each time), and put with it (putBlobs).
const probeBlobBytes = 64 << 10

// missingBlobs is the part of blobs to send: those over probeBlobBytes not
// stored yet, and every smaller one. Blobs are never deleted, and a blob's
// value is fixed by its hash, so one stored before this read is still there,
// the same, when the write commits; two writers putting one new blob put
// the same bytes.
func (s *Store) missingBlobs(ctx context.Context, what string, blobs map[string][]byte) (map[string][]byte, error) {
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
			ops[i] = clientv3.OpGet(s.keys.blob(h), clientv3.WithKeysOnly())
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

// putBlobs adds blobs to t. A blob of at most ChunkBytes is one key, its
// header with the content after it (a step's transcript parts are small),
// and a plain put: its key is its content's hash, so putting it again (a
// run resumed, or another run bringing the same part) writes the same
// value, and the write's own compares do not depend on it. A nested Txn
// that put it only if absent cost etcd more to apply than the put it saves
// (rein bench steps --store etcd). A larger blob is its chunks, then its
// header, in a nested Txn that puts them only if the header is absent, so
// a large blob is never sent twice into etcd's log by writers that race.
func putBlobs(t *txn, k keys, blobs map[string][]byte) {
	for _, hash := range slices.Sorted(maps.Keys(blobs)) {
		content := blobs[hash]
		header := binary.BigEndian.AppendUint64(nil, uint64(len(content)))
		var ops []*pb.RequestOp
		if len(content) <= ChunkBytes {
			v := make([]byte, 0, 12+len(content))
			v = binary.BigEndian.AppendUint32(append(v, header...), 0)
			ops = append(ops, putOp(k.blob(hash), append(v, content...), 0))
		} else {
			n := 0
			for off := 0; off < len(content); off += ChunkBytes {
				key := k.chunk(hash, n)
				ops = append(ops, putOp(key, content[off:min(off+ChunkBytes, len(content))], 0))
				t.bytes += len(key) + opOverhead
				n++
			}
			ops = append(ops, putOp(k.blob(hash), binary.BigEndian.AppendUint32(header, uint32(n)), 0))
		}
		t.blobAt = append(t.blobAt, blobOp{hash: hash, i: len(t.ops)})
		if len(ops) == 1 {
			t.ops = append(t.ops, ops[0])
		} else {
			t.ops = append(t.ops, txnOp([]*pb.Compare{absent(k.blob(hash))}, ops))
		}
		t.bytes += len(content) + 2*(len(k.blob(hash))+opOverhead) + 12 + opOverhead
		t.blobs += len(content)
	}
}

// Blobs implements store.Store: the run's snapshot key looked up, then each
// blob read. Blobs are kept once for every run (blob/<hash>), so a blob
// another run brought is found too.
func (s *Store) Blobs(ctx context.Context, runID string, hashes []string) (map[string][]byte, error) {
	if err := store.CheckHashes(hashes); err != nil {
		return nil, err
	}
	if err := s.enter("read store"); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	resp, err := s.read(ctx, "read run "+runID, clientv3.OpGet(s.keys.run(runID), clientv3.WithCountOnly()))
	if err != nil {
		return nil, err
	}
	if resp.Responses[0].GetResponseRange().GetCount() == 0 {
		return nil, notFound(runID)
	}
	out := make(map[string][]byte, len(hashes))
	for _, h := range hashes {
		if _, ok := out[h]; ok {
			continue
		}
		b, err := s.blob(ctx, h)
		if err != nil {
			return nil, fmt.Errorf("run %s: %w", runID, err)
		}
		out[h] = b
	}
	return out, nil
}

// blob reads one blob: the header and the chunks in one range, the content
// checked against its size, its chunk count and its hash.
func (s *Store) blob(ctx context.Context, hash string) ([]byte, error) {
	what := "blob " + hash
	rctx, cancel := s.readCtx(ctx)
	defer cancel()
	resp, err := s.cli.Get(rctx, s.keys.blob(hash), clientv3.WithPrefix())
	if err != nil {
		return nil, s.etcdErr(ctx, "read "+what, err)
	}
	if len(resp.Kvs) == 0 || string(resp.Kvs[0].Key) != s.keys.blob(hash) {
		if len(resp.Kvs) > 0 {
			return nil, damaged(what, "its chunks are stored but its header is not")
		}
		return nil, fmt.Errorf("%s: %w", what, store.ErrNoBlob)
	}
	header, chunks := resp.Kvs[0].Value, resp.Kvs[1:]
	if len(header) < 12 {
		return nil, damaged(what, "its header is %d bytes, not 12 or more", len(header))
	}
	size, count := binary.BigEndian.Uint64(header), binary.BigEndian.Uint32(header[8:])
	if count == 0 && len(chunks) == 0 {
		// A small blob: the content follows its header.
		out := append(make([]byte, 0, len(header)-12), header[12:]...)
		if uint64(len(out)) != size {
			return nil, damaged(what, "it holds %d bytes, its header says %d", len(out), size)
		}
		if got := store.BlobHash(out); got != hash {
			return nil, damaged(what, "its content's SHA-256 is %s", got)
		}
		return out, nil
	}
	if len(header) != 12 {
		return nil, damaged(what, "its header is %d bytes with %d chunks, not 12", len(header), count)
	}
	if uint64(len(chunks)) != uint64(count) {
		return nil, damaged(what, "%d of its %d chunks are stored", len(chunks), count)
	}
	out := make([]byte, 0, size)
	for i, c := range chunks {
		if string(c.Key) != s.keys.chunk(hash, i) {
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
