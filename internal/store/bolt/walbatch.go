package bolt

import (
	"encoding/binary"
	"errors"
	"fmt"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
)

// The log's records were once the requests of each commit (a log whose
// header is walMagicRequests), applied again at Open through the writer's
// own code (applyRequest), the fold of whatever build opened it. They are
// what a commit wrote now (writes.go); a log of requests left by a crash of
// an older rein is still applied, once, by the code below, after which the
// log is made anew in the new format. A record's batch was the requests of
// one commit that changed the store, in the order the writer applied them,
// each as its caller gave it:
//
//	uvarint  how many requests
//	per request:
//	  byte     kind: walCreate, walAppend or walAcquire
//	  bytes    run ID
//	  bytes    owner (an append's store.WithAcquire, an Acquire's)
//	  uvarint  lease epoch (an append's fence; 0 for none)
//	  uvarint  expected version (an append's)
//	  uvarint  how many events, then each sealed event as bytes
//	  uvarint  how many blobs, then each hash and content as bytes
//
// where bytes is a uvarint length, then that many bytes. A lifecycle
// change (op) is never logged: a batch holding one is checkpointed.
const (
	walCreate  = 1
	walAppend  = 2
	walAcquire = 3
)

// decodeBatch decodes a record's batch into requests the writer applies as
// it did the first time, their events unsealed and, for a create, the
// state after them folded.
func decodeBatch(b []byte) ([]*writeReq, error) {
	d := batchDecoder{b: b}
	n := d.uvarint()
	if d.err == nil && n > maxBatch {
		return nil, fmt.Errorf("the batch says it holds %d requests, more than %d", n, maxBatch)
	}
	reqs := make([]*writeReq, 0, n)
	for i := uint64(0); i < n && d.err == nil; i++ {
		kind := d.byte()
		r := &writeReq{runID: string(d.bytes()), owner: string(d.bytes()), epoch: d.uvarint(), expected: d.uvarint()}
		r.create, r.acquire = kind == walCreate, kind == walAcquire
		if d.err == nil && kind != walCreate && kind != walAppend && kind != walAcquire {
			return nil, fmt.Errorf("request %d of the batch is of kind %d, which rein does not know", i, kind)
		}
		for range d.count() {
			enc := d.bytes()
			ev := &reinv1.Event{}
			if d.err == nil {
				if err := unseal(enc, ev, fmt.Sprintf("request %d of the batch (run %s)", i, r.runID)); err != nil {
					return nil, err
				}
			}
			r.encoded = append(r.encoded, enc)
			r.events = append(r.events, ev)
		}
		if blobs := d.count(); blobs > 0 {
			r.blobs = make(map[string][]byte, blobs)
			for range blobs {
				h := string(d.bytes())
				r.blobs[h] = d.bytes()
			}
		}
		if d.err == nil && r.create {
			st, err := runstate.ApplyAll(runstate.State{}, r.events)
			if err != nil {
				return nil, fmt.Errorf("request %d of the batch creates run %s: %w", i, r.runID, err)
			}
			r.created = &st
		}
		reqs = append(reqs, r)
	}
	if d.err == nil && len(d.b) > 0 {
		d.err = fmt.Errorf("%d bytes follow its last request", len(d.b))
	}
	if d.err != nil {
		return nil, fmt.Errorf("the batch does not decode: %w", d.err)
	}
	return reqs, nil
}

// batchDecoder reads a batch's fields; the first error sticks, and every
// read after it returns zero.
type batchDecoder struct {
	b   []byte
	err error
}

var errShortBatch = errors.New("it ends inside a field")

func (d *batchDecoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errShortBatch
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *batchDecoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.err = errShortBatch
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

// count is a count of what follows, bounded by the bytes left (each item
// takes at least one), so that a damaged count allocates nothing large.
func (d *batchDecoder) count() int {
	n := d.uvarint()
	if d.err == nil && n > uint64(len(d.b)) {
		d.err = errShortBatch
	}
	if d.err != nil {
		return 0
	}
	return int(n)
}

func (d *batchDecoder) bytes() []byte {
	n := d.uvarint()
	if d.err == nil && n > uint64(len(d.b)) {
		d.err = errShortBatch
	}
	if d.err != nil {
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}
