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
// their place among that append's blobs, in hash order (a uvarint: one byte
// for the first 128), so they are stored in the order they came: an append's
// blobs land on the page its events do, where SHA-256 keys alone would each
// dirty a page (and the branch pages above it) at a random place in the
// file. The value is the blob's SHA-256 (32 bytes), then its content. A
// small blob (at most inlineBlobBytes) goes in the run's events bucket
// itself, where its key sorts after the event whose sequence it starts with
// and before the next (readers of the log pass over every key that is not
// an event's 8 bytes); a larger one goes in the run's blobs bucket, so that
// a page of the log is never one large value. Blobs are found by hash
// through their run (Blobs reads the run's blobs once for every hash asked);
// a blob given again in a later append is stored again, since nothing
// indexes a run's blobs by hash.
//
// The keys are short because a branch page of the log holds the first key
// of each page below it: files marked rein-store-2 keyed a blob by its
// sequence and its SHA-256 (40 bytes, the hash in the key, the value the
// content alone), which made the log of a 500-step run a level deeper from
// about its 300th step (a page more in each of its commits). Those keys are
// still read; a file gets the short ones, and is marked rein-store-3, from
// the first commit that puts a blob.

// legacyBlobKeyLen is the length of a blob key as rein-store-2 wrote it:
// the sequence, then the SHA-256.
const legacyBlobKeyLen = 8 + sha256.Size

// inlineBlobBytes is the largest blob kept in a run's events bucket.
const inlineBlobBytes = 16 << 10

// isBlobKey reports whether k, a key of a run's events or blobs bucket, is
// a blob's: a sequence and a place, or a legacy sequence and SHA-256.
func isBlobKey(k []byte) bool {
	if len(k) == legacyBlobKeyLen {
		return true
	}
	if len(k) <= 8 || len(k) > 8+binary.MaxVarintLen64 {
		return false
	}
	_, n := binary.Uvarint(k[8:])
	return n == len(k)-8
}

// blobsFillPercent fills a run's blob pages full: they are only appended to.
const blobsFillPercent = 0.95

// blobKey is the key of the i-th blob (in hash order) of the append whose
// first event is seq.
func blobKey(seq uint64, i int) []byte {
	return binary.AppendUvarint(seqKey(seq), uint64(i))
}

// blobValue is what a blob with hash (checked hex) and content is stored as.
func blobValue(hash string, content []byte) []byte {
	v := make([]byte, sha256.Size, sha256.Size+len(content))
	_, _ = hex.Decode(v, []byte(hash))
	return append(v, content...)
}

// blobEntry is the hash and content of the blob stored as k, v (k a blob
// key), or false when v is too short to hold a hash. content is v's: valid
// only in the transaction that read it.
func blobEntry(k, v []byte) (hash [sha256.Size]byte, content []byte, ok bool) {
	if len(k) == legacyBlobKeyLen {
		return [sha256.Size]byte(k[8:]), v, v != nil
	}
	if len(v) < sha256.Size {
		return hash, nil, false
	}
	return [sha256.Size]byte(v[:sha256.Size]), v[sha256.Size:], true
}

// putBlobs stores blobs (keys checked against their content before the
// request was queued) with the run whose bucket is b, under seq, in hash
// order: a small one in its events bucket, a larger one in its blobs bucket.
// A file marked older than formatV3 is marked formatV3 first.
func putBlobs(w *wtx, b *wbucket, seq uint64, blobs map[string][]byte) error {
	if len(blobs) == 0 {
		return nil
	}
	if meta := w.Bucket(bucketMeta); bytes.Equal(meta.Get(keyFormat), formatV1) || bytes.Equal(meta.Get(keyFormat), formatV2) {
		// A file from a rein before blobs had short keys in the log:
		// marked, in this commit, as one that rein must not open.
		if err := meta.Put(keyFormat, formatV3); err != nil {
			return err
		}
	}
	eb := b.Bucket(keyEvents)
	var large *wbucket
	for i, hash := range slices.Sorted(maps.Keys(blobs)) {
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
				large.SetFillPercent(blobsFillPercent)
			}
			into = large
		}
		if err := into.Put(blobKey(seq, i), blobValue(hash, content)); err != nil {
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
		want[[sha256.Size]byte(blobValue(h, nil))] = h
	}
	out := make(map[string][]byte, len(want))
	err := s.view(ctx, "blobs of run "+runID, func(tx *rtx) error {
		b := tx.runBucket(runID)
		if b == nil {
			return missingRun(tx, runID)
		}
		if b.Bucket(keyEvents) == nil {
			return stubOrDamaged(b, runID, "its events bucket is missing")
		}
		take := func(k, v []byte) error {
			hash, content, ok := blobEntry(k, v)
			if !ok {
				return damaged("run "+runID+"'s blobs", "the value of key %x is %d bytes, too short to hold a SHA-256", k, len(v))
			}
			if h, ok := want[hash]; ok && out[h] == nil {
				out[h] = append(make([]byte, 0, len(content)), content...) // the file's, valid only in tx
			}
			return nil
		}
		if eb := b.Bucket(keyEvents); eb != nil {
			c := eb.Cursor()
			for k, v := c.First(); k != nil && len(out) < len(want); k, v = c.Next() {
				if isBlobKey(k) {
					if err := take(k, v); err != nil {
						return err
					}
				}
			}
		}
		if bb := b.Bucket(keyBlobs); bb != nil {
			c := bb.Cursor()
			for k, v := c.First(); k != nil && len(out) < len(want); k, v = c.Next() {
				if !isBlobKey(k) || v == nil {
					return damaged("run "+runID+"'s blobs", "key %x is not a blob's (a sequence and a place)", k)
				}
				if err := take(k, v); err != nil {
					return err
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

// checkBlob adds a problem unless v, stored under the blob key k of a run,
// holds a hash and content that hashes to it.
func (c *checker) checkBlob(runID string, k, v []byte) {
	raw, content, ok := blobEntry(k, v)
	if !ok {
		c.add(runID, 0, "blob key %x (brought at event %d): its value is %d bytes, too short to hold a SHA-256", k, binary.BigEndian.Uint64(k), len(v))
		return
	}
	hash := hex.EncodeToString(raw[:])
	if got := store.BlobHash(content); got != hash {
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
			c.add(runID, 0, "its blobs hold key %x, which is not a blob's (a sequence and a place)", k)
			return nil
		}
		c.checkBlob(runID, k, v)
		return nil
	})
}
