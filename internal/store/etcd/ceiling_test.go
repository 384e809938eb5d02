//go:build reinbench

package etcd

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/store/seal"
)

// TestScanEvents: ScanEvents and the Ceiling's Scan read a log longer than
// one page of their ranges whole and in order, the Ceiling the events'
// encodings as stored; from a sequence on, the rest; of a missing run,
// ErrNotFound. The Ceiling's put is read back by the store.
func TestScanEvents(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	s := openShared(t, prefixOf(dir))
	defer s.Close()
	mustCreate(t, s, "run-1")
	const n = scanPage + 77
	if _, err := s.Append(ctx, "run-1", 1, steps("run-1", 2, n)); err != nil {
		t.Fatal(err)
	}
	for _, after := range []uint64{0, 1000, n + 1} {
		want := after + 1
		err := s.ScanEvents("run-1", after, func(ev *reinv1.Event) error {
			if ev.GetSequence() != want || !proto.Equal(ev, orStarted("run-1", want)) {
				t.Fatalf("ScanEvents(after %d): event %d, want %d as appended", after, ev.GetSequence(), want)
			}
			want++
			return nil
		})
		if err != nil || want != n+2 {
			t.Fatalf("ScanEvents(after %d) ended at %d, %v; want %d", after, want, err, n+2)
		}
	}
	if err := s.ScanEvents("run-2", 0, func(*reinv1.Event) error { return nil }); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ScanEvents of a missing run: %v, want ErrNotFound", err)
	}

	c := Ceiling{Client: shared, Prefix: prefixOf}
	want := uint64(1)
	err := c.Scan(dir, "run-1", func(seq uint64, data []byte) error {
		ev := &reinv1.Event{}
		if err := proto.Unmarshal(data, ev); err != nil || seq != want || !proto.Equal(ev, orStarted("run-1", want)) {
			t.Fatalf("Ceiling.Scan: event %d (%v), want %d as appended", seq, err, want)
		}
		want++
		return nil
	})
	if err != nil || want != n+2 {
		t.Fatalf("Ceiling.Scan ended at %d, %v; want %d", want, err, n+2)
	}

	// The Ceiling's put writes where the store reads: 200 events, nested.
	put, closeLog, err := c.CreateLog(dir, []string{"run-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer closeLog()
	var runs []int
	var seqs []uint64
	var data [][]byte
	for seq := uint64(n + 2); seq < n+202; seq++ {
		b, err := seal.Seal(step("run-1", seq))
		if err != nil {
			t.Fatal(err)
		}
		runs, seqs, data = append(runs, 0), append(seqs, seq), append(data, b)
	}
	if err := put(runs, seqs, data); err != nil {
		t.Fatalf("Ceiling put of 200 events: %v", err)
	}
	evs, err := s.Events(ctx, "run-1", n+1, 1000)
	if err != nil || len(evs) != 200 {
		t.Fatalf("Events after the Ceiling's put = %d, %v; want 200", len(evs), err)
	}
}

// orStarted is the event at seq of the logs above: run_started, then steps.
func orStarted(id string, seq uint64) *reinv1.Event {
	if seq == 1 {
		return started(id)
	}
	return step(id, seq)
}

// TestCeilingPutsTheStoresBytes: the Ceiling's state put of a step (its
// events, the run's snapshot, its blobs, one small and one chunked) leaves
// under its prefix the keys and values the store's append of that step
// leaves under the store's: the same bytes, without the store's compares,
// reads or index. A put that etcd refuses (its request over etcd's limit)
// is an error, and writes nothing.
func TestCeilingPutsTheStoresBytes(t *testing.T) {
	ctx := t.Context()
	storeDir, ceilingDir := t.TempDir(), t.TempDir()
	s := openShared(t, prefixOf(storeDir))
	defer s.Close()
	mustCreate(t, s, "run-1")
	small, large := blobOf(300, 7), blobOf(ChunkBytes+100, 9)
	blobs := map[string][]byte{store.BlobHash(small): small, store.BlobHash(large): large}
	evs := []*reinv1.Event{step("run-1", 2, small, large), step("run-1", 3)}
	if _, err := s.Append(ctx, "run-1", 1, evs, store.WithBlobs(blobs)); err != nil {
		t.Fatal(err)
	}
	st, err := s.Load(ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}

	c := Ceiling{Client: shared, Prefix: prefixOf}
	put, closeLog, err := c.CreateStateLog(ceilingDir, []string{"run-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer closeLog()
	var data [][]byte
	for _, ev := range evs {
		b, err := seal.Seal(ev)
		if err != nil {
			t.Fatal(err)
		}
		data = append(data, b)
	}
	snapshot, err := seal.Seal(st.Proto(false))
	if err != nil {
		t.Fatal(err)
	}
	if err := put(0, 2, data, snapshot, blobs); err != nil {
		t.Fatalf("Ceiling state put: %v", err)
	}

	// What each prefix holds of the step, keyed below its prefix: the
	// store's creation (run_started, contract, indexes) is not the step's.
	values := func(prefix string) map[string]string {
		resp, err := shared.Get(ctx, prefix, clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for _, kv := range resp.Kvs {
			k := strings.TrimPrefix(string(kv.Key), prefix)
			if strings.HasPrefix(k, "event/") && !strings.HasSuffix(k, "/0000000000000001") ||
				strings.HasPrefix(k, "run/") || strings.HasPrefix(k, "rblob/") {
				m[k] = string(kv.Value)
			}
		}
		return m
	}
	want, got := values(prefixOf(storeDir)), values(prefixOf(ceilingDir))
	if len(want) < 5 || !maps.Equal(got, want) {
		t.Fatalf("the Ceiling put %d keys, %v; the store's append %d, %v", len(got), slices.Sorted(maps.Keys(got)), len(want), slices.Sorted(maps.Keys(want)))
	}

	// Refused: over etcd's request limit, nothing is written.
	before := dump(t, shared, prefixOf(ceilingDir))
	huge := blobOf(testRequestBytes+1<<20, 11)
	err = put(0, 4, data[:1], snapshot, map[string][]byte{store.BlobHash(huge): huge})
	if err == nil {
		t.Fatal("a state put over etcd's request limit succeeded")
	}
	assertUnchanged(t, "a refused state put", before, dump(t, shared, prefixOf(ceilingDir)))
}
