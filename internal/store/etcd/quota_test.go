package etcd

// The store against etcd's quota and its compaction: a cluster of one
// etcd member process (internal/etcdtest) of its own in each test, since a
// full quota, an alarm and a compaction are the whole cluster's.

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/reinhq/rein/internal/etcdtest"
	"github.com/reinhq/rein/internal/store"
)

// quotaTestBytes is the --quota-backend-bytes of the quota tests: filled in
// a second or two.
const quotaTestBytes = 4 << 20

// quotaOptions are the store's options on a member process.
var quotaOptions = Options{Timeout: 30 * time.Second}

// wantNoSpace fails t unless err is ErrNoSpace (not ErrUnavailable: retrying
// soon will not help) and says what frees etcd.
func wantNoSpace(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, store.ErrNoSpace) || errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("%s: %v; want ErrNoSpace, not ErrUnavailable", what, err)
	}
	for _, want := range []string{"--quota-backend-bytes", "etcdctl compaction", "etcdctl defrag", "etcdctl alarm disarm"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: %q does not say %q", what, err, want)
		}
	}
}

// TestErrorsOfAFullCluster maps etcd's refusals for its quota as they reach
// the store (the client's rpctypes.ErrNoSpace, or the gRPC status) to
// ErrNoSpace naming the remedy. The twins: a ResourceExhausted that is not
// etcd's quota (gRPC's own message limit) is not ErrNoSpace, and an
// unavailable cluster is ErrUnavailable, not ErrNoSpace.
func TestErrorsOfAFullCluster(t *testing.T) {
	s := openShared(t, prefixOf(t.TempDir()))
	defer s.Close()
	live := context.Background()
	for _, sent := range []error{rpctypes.ErrGRPCNoSpace, clientv3.ContextError(live, rpctypes.ErrGRPCNoSpace)} {
		wantNoSpace(t, sent.Error(), s.etcdErr(live, "append to run r", sent))
	}
	for _, sent := range []error{
		status.Error(codes.ResourceExhausted, "grpc: received message larger than max (5000000 vs. 4194304)"),
		clientv3.ContextError(live, rpctypes.ErrGRPCNoLeader),
	} {
		if err := s.etcdErr(live, "append to run r", sent); errors.Is(err, store.ErrNoSpace) {
			t.Errorf("%v: got %v; want an error that is not ErrNoSpace", sent, err)
		}
	}
}

// TestNoSpace: with etcd's quota full (its NOSPACE alarm raised), an
// append (a batched one), a create and an acquire fail with ErrNoSpace,
// store nothing, and reads still answer; SpaceAlarm says so. The twin, on
// either side: before the quota fills and after an operator frees it
// (delete, compact, defragment, disarm) SpaceAlarm is nil and the same
// writes are stored.
func TestNoSpace(t *testing.T) {
	ctx := t.Context()
	c := etcdtest.StartWith(t, etcdtest.Options{Members: 1, QuotaBackendBytes: quotaTestBytes})
	cli := c.Client()
	s, err := Open(ctx, cli, "/rein/", quotaOptions)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, _, err := s.Create(ctx, started("run-1")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "run-1", 1, steps("run-1", 2, 2)); err != nil {
		t.Fatalf("append with room: %v", err)
	}
	if err := s.SpaceAlarm(ctx); err != nil {
		t.Fatalf("SpaceAlarm with room: %v, want nil", err)
	}

	c.Fill(cli, "/filler/")
	_, err = s.Append(ctx, "run-1", 3, steps("run-1", 4, 2))
	wantNoSpace(t, "append with etcd full", err)
	_, _, err = s.Create(ctx, started("run-2"))
	wantNoSpace(t, "create with etcd full", err)
	_, err = s.Acquire(ctx, "run-1", "server-a")
	wantNoSpace(t, "acquire with etcd full", err)
	alarm := s.SpaceAlarm(ctx)
	wantNoSpace(t, "SpaceAlarm with etcd full", alarm)
	if !strings.Contains(alarm.Error(), "NOSPACE alarm") {
		t.Fatalf("SpaceAlarm with etcd full: %q does not name the NOSPACE alarm", alarm)
	}
	if st, err := s.Load(ctx, "run-1"); err != nil || st.Version != 3 {
		t.Fatalf("run-1 with etcd full: version %d, %v; want 3 (the refused append stored nothing), read", st.Version, err)
	}
	if _, err := s.Load(ctx, "run-2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("run-2, whose create etcd refused: %v, want ErrNotFound", err)
	}

	c.FreeSpace(cli, "/filler/")
	if err := s.SpaceAlarm(ctx); err != nil {
		t.Fatalf("SpaceAlarm after etcd was freed: %v, want nil", err)
	}
	if _, err := s.Append(ctx, "run-1", 3, steps("run-1", 4, 2)); err != nil {
		t.Fatalf("append after etcd was freed: %v", err)
	}
	if _, created, err := s.Create(ctx, started("run-2")); err != nil || !created {
		t.Fatalf("create after etcd was freed: created %v, %v", created, err)
	}
}

// compaction is one report of CompactHistory.
type compaction struct {
	rev int64
	err error
}

// nextCompaction is the next report, within 30s.
func nextCompaction(t *testing.T, reports <-chan compaction) compaction {
	t.Helper()
	select {
	case r := <-reports:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("no compaction within 30s")
		return compaction{}
	}
}

// TestCompactHistory: CompactHistory compacts, period after period, to the
// revision the cluster had a period before: revisions before it are gone,
// it stays readable, a later write is compacted to a period later, and a
// tick with nothing new (a compaction to where etcd is compacted already,
// ErrCompacted) is done, not an error. The twins: with a period of 0 it
// returns and compacts nothing, and before it runs every revision reads.
func TestCompactHistory(t *testing.T) {
	ctx := t.Context()
	c := etcdtest.Start(t, 1)
	cli := c.Client()
	s, err := Open(ctx, cli, "/rein/", quotaOptions)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, _, err := s.Create(ctx, started("run-1")); err != nil {
		t.Fatal(err)
	}
	first, err := s.revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for v := uint64(1); v < 5; v += 2 {
		if _, err := s.Append(ctx, "run-1", v, steps("run-1", v+1, 2)); err != nil {
			t.Fatal(err)
		}
	}
	last, err := s.revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	readAt := func(rev int64) error {
		_, err := cli.Get(ctx, s.keys.run("run-1"), clientv3.WithRev(rev))
		return err
	}

	s.CompactHistory(ctx, 0, func(rev int64, err error) { t.Errorf("a compaction to %d (%v) with a period of 0", rev, err) })
	if err := readAt(first); err != nil {
		t.Fatalf("revision %d before any compaction: %v, want it read", first, err)
	}
	if compacted, _, err := s.Compacted(ctx); err != nil || compacted {
		t.Fatalf("Compacted before any compaction: %v, %v; want false", compacted, err)
	}

	reports := make(chan compaction, 64)
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.CompactHistory(cctx, 50*time.Millisecond, func(rev int64, err error) {
			select {
			case reports <- compaction{rev, err}:
			default: // the test reads the reports it needs
			}
		})
	}()
	defer func() {
		cancel()
		<-done
	}()

	r := nextCompaction(t, reports)
	if r.err != nil || r.rev < last {
		t.Fatalf("first compaction: to %d, %v; want to the revision CompactHistory started at, %d or later", r.rev, r.err, last)
	}
	if err := readAt(first); !isCompacted(err) {
		t.Fatalf("revision %d after a compaction to %d: %v; want it compacted", first, r.rev, err)
	}
	if err := readAt(r.rev); err != nil {
		t.Fatalf("revision %d, the one compacted to: %v; want it read", r.rev, err)
	}
	if compacted, _, err := s.Compacted(ctx); err != nil || !compacted {
		t.Fatalf("Compacted after a compaction: %v, %v; want true", compacted, err)
	}

	if _, err := s.Append(ctx, "run-1", 5, steps("run-1", 6, 2)); err != nil {
		t.Fatal(err)
	}
	later, err := s.revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for r = nextCompaction(t, reports); r.rev < later; r = nextCompaction(t, reports) {
		if r.err != nil {
			t.Fatalf("compaction to %d: %v", r.rev, r.err)
		}
	}
	if again := nextCompaction(t, reports); again.err != nil || again.rev != r.rev {
		t.Fatalf("a period with no write after a compaction to %d: to %d, %v; want to %d again, done", r.rev, again.rev, again.err, r.rev)
	}
	if err := s.compact(ctx, first); err != nil {
		t.Fatalf("a compaction to %d, older than the cluster's: %v, want nil (done already)", first, err)
	}
}

// TestWatchPastCompaction: a watch of the commits that must start from a
// revision compacted meanwhile (here, compacted while it was told it
// missed some, before it started) is told so by etcd and reads everything
// again: missed is called once more, and it follows the commits after. The
// twin: with no compaction it is missed once, at the start, and it gets
// the appends made meanwhile from its watch.
func TestWatchPastCompaction(t *testing.T) {
	for _, compact := range []bool{false, true} {
		t.Run(map[bool]string{false: "not compacted", true: "compacted"}[compact], func(t *testing.T) {
			ctx := t.Context()
			c := etcdtest.Start(t, 1)
			s, err := Open(ctx, c.Client(), "/rein/", quotaOptions)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if _, _, err := s.Create(ctx, started("run-1")); err != nil {
				t.Fatal(err)
			}
			var misses atomic.Int32
			grew := make(chan uint64, 64)
			wctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() {
				defer close(done)
				s.FollowRun(wctx, "run-1", func(version uint64) { grew <- version }, func() {
					if misses.Add(1) > 1 {
						return
					}
					// Between the revision read and the watch: two
					// commits, then (compacted) the history up to the
					// second is gone, the first the watch needs with it.
					for v := uint64(1); v < 5; v += 2 {
						if _, err := s.Append(ctx, "run-1", v, steps("run-1", v+1, 2)); err != nil {
							t.Error(err)
							return
						}
					}
					if compact {
						rev, err := s.revision(ctx)
						if err == nil {
							err = s.compact(ctx, rev)
						}
						if err != nil {
							t.Error(err)
						}
					}
				})
			}()
			defer func() {
				cancel()
				<-done
			}()
			// Once the watch is live, a commit after it.
			waitFor := func(want uint64) []uint64 {
				t.Helper()
				var seen []uint64
				for {
					select {
					case v := <-grew:
						seen = append(seen, v)
						if v == want {
							return seen
						}
					case <-time.After(30 * time.Second):
						t.Fatalf("version %d not seen within 30s (seen %v, missed %d times)", want, seen, misses.Load())
					}
				}
			}
			var seen []uint64
			if !compact {
				seen = waitFor(5) // the watch started at the revision before them
			} else {
				// Not seen by the watch: etcd told it its revision was
				// compacted, and it was missed again.
				deadline := time.Now().Add(30 * time.Second)
				for misses.Load() < 2 {
					if time.Now().After(deadline) {
						t.Fatal("the watch whose start revision was compacted was not missed again within 30s")
					}
					select {
					case v := <-grew:
						t.Fatalf("version %d seen by a watch whose start revision was compacted", v)
					case <-time.After(10 * time.Millisecond): // poll
					}
				}
			}
			if _, err := s.Append(ctx, "run-1", 5, steps("run-1", 6, 2)); err != nil {
				t.Fatal(err)
			}
			seen = append(seen, waitFor(7)...)
			want := map[bool]int32{false: 1, true: 2}[compact]
			if n := misses.Load(); n != want {
				t.Fatalf("missed %d times (seen %v); want %d", n, seen, want)
			}
		})
	}
}
