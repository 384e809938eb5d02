package etcd

import (
	"context"
	"crypto/rand"
	"net/url"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// Relay relays model output between replicas. The text of a model call in
// flight lives in the memory of the server that drives the run (its watch
// hub); a watcher connected to another replica gets it through etcd. Its
// replica says it wants the run's output (WantOutput: a key of its own
// under its lease) and follows the run's output keys (FollowOutput); the
// driving server, while some other replica wants it, puts the call's text
// as it grows, each piece the bytes new since the last under a key of its
// own numbered in order (PutOutput, under its own lease), so that what
// etcd keeps of a call grows with its length, not with its square; it
// deletes the call's pieces when the call returns (DeleteOutput). Nothing
// of it is in a run's log: the keys end with the leases that hold them,
// and a run's output is written only while a watcher elsewhere reads it.
//
// It owns the keys P output/<run id>/<writer>/<call>/<seq> (the pieces)
// and P output-wanted/<run id>/<replica>/<random> (the wants), keys.go
// has their form; no other code reads or writes them. The Store embeds
// it, so a Store is a server.Relay.
type Relay struct{ *conn }

// WantOutput records that the replica named replica has watchers of the
// run's model output, under this server's lease, in a key of this call's
// own. The returned func takes it back.
func (r *Relay) WantOutput(ctx context.Context, runID, replica string) (func(), error) {
	key := r.keys.outputWanter(runID, replica) + rand.Text()
	wctx, cancel := r.writeCtx(ctx)
	defer cancel()
	if _, err := r.cli.Put(wctx, key, "", clientv3.WithLease(r.lease())); err != nil {
		return func() {}, r.etcdErr(ctx, "put "+key, err)
	}
	return func() {
		dctx, cancel := r.writeCtx(context.Background())
		defer cancel()
		_, _ = r.cli.Delete(dctx, key)
	}, nil
}

// OutputWanted says whether a replica other than the one named replica
// wants the run's model output. It reads the member it asks (serializable):
// a want seen late costs a watcher the first text of one call.
func (r *Relay) OutputWanted(ctx context.Context, runID, replica string) (bool, error) {
	rctx, cancel := r.readCtx(ctx)
	defer cancel()
	prefix := r.keys.outputWants(runID)
	resp, err := r.cli.Get(rctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithSerializable())
	if err != nil {
		return false, r.etcdErr(ctx, "get "+prefix, err)
	}
	own := r.keys.outputWanter(runID, replica)
	for _, kv := range resp.Kvs {
		if !strings.HasPrefix(string(kv.Key), own) {
			return true, nil
		}
	}
	return false, nil
}

// PutOutput puts a piece of the run's call in flight on the server named
// writer, under this server's lease: its text is the call's from
// o.Offset, and seq numbers the call's pieces from 1 (a piece put again
// under its number replaces it, and must start where it did).
func (r *Relay) PutOutput(ctx context.Context, runID, writer string, seq uint64, o *reinv1.ModelOutput) error {
	b, err := proto.Marshal(o)
	if err != nil {
		return err
	}
	key := r.keys.outputPiece(runID, writer, o.GetRequested(), o.GetAttempt(), o.GetResumed(), seq)
	wctx, cancel := r.writeCtx(ctx)
	defer cancel()
	if _, err := r.cli.Put(wctx, key, string(b), clientv3.WithLease(r.lease())); err != nil {
		return r.etcdErr(ctx, "put "+key, err)
	}
	return nil
}

// DeleteOutput deletes the pieces writer put of the run's call o names (its
// requested, attempt and resumed): the call returned.
func (r *Relay) DeleteOutput(ctx context.Context, runID, writer string, o *reinv1.ModelOutput) error {
	prefix := r.keys.outputCall(runID, writer, o.GetRequested(), o.GetAttempt(), o.GetResumed())
	wctx, cancel := r.writeCtx(ctx)
	defer cancel()
	if _, err := r.cli.Delete(wctx, prefix, clientv3.WithPrefix()); err != nil {
		return r.etcdErr(ctx, "delete "+prefix, err)
	}
	return nil
}

// outputKey is what an output piece's key names: its writer and its call
// (the key's CALL part).
func (r *Relay) outputKey(runID, key string) (writer, call string, ok bool) {
	rest, ok := strings.CutPrefix(key, r.keys.outputs(runID))
	if !ok {
		return "", "", false
	}
	w, rest, ok := strings.Cut(rest, "/")
	if !ok {
		return "", "", false
	}
	call, _, ok = strings.Cut(rest, "/")
	if !ok {
		return "", "", false
	}
	writer, err := url.PathUnescape(w)
	return writer, call, err == nil
}

// FollowOutput calls fn with the pieces of each writer's call in flight of
// the run, in order: first what the keys hold, each call's pieces joined
// into one from offset 0, then each piece put after; and with nil when a
// writer's call ended (its pieces were deleted: the call returned, or its
// server's lease ended). A piece's text goes at its Offset in the call's
// text. The watch starts at the revision the keys were read at, so no
// piece is missed or seen out of order; after the watch breaks, the keys
// are read whole again, and a piece seen before comes again at the same
// offset. The calls come from one goroutine; it returns when ctx ends.
func (r *Relay) FollowOutput(ctx context.Context, runID string, fn func(writer string, o *reinv1.ModelOutput)) {
	prefix := r.keys.outputs(runID)
	// calls is each writer's last call seen, by its key's CALL part: its
	// pieces' deletion ends it.
	calls := map[string]string{}
	for ctx.Err() == nil {
		rctx, cancel := r.readCtx(ctx)
		resp, err := r.cli.Get(rctx, prefix, clientv3.WithPrefix())
		cancel()
		if err != nil {
			pause(ctx, watchRetry)
			continue
		}
		now := map[string]string{}
		var joined *reinv1.ModelOutput
		var jw, jc string
		flush := func() {
			if joined != nil {
				fn(jw, joined)
			}
			joined = nil
		}
		for _, kv := range resp.Kvs { // in key order: by writer, call, piece
			writer, call, ok := r.outputKey(runID, string(kv.Key))
			o := &reinv1.ModelOutput{}
			if !ok || proto.Unmarshal(kv.Value, o) != nil {
				continue
			}
			now[writer] = call
			if joined == nil || writer != jw || call != jc {
				flush()
				if o.GetOffset() != 0 {
					continue // not the call's first piece: never put, or deleted meanwhile
				}
				joined, jw, jc = o, writer, call
				continue
			}
			joinPiece(joined, o)
		}
		flush()
		for writer := range calls {
			if _, ok := now[writer]; !ok {
				fn(writer, nil) // deleted while the watch was down
			}
		}
		calls = now
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for wr := range r.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1)) {
			if wr.Err() != nil || wr.CompactRevision != 0 {
				break
			}
			for _, ev := range wr.Events {
				writer, call, ok := r.outputKey(runID, string(ev.Kv.Key))
				if !ok {
					continue
				}
				if ev.Type != clientv3.EventTypePut {
					if calls[writer] == call {
						delete(calls, writer)
						fn(writer, nil)
					}
					continue
				}
				o := &reinv1.ModelOutput{}
				if proto.Unmarshal(ev.Kv.Value, o) != nil {
					continue
				}
				calls[writer] = call
				fn(writer, o)
			}
		}
		cancel()
		pause(ctx, watchRetry)
	}
}

// joinPiece adds piece, the next of o's call, to o: the text past o's, its
// end and truncation. A piece that does not follow on (a gap) adds no text.
func joinPiece(o, piece *reinv1.ModelOutput) {
	end := o.GetOffset() + uint64(len(o.GetText()))
	if off := piece.GetOffset(); off <= end && off+uint64(len(piece.GetText())) > end {
		o.Text += piece.GetText()[end-off:]
	}
	o.Done = o.GetDone() || piece.GetDone()
	o.Truncated = o.GetTruncated() || piece.GetTruncated()
}
