package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
)

// TestBatchedAppends: appends of many runs at once share Txns (fewer
// commits than appends), and each run's log is whole and gap-free. The
// twin: a batch holding one stale append (another server moved the run
// behind this Store's cache) stores none of itself; the others are sent
// again alone and stored, the stale one is ErrConflict and stores nothing.
func TestBatchedAppends(t *testing.T) {
	ctx := t.Context()
	prefix := prefixOf(t.TempDir())
	a, b := openShared(t, prefix), openShared(t, prefix)
	defer a.Close()
	defer b.Close()
	const runs, rounds = 32, 10
	ids := createRuns(t, a, runs)
	before := a.commits.Load()
	appendAtOnce(t, a, ids, rounds)
	var wg sync.WaitGroup
	if commits := a.commits.Load() - before; commits >= runs*rounds {
		t.Errorf("%d appends of %d runs at once took %d commits; want fewer: they share Txns", runs*rounds, runs, commits)
	}
	for _, id := range ids {
		evs, err := b.Events(ctx, id, 0, 100)
		if err != nil || len(evs) != 1+2*rounds {
			t.Fatalf("Events(%s) = %d, %v; want %d", id, len(evs), err, 1+2*rounds)
		}
		for i, ev := range evs {
			if ev.GetSequence() != uint64(i+1) {
				t.Fatalf("%s event %d has sequence %d", id, i, ev.GetSequence())
			}
		}
	}

	// b moves run-00 on; a's cache still holds it at the old version, and
	// its caller appends at that version with the others.
	v := uint64(1 + 2*rounds)
	if _, err := b.Append(ctx, ids[0], v, steps(ids[0], v+1, 1)); err != nil {
		t.Fatal(err)
	}
	stale := dump(t, shared, prefix+"event/"+ids[0]+"/")
	errs := make([]error, runs)
	start := make(chan struct{})
	for i, id := range ids {
		wg.Go(func() {
			<-start
			_, errs[i] = a.Append(ctx, id, v, []*reinv1.Event{step(id, v+1)})
		})
	}
	close(start)
	wg.Wait()
	if !errors.Is(errs[0], store.ErrConflict) {
		t.Errorf("the stale append: %v, want ErrConflict", errs[0])
	}
	for i, err := range errs[1:] {
		if err != nil {
			t.Errorf("Append(%s) beside a stale one: %v, want it stored", ids[i+1], err)
		}
	}
	assertUnchanged(t, "the stale append", stale, dump(t, shared, prefix+"event/"+ids[0]+"/"))
}

// TestBatchedAppendsWithBlobs: steps bringing blobs share Txns too, and a
// blob many runs bring at once (the same system prompt, say) is stored by
// each, under the run, and read back whole through every one; no batch
// puts one key twice, which etcd would refuse. The twin: an append whose
// blob is keyed by another hash is refused and stores nothing.
func TestBatchedAppendsWithBlobs(t *testing.T) {
	ctx := t.Context()
	prefix := prefixOf(t.TempDir())
	s := openShared(t, prefix)
	defer s.Close()
	const runs, rounds = 16, 5
	common := blobOf(2048, 7)
	ids := createRuns(t, s, runs)
	before := s.commits.Load()
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			for r := range uint64(rounds) {
				own := blobOf(1024, uint32(2*(i*rounds+int(r))+11))
				evs := []*reinv1.Event{step(id, 2+2*r, common, own), step(id, 3+2*r)}
				blobs := map[string][]byte{store.BlobHash(common): common, store.BlobHash(own): own}
				if _, err := s.Append(ctx, id, 1+2*r, evs, store.WithBlobs(blobs)); err != nil {
					t.Errorf("Append(%s): %v", id, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if commits := s.commits.Load() - before; commits >= runs*rounds {
		t.Errorf("%d appends with blobs took %d commits; want fewer: they share Txns", runs*rounds, commits)
	}
	for _, id := range ids {
		got, err := readBlob(ctx, s, id, store.BlobHash(common))
		if err != nil || string(got) != string(common) {
			t.Fatalf("the common blob through %s: %d bytes, %v", id, len(got), err)
		}
	}
	before2 := dump(t, shared, prefix)
	bad := blobOf(64, 3)
	_, err := s.Append(ctx, ids[0], 1+2*rounds, []*reinv1.Event{step(ids[0], 2+2*rounds, bad), step(ids[0], 3+2*rounds)},
		store.WithBlobs(map[string][]byte{store.BlobHash(common): bad}))
	if !errors.Is(err, store.ErrInvalidBlob) {
		t.Fatalf("a blob under another's hash: %v, want ErrInvalidBlob", err)
	}
	assertUnchanged(t, "a refused append", before2, dump(t, shared, prefix))
}

// TestBatchesInFlight: while one shared Txn waits for etcd, the next
// gathers and is sent (the two share etcd's fsyncs), and never more than
// maxBatchesInFlight are sent at once.
func TestBatchesInFlight(t *testing.T) {
	ctx := t.Context()
	var peak atomic.Int64
	cli, err := inFlightClient(shared.Endpoints(), &peak)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	s, err := Open(ctx, cli, prefixOf(t.TempDir()), testOptions)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const runs, rounds = 32, 20
	ids := createRuns(t, s, runs)
	peak.Store(0)
	appendAtOnce(t, s, ids, rounds)
	if p := peak.Load(); p < 2 || p > maxBatchesInFlight {
		t.Errorf("at most %d Txns were in flight at once; want 2 to %d", p, maxBatchesInFlight)
	}
}

// createRuns creates runs run-00, run-01, … in s and returns their IDs.
func createRuns(t *testing.T, s *Store, runs int) []string {
	t.Helper()
	ids := make([]string, runs)
	for i := range ids {
		ids[i] = fmt.Sprintf("run-%02d", i)
		mustCreate(t, s, ids[i])
	}
	return ids
}

// appendAtOnce appends rounds steps of two events to each of the runs ids
// (each at version 1), all runs at once.
func appendAtOnce(t *testing.T, s *Store, ids []string, rounds int) {
	t.Helper()
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			for r := range uint64(rounds) {
				if _, err := s.Append(t.Context(), id, 1+2*r, steps(id, 2+2*r, 2)); err != nil {
					t.Errorf("Append(%s): %v", id, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// inFlightClient is a client of endpoints that keeps in peak the most
// write Txns it had in flight at once.
func inFlightClient(endpoints []string, peak *atomic.Int64) (*clientv3.Client, error) {
	var now atomic.Int64
	count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if r, ok := req.(*pb.TxnRequest); !ok || len(r.Success) == 0 || r.Success[0].GetRequestPut() == nil {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		n := now.Add(1)
		defer now.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	return clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(count)},
	})
}
