package bolt

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"

	bbolt "go.etcd.io/bbolt"

	"github.com/reinhq/rein/internal/store"
)

// A run's blobs live in its bucket, under runs/<run id>/blobs/, keyed by the
// sequence of the first event of the append that brought them (8 bytes,
// big-endian) and then their SHA-256 (32 bytes): a run's blobs are stored in
// the order they came, so an append's blobs land on the last page of its
// run's blobs, beside its events, where SHA-256 keys alone would each dirty
// a page (and the branch pages above it) at a random place in the file.
// Blobs are found by hash through their run (Blobs scans the run's blobs
// once for every hash asked); a blob given again in a later append is
// stored again, since nothing indexes a run's blobs by hash.
const blobKeyLen = 8 + sha256.Size

// blobsFillPercent fills a run's blob pages full: they are only appended to.
const blobsFillPercent = 0.95

// blobKey is the key of a blob with hash (checked hex) that the append whose
// first event is seq brought.
func blobKey(seq uint64, hash string) []byte {
	k := make([]byte, blobKeyLen)
	binary.BigEndian.PutUint64(k, seq)
	_, _ = hex.Decode(k[8:], []byte(hash))
	return k
}

// putBlobs stores blobs (keys checked against their content before the
// request was queued) in the run's bucket b, under seq, in hash order.
func putBlobs(b *bbolt.Bucket, seq uint64, blobs map[string][]byte) error {
	if len(blobs) == 0 {
		return nil
	}
	bb, err := b.CreateBucketIfNotExists(keyBlobs)
	if err != nil {
		return err
	}
	bb.FillPercent = blobsFillPercent
	for _, hash := range slices.Sorted(maps.Keys(blobs)) {
		content := blobs[hash]
		if content == nil {
			content = []byte{}
		}
		if err := bb.Put(blobKey(seq, hash), content); err != nil {
			return err
		}
	}
	return nil
}

// Blobs implements store.Store: one pass over the run's blobs, then, for a
// hash not found there, the store-wide bucket of files written before blobs
// were kept with their runs. A blob whose content no longer hashes to its
// hash is ErrDataLoss.
func (s *Store) Blobs(ctx context.Context, runID string, hashes []string) (map[string][]byte, error) {
	if err := store.CheckHashes(hashes); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	want := make(map[[sha256.Size]byte]string, len(hashes))
	for _, h := range hashes {
		want[[sha256.Size]byte(blobKey(0, h)[8:])] = h
	}
	out := make(map[string][]byte, len(want))
	err := s.view("blobs of run "+runID, func(tx *bbolt.Tx) error {
		b := runBucket(tx, runID)
		if b == nil {
			return missingRun(tx, runID)
		}
		if bb := b.Bucket(keyBlobs); bb != nil {
			c := bb.Cursor()
			for k, v := c.First(); k != nil && len(out) < len(want); k, v = c.Next() {
				if len(k) != blobKeyLen || v == nil {
					return damaged("run "+runID+"'s blobs", "key %x is not a sequence and a SHA-256", k)
				}
				if h, ok := want[[sha256.Size]byte(k[8:])]; ok && out[h] == nil {
					out[h] = append(make([]byte, 0, len(v)), v...) // v is the file's, valid only in tx
				}
			}
		}
		if len(out) == len(want) {
			return nil
		}
		old := tx.Bucket(bucketBlobs)
		if old == nil {
			return nil
		}
		c := old.Cursor()
		for _, h := range want {
			if out[h] != nil {
				continue
			}
			if k, v := c.Seek([]byte(h)); bytes.Equal(k, []byte(h)) {
				out[h] = append(make([]byte, 0, len(v)), v...)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, h := range hashes {
		content, ok := out[h]
		if !ok {
			return nil, fmt.Errorf("blob %s of run %s: %w", h, runID, store.ErrNoBlob)
		}
		if got := store.BlobHash(content); got != h {
			return nil, damaged("blob "+h+" of run "+runID, "its content's SHA-256 is %s", got)
		}
	}
	return out, nil
}

// checkBlobs adds a problem for each of a run's blobs that is not stored
// under its content's hash.
func (c *checker) checkBlobs(b *bbolt.Bucket, runID string) {
	bb := b.Bucket(keyBlobs)
	if bb == nil {
		return
	}
	_ = bb.ForEach(func(k, v []byte) error {
		if len(k) != blobKeyLen || v == nil {
			c.add(runID, 0, "its blobs hold key %x, which is not a sequence and a SHA-256", k)
			return nil
		}
		hash := hex.EncodeToString(k[8:])
		if got := store.BlobHash(v); got != hash {
			c.add(runID, 0, "blob %s (brought at event %d): %v", hash, binary.BigEndian.Uint64(k), damaged("blob "+hash, "its content's SHA-256 is %s", got))
		}
		return nil
	})
}
