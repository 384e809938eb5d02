package etcd

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// Model output between replicas. The text of a model call in flight lives
// in the memory of the server that drives the run (its watch hub); a
// watcher connected to another replica gets it through etcd. Its replica
// says it wants the run's output (WantOutput: a key under its lease) and
// follows the run's output key (FollowOutput); the driving server, while
// some other replica wants it, puts the call's text so far there
// (PutOutput, under its own lease, a few times a second) and deletes it
// when the call returns. Nothing of it is in a run's log: the keys end
// with the leases that hold them, and a run's output key is written only
// while a watcher elsewhere reads it.

// WantOutput records that the replica named replica has watchers of the
// run's model output, under this server's lease. The returned func takes
// it back.
func (s *Store) WantOutput(ctx context.Context, runID, replica string) (func(), error) {
	key := s.keys.outputWant(runID, replica)
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
	resp, err := s.cli.Get(rctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithSerializable(), clientv3.WithLimit(2))
	if err != nil {
		return false, s.etcdErr(ctx, "get "+prefix, err)
	}
	own := s.keys.outputWant(runID, replica)
	for _, kv := range resp.Kvs {
		if string(kv.Key) != own {
			return true, nil
		}
	}
	return false, nil
}

// PutOutput puts the run's call in flight, with its text so far, under
// this server's lease.
func (s *Store) PutOutput(ctx context.Context, runID string, o *reinv1.ModelOutput) error {
	b, err := proto.Marshal(o)
	if err != nil {
		return err
	}
	key := s.keys.outputCall(runID)
	wctx, cancel := s.writeCtx(ctx)
	defer cancel()
	if _, err := s.cli.Put(wctx, key, string(b), clientv3.WithLease(s.Lease())); err != nil {
		return s.etcdErr(ctx, "put "+key, err)
	}
	return nil
}

// DeleteOutput deletes the run's output key: its call returned.
func (s *Store) DeleteOutput(ctx context.Context, runID string) error {
	key := s.keys.outputCall(runID)
	wctx, cancel := s.writeCtx(ctx)
	defer cancel()
	if _, err := s.cli.Delete(wctx, key); err != nil {
		return s.etcdErr(ctx, "delete "+key, err)
	}
	return nil
}

// FollowOutput calls fn with the run's call in flight as its output key
// holds it: first as it is now, then at each change, and with nil when
// there is none (the key was deleted: the call returned, or its server's
// lease ended). The calls come from one goroutine; it returns when ctx
// ends.
func (s *Store) FollowOutput(ctx context.Context, runID string, fn func(*reinv1.ModelOutput)) {
	key := s.keys.outputCall(runID)
	decode := func(value []byte) {
		if len(value) == 0 {
			fn(nil)
			return
		}
		o := &reinv1.ModelOutput{}
		if proto.Unmarshal(value, o) != nil {
			fn(nil)
			return
		}
		fn(o)
	}
	s.follow(ctx, s.keys.outputs(runID), nil, func(_ string, value []byte) { decode(value) }, func() {
		rctx, cancel := s.readCtx(ctx)
		defer cancel()
		if resp, err := s.cli.Get(rctx, key); err == nil && len(resp.Kvs) == 1 {
			decode(resp.Kvs[0].Value)
		} else {
			fn(nil)
		}
	})
}
