package bolt

import (
	"encoding/binary"
	"sort"
)

// The log format of a rein before logs held results (walbatch.go), written
// here only to test that such a log is still applied.

// appendBatch appends to b the requests of batch whose result stored
// something, and says how many it took.
func appendBatch(b []byte, batch []*writeReq, results []writeRes) ([]byte, int) {
	n := 0
	for i, r := range batch {
		if stored(r, results[i]) {
			n++
		}
	}
	if n == 0 {
		return b, 0
	}
	b = binary.AppendUvarint(b, uint64(n))
	for i, r := range batch {
		if !stored(r, results[i]) {
			continue
		}
		kind := byte(walAppend)
		switch {
		case r.create:
			kind = walCreate
		case r.acquire:
			kind = walAcquire
		}
		b = append(b, kind)
		b = appendBytes(b, []byte(r.runID))
		b = appendBytes(b, []byte(r.owner))
		b = binary.AppendUvarint(b, r.epoch)
		b = binary.AppendUvarint(b, r.expected)
		b = binary.AppendUvarint(b, uint64(len(r.encoded)))
		for _, ev := range r.encoded {
			b = appendBytes(b, ev)
		}
		hashes := make([]string, 0, len(r.blobs))
		for h := range r.blobs {
			hashes = append(hashes, h)
		}
		sort.Strings(hashes)
		b = binary.AppendUvarint(b, uint64(len(hashes)))
		for _, h := range hashes {
			b = appendBytes(b, []byte(h))
			b = appendBytes(b, r.blobs[h])
		}
	}
	return b, n
}

// stored reports whether r's result changed the store: a create that made
// its run (not one its request ID found), an acquire or an append that was
// not refused.
func stored(r *writeReq, res writeRes) bool {
	switch {
	case res.err != nil || r.op != nil:
		return false
	case r.create:
		return res.created
	}
	return true
}

// createRequestsWAL makes a log of requests (walMagicRequests), as a rein
// before logs held results made it, for the store with the given ID.
func createRequestsWAL(path string, id []byte) (*walFile, error) {
	l, err := createWAL(path, id, true)
	if err != nil {
		return nil, err
	}
	if _, err := l.f.WriteAt([]byte(walMagicRequests), 0); err != nil {
		_ = l.close()
		return nil, err
	}
	return l, nil
}
