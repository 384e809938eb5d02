package etcd

import (
	"fmt"
	"net/url"
	"strings"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// keys builds the keys of the layout in doc.go under prefix p.
type keys struct{ p string }

func (k keys) layout() string              { return k.p + "meta/layout" }
func (k keys) head() string                { return k.p + "meta/changes" }
func (k keys) runs() string                { return k.p + "run/" }
func (k keys) run(id string) string        { return k.runs() + id }
func (k keys) contracts() string           { return k.p + "contract/" }
func (k keys) contract(id string) string   { return k.contracts() + id }
func (k keys) lease(id string) string      { return k.p + "lease/" + id }
func (k keys) owners() string              { return k.p + "owner/" }
func (k keys) owner(id string) string      { return k.owners() + id }
func (k keys) events(id string) string     { return k.p + "event/" + id + "/" }
func (k keys) changes() string             { return k.p + "change/" }
func (k keys) change(cursor uint64) string { return hex16(k.changes(), cursor) }
func (k keys) replicas() string            { return k.p + "replica/" }
func (k keys) replica(name string) string  { return k.replicas() + url.PathEscape(name) }

// The ownership indexes (owner.go): the live runs no replica has taken,
// and the runs each replica took, by its name.
func (k keys) unowneds() string             { return k.p + "unowned/" }
func (k keys) unowned(id string) string     { return k.unowneds() + id }
func (k keys) helds(owner string) string    { return k.p + "held/" + url.PathEscape(owner) + "/" }
func (k keys) held(owner, id string) string { return k.helds(owner) + id }

// The model output of runs' calls in flight, relayed between replicas
// (relay.go): each writer's call's pieces of text, in order, under
// output/RUN/WRITER/CALL/SEQ, where CALL is the call's model_requested
// sequence, attempt and resumed flag (16, 8 and 1 hex digits, dotted) and
// SEQ the piece's number (16 hex digits); and the replicas that want it (a
// key per follow).
func (k keys) outputs(id string) string { return k.p + "output/" + id + "/" }
func (k keys) outputCall(id, writer string, requested uint64, attempt uint32, resumed bool) string {
	r := uint64(0)
	if resumed {
		r = 1
	}
	return fmt.Sprintf("%s%s/%016x.%08x.%x/", k.outputs(id), url.PathEscape(writer), requested, attempt, r)
}
func (k keys) outputPiece(id, writer string, requested uint64, attempt uint32, resumed bool, seq uint64) string {
	return hex16(k.outputCall(id, writer, requested, attempt, resumed), seq)
}
func (k keys) outputWants(id string) string { return k.p + "output-wanted/" + id + "/" }
func (k keys) outputWanter(id, replica string) string {
	return k.outputWants(id) + url.PathEscape(replica) + "/"
}

func (k keys) event(id string, seq uint64) string {
	return hex16(k.events(id), seq)
}

// hex16 is prefix followed by n as 16 lower-case hex digits (fmt's %016x,
// without its cost on every append).
func hex16(prefix string, n uint64) string {
	const digits = "0123456789abcdef"
	b := make([]byte, len(prefix)+16)
	copy(b, prefix)
	for i := len(b) - 1; i >= len(prefix); i-- {
		b[i] = digits[n&0xf]
		n >>= 4
	}
	return string(b)
}

func (k keys) statuses(st reinv1.RunStatus) string {
	return fmt.Sprintf("%sstatus/%02d/", k.p, int32(st))
}

func (k keys) status(st reinv1.RunStatus, id string) string { return k.statuses(st) + invert(id) }

func (k keys) listing() string         { return k.p + "newest/" }
func (k keys) newest(id string) string { return k.listing() + invert(id) }

// invert is a run ID as the listing indexes key it. etcd ranges in
// ascending key order only (a descending sort makes the server read the
// whole range), and List wants the newest run, the greatest ID, first: so
// each byte b of the ID becomes 0xff-b and the key ends in 0xff. Ascending
// order over the keys is then descending order over the IDs (0xff closes a
// shorter ID after any longer one it begins, as no ID holds a NUL).
func invert(id string) string {
	b := make([]byte, len(id)+1)
	for i := range len(id) {
		b[i] = 0xff - id[i]
	}
	b[len(id)] = 0xff
	return string(b)
}

// uninvert is the run ID an inverted key holds, or false.
func uninvert(key string) (string, bool) {
	if key == "" || key[len(key)-1] != 0xff {
		return "", false
	}
	b := make([]byte, len(key)-1)
	for i := range b {
		b[i] = 0xff - key[i]
	}
	return string(b), checkRunID(string(b)) == nil
}

func (k keys) request(tenant, requestID string) string {
	return k.p + "request/" + url.PathEscape(tenant) + "/" + url.PathEscape(requestID)
}

// runBlobs is the prefix of run id's blobs: a range over it holds that
// run's and no other's (an ID holds no "/", so run_1/ does not begin
// run_10/), and none of the legacy blob/ keys.
func (k keys) runBlobs(id string) string { return k.p + "rblob/" + id + "/" }

// blob is the header key of a blob of run id.
func (k keys) blob(id, hash string) string { return k.runBlobs(id) + hash }

// chunk is chunk i of a blob of run id.
func (k keys) chunk(id, hash string, i int) string { return chunkOf(k.blob(id, hash), i) }

// legacyBlob is the header key of a blob as an older rein kept it, once
// for every run; its chunks are chunkOf(legacyBlob(hash), i).
func (k keys) legacyBlob(hash string) string { return k.p + "blob/" + hash }

// chunkOf is chunk i of the blob whose header key is header.
func chunkOf(header string, i int) string { return fmt.Sprintf("%s/%04x", header, i) }

// checkRunID refuses a run ID that is not one key segment.
func checkRunID(id string) error {
	if id == "" || strings.ContainsAny(id, "/\x00") {
		return fmt.Errorf("run ID %q: the etcd store keys runs by ID, which must be non-empty and hold no \"/\" or NUL (rein's own IDs are ULIDs)", id)
	}
	return nil
}
