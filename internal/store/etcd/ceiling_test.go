package etcd

import (
	"errors"
	"testing"

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
	if err := s.Append(ctx, "run-1", 1, steps("run-1", 2, n)); err != nil {
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
