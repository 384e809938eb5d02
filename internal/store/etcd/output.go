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

// Model output between replicas. The text of a model call in flight lives
// in the memory of the server that drives the run (its watch hub); a
// watcher connected to another replica gets it through etcd. Its replica
// says it wants the run's output (WantOutput: a key of its own under its
// lease) and follows the run's output keys (FollowOutput); the driving
// server, while some other replica wants it, puts the call's text so far
// under a key named after itself (PutOutput, under its own lease) and
// deletes it when the call returns. Nothing of it is in a run's log: the
// keys end with the leases that hold them, and a run's output is written
// only while a watcher elsewhere reads it.

// WantOutput records that the replica named replica has watchers of the
// run's model output, under this server's lease, in a key of this call's
// own. The returned func takes it back.
func (s *Store) WantOutput(ctx context.Context, runID, replica string) (func(), error) {
	key := s.keys.outputWanter(runID, replica) + rand.Text()
	wctx, cancel := s.writeCtx(ctx)
	defer cancel()
	if _, err := s.cli.Put(wctx, key, "", clientv3.WithLease(s.Lease())); err != nil {
		return func() {}, s.etcdErr(ctx, "put "+key, err)
	}
	return func() {
		dctx, cancel := s.writeCtx(context.Background())
		defer cancel()
		_, _ = s.cli.Delete(dctx, key)
	}, nil
}

// OutputWanted says whether a replica other than the one named replica
// wants the run's model output. It reads the member it asks (serializable):
// a want seen late costs a watcher the first text of one call.
func (s *Store) OutputWanted(ctx context.Context, runID, replica string) (bool, error) {
	rctx, cancel := s.readCtx(ctx)
	defer cancel()
	prefix := s.keys.outputWants(runID)
	resp, err := s.cli.Get(rctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithSerializable())
	if err != nil {
		return false, s.etcdErr(ctx, "get "+prefix, err)
	}
	own := s.keys.outputWanter(runID, replica)
	for _, kv := range resp.Kvs {
		if !strings.HasPrefix(string(kv.Key), own) {
			return true, nil
		}
	}
	return false, nil
}

// PutOutput puts the run's call in flight on the server named writer, with
// its text so far, under this server's lease.
func (s *Store) PutOutput(ctx context.Context, runID, writer string, o *reinv1.ModelOutput) error {
	b, err := proto.Marshal(o)
	if err != nil {
		return err
	}
	key := s.keys.outputCall(runID, writer)
	wctx, cancel := s.writeCtx(ctx)
	defer cancel()
	if _, err := s.cli.Put(wctx, key, string(b), clientv3.WithLease(s.Lease())); err != nil {
		return s.etcdErr(ctx, "put "+key, err)
	}
	return nil
}

// DeleteOutput deletes writer's output key of the run: its call returned.
func (s *Store) DeleteOutput(ctx context.Context, runID, writer string) error {
	key := s.keys.outputCall(runID, writer)
	wctx, cancel := s.writeCtx(ctx)
	defer cancel()
	if _, err := s.cli.Delete(wctx, key); err != nil {
		return s.etcdErr(ctx, "delete "+key, err)
	}
	return nil
}

// FollowOutput calls fn with each writer's call in flight of the run as
// its output key holds it: first as the keys are, then at each change, and
// with nil when a writer has none (its key was deleted: the call returned,
// or its server's lease ended). The watch starts at the revision the keys
// were read at, so no change is seen out of order. The calls come from one
// goroutine; it returns when ctx ends.
func (s *Store) FollowOutput(ctx context.Context, runID string, fn func(writer string, o *reinv1.ModelOutput)) {
	prefix := s.keys.outputs(runID)
	decode := func(key string, value []byte) {
		writer, err := url.PathUnescape(strings.TrimPrefix(key, prefix))
		if err != nil {
			return
		}
		o := &reinv1.ModelOutput{}
		if len(value) == 0 || proto.Unmarshal(value, o) != nil {
			fn(writer, nil)
			return
		}
		fn(writer, o)
	}
	seen := map[string]bool{}
	for ctx.Err() == nil {
		rctx, cancel := s.readCtx(ctx)
		resp, err := s.cli.Get(rctx, prefix, clientv3.WithPrefix())
		cancel()
		if err != nil {
			pause(ctx, watchRetry)
			continue
		}
		now := map[string]bool{}
		for _, kv := range resp.Kvs {
			now[string(kv.Key)] = true
			decode(string(kv.Key), kv.Value)
		}
		for key := range seen {
			if !now[key] {
				decode(key, nil) // deleted while the watch was down
			}
		}
		seen = now
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for wr := range s.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1)) {
			if wr.Err() != nil || wr.CompactRevision != 0 {
				break
			}
			for _, ev := range wr.Events {
				key := string(ev.Kv.Key)
				seen[key] = ev.Type == clientv3.EventTypePut
				if !seen[key] {
					delete(seen, key)
				}
				decode(key, ev.Kv.Value)
			}
		}
		cancel()
		pause(ctx, watchRetry)
	}
}
