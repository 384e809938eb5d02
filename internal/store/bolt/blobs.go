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

// A run's blobs are kept with its events, keyed by the sequence of the
// first event of the append that brought them (8 bytes, big-endian) and then
// their SHA-256 (32 bytes), so they are stored in the order they came: an
// append's blobs land on the page its events do, where SHA-256 keys alone
// would each dirty a page (and the branch pages above it) at a random place
// in the file. A small blob (at most inlineBlobBytes) goes in the run's
// events bucket itself, where its key sorts after the event whose sequence
// it starts with and before the next (readers of the log pass over keys of
// blobKeyLen); a larger one goes in the run's blobs bucket, so that a page
// of the log is never one large value. Blobs are found by hash through
// their run (Blobs reads the run's keys once for every hash asked); a blob
// given again in a later append is stored again, since nothing indexes a
// run's blobs by hash.
const blobKeyLen = 8 + sha256.Size

// inlineBlobBytes is the largest blob kept in a run's events bucket.
const inlineBlobBytes = 16 << 10

// isBlobKey reports whether k, a key of a run's events bucket, is a blob's.
func isBlobKey(k []byte) bool { return len(k) == blobKeyLen }

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
// request was queued) with the run whose bucket is b, under seq, in hash
// order: a small one in its events bucket, a larger one in its blobs bucket.
// The file is marked formatV2 first, if it is not yet.
func putBlobs(tx *bbolt.Tx, b *bbolt.Bucket, seq uint64, blobs map[string][]byte) error {
	if len(blobs) == 0 {
		return nil
	}
	if meta := tx.Bucket(bucketMeta); !bytes.Equal(meta.Get(keyFormat), formatV2) {
		// A file from a rein before blobs were kept in the log: marked,
		// in this commit, as one that rein must not open.
		if err := meta.Put(keyFormat, formatV2); err != nil {
			return err
		}
	}
	eb := b.Bucket(keyEvents)
	var large *bbolt.Bucket
	for _, hash := range slices.Sorted(maps.Keys(blobs)) {
		content := blobs[hash]
		if content == nil {
			content = []byte{}
		}
		into := eb
		if len(content) > inlineBlobBytes {
			if large == nil {
				var err error
				if large, err = b.CreateBucketIfNotExists(keyBlobs); err != nil {
					return err
				}
				large.FillPercent = blobsFillPercent
			}
			into = large
		}
		if err := into.Put(blobKey(seq, hash), content); err != nil {
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
		take := func(k, v []byte) {
			if h, ok := want[[sha256.Size]byte(k[8:])]; ok && out[h] == nil {
				out[h] = append(make([]byte, 0, len(v)), v...) // v is the file's, valid only in tx
			}
		}
		if eb := b.Bucket(keyEvents); eb != nil {
			c := eb.Cursor()
			for k, v := c.First(); k != nil && len(out) < len(want); k, v = c.Next() {
				if isBlobKey(k) {
					take(k, v)
				}
			}
		}
		if bb := b.Bucket(keyBlobs); bb != nil {
			c := bb.Cursor()
			for k, v := c.First(); k != nil && len(out) < len(want); k, v = c.Next() {
				if !isBlobKey(k) || v == nil {
					return damaged("run "+runID+"'s blobs", "key %x is not a sequence and a SHA-256", k)
				}
				take(k, v)
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

// checkBlob adds a problem unless v, stored under the blob key k of a run,
// hashes to the hash in k.
func (c *checker) checkBlob(runID string, k, v []byte) {
	hash := hex.EncodeToString(k[8:])
	if got := store.BlobHash(v); got != hash {
		c.add(runID, 0, "blob %s (brought at event %d): %v", hash, binary.BigEndian.Uint64(k), damaged("blob "+hash, "its content's SHA-256 is %s", got))
	}
}

// checkLargeBlobs checks each blob of a run's blobs bucket (checkBlob).
func (c *checker) checkLargeBlobs(b *bbolt.Bucket, runID string) {
	bb := b.Bucket(keyBlobs)
	if bb == nil {
		return
	}
	_ = bb.ForEach(func(k, v []byte) error {
		if !isBlobKey(k) || v == nil {
			c.add(runID, 0, "its blobs hold key %x, which is not a sequence and a SHA-256", k)
			return nil
		}
		c.checkBlob(runID, k, v)
		return nil
	})
}
