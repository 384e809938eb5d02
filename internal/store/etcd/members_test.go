package etcd

// The store on a cluster of three etcd member processes (the pinned
// binary, internal/etcdtest) losing members: one lost, it serves; two lost,
// it fails with ErrUnavailable naming etcd within its timeout and writes
// nothing half; the members back, it serves again.

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/etcdtest"
	"github.com/reinhq/rein/internal/store"
)

// memberTimeout is the store's Timeout on the member cluster: short, since
// the test waits for it to pass with a quorum lost.
const memberTimeout = 3 * time.Second

// ledger is what the test knows of each run: the events whose Append
// returned nil, and the events of the one Append that failed as
// unavailable (which may or may not have been stored).
type ledger struct {
	mu     sync.Mutex
	acked  map[string][]*reinv1.Event
	unsure map[string][]*reinv1.Event
}

// version is the run's version as the acknowledged appends left it.
func (l *ledger) version(id string) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return uint64(len(l.acked[id]))
}

// appendSteps appends n steps to run id at the version the ledger knows and
// records the outcome.
func (l *ledger) appendSteps(ctx context.Context, s *Store, id string, n int) error {
	version := l.version(id)
	evs := steps(id, version+1, n)
	_, err := s.Append(ctx, id, version, evs)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err == nil:
		l.acked[id] = append(l.acked[id], evs...)
	case errors.Is(err, store.ErrUnavailable):
		l.unsure[id] = evs
	}
	return err
}

func TestMemberLoss(t *testing.T) {
	c := etcdtest.Start(t, 3)
	cli := c.Client()
	ctx := t.Context()
	s, err := Open(ctx, cli, "/rein/", Options{Timeout: memberTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	runs := []string{"run-a", "run-b", "run-c", "run-d"}
	l := &ledger{acked: map[string][]*reinv1.Event{}, unsure: map[string][]*reinv1.Event{}}
	for _, id := range runs {
		mustCreate(t, s, id)
		l.acked[id] = []*reinv1.Event{started(id)}
	}
	// appendAll appends n steps to every run at once (so that they share
	// Txns through the group commit) and returns each run's error.
	appendAll := func(n int) map[string]error {
		var mu sync.Mutex
		errs := map[string]error{}
		var wg sync.WaitGroup
		for _, id := range runs {
			wg.Go(func() {
				err := l.appendSteps(ctx, s, id, n)
				mu.Lock()
				errs[id] = err
				mu.Unlock()
			})
		}
		wg.Wait()
		return errs
	}
	mustAppendAll := func(phase string, n int) {
		t.Helper()
		for id, err := range appendAll(n) {
			if err != nil {
				t.Fatalf("%s: Append(%s): %v", phase, id, err)
			}
		}
	}
	mustAppendAll("three members", 2)

	// One member lost (the leader, so the others elect one): the store
	// appends and reads as before.
	first := c.Leader(cli)
	c.Kill(first)
	c.WaitHealthy()
	for range 3 {
		mustAppendAll("one member killed", 2)
	}
	checkLog(t, s, l, runs, "one member killed")

	// Two lost: no quorum. Every append fails as unavailable, naming etcd,
	// within the store's timeout (the test waits far longer before it
	// calls that a hang).
	second := (first + 1) % 3
	c.Kill(second)
	start := time.Now()
	done := make(chan map[string]error, 1)
	go func() { done <- appendAll(2) }()
	select {
	case errs := <-done:
		// An append waits for the batch in flight (one Txn at a time, each
		// bounded by the timeout) and then for its own: 2× the timeout.
		took := time.Since(start)
		t.Logf("appends with two of three members killed failed after %v (store timeout %v)", took.Round(time.Millisecond), memberTimeout)
		if took > 2*memberTimeout+5*time.Second {
			t.Errorf("appends with two members killed took %v; want them bounded by twice the store's timeout (%v)", took, 2*memberTimeout)
		}
		for id, err := range errs {
			if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "etcd at ") {
				t.Errorf("Append(%s) with two members killed: %v; want ErrUnavailable naming etcd", id, err)
			}
		}
	case <-time.After(10 * memberTimeout):
		t.Fatalf("appends with two members killed have not returned in %v (the store's timeout is %v)", 10*memberTimeout, memberTimeout)
	}
	if _, err := s.Load(ctx, runs[0]); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("Load with two members killed: %v; want ErrUnavailable", err)
	}

	// The members back: the log is what was acknowledged, and the failed
	// append wholly or not at all, read by a store with no cache.
	c.Restart(first)
	c.Restart(second)
	c.WaitHealthy()
	fresh, err := Open(ctx, cli, "/rein/", Options{Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	for _, id := range runs {
		st, err := fresh.Load(ctx, id)
		if err != nil {
			t.Fatalf("Load(%s) after the members returned: %v", id, err)
		}
		want := l.acked[id]
		if st.Version == uint64(len(want)+len(l.unsure[id])) {
			t.Logf("%s: the append that failed as unavailable was stored after all (the contract allows it)", id)
			want = append(want, l.unsure[id]...)
			l.acked[id] = want // the run goes on from there
		}
		checkRun(t, fresh, id, want, "after the members returned")
	}

	// And the store that saw the failure appends again (its cache may be
	// stale; the Txn's compare settles it).
	mustAppendAll("members returned", 2)
	checkLog(t, fresh, l, runs, "members returned")
}

// checkLog checks every run's log against the ledger's acknowledged events.
func checkLog(t *testing.T, s *Store, l *ledger, runs []string, phase string) {
	t.Helper()
	for _, id := range runs {
		checkRun(t, s, id, l.acked[id], phase)
	}
}

// checkRun checks that run id's log and snapshot are exactly want.
func checkRun(t *testing.T, s *Store, id string, want []*reinv1.Event, phase string) {
	t.Helper()
	ctx := t.Context()
	st, err := s.Load(ctx, id)
	if err != nil {
		t.Fatalf("%s: Load(%s): %v", phase, id, err)
	}
	if st.Version != uint64(len(want)) {
		t.Fatalf("%s: %s is at version %d, want %d: the acknowledged appends and nothing else", phase, id, st.Version, len(want))
	}
	got, err := s.Events(ctx, id, 0, 1000)
	if err != nil {
		t.Fatalf("%s: Events(%s): %v", phase, id, err)
	}
	if len(got) != len(want) {
		t.Fatalf("%s: %s holds %d events, want %d", phase, id, len(got), len(want))
	}
	for i := range got {
		if !proto.Equal(got[i], want[i]) {
			t.Fatalf("%s: %s event %d is %v, want %v", phase, id, i+1, got[i], want[i])
		}
	}
}

// A store whose only member was killed fails its Open with
// ErrUnavailable naming etcd, within its timeout, rather than hanging.
func TestMemberLossNoneRunning(t *testing.T) {
	c := etcdtest.Start(t, 1)
	cli := c.Client()
	c.Kill(0)
	start := time.Now()
	_, err := Open(t.Context(), cli, "/rein/", Options{Timeout: time.Second})
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "etcd at "+c.Endpoint(0)) {
		t.Fatalf("Open with the only member killed: %v; want ErrUnavailable naming etcd at %s", err, c.Endpoint(0))
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("Open took %v with a 1s timeout", d)
	}
}
