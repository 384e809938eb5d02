package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bbolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/store/seal"
)

// damageRuns are the runs of damageFixture; the tests damage the middle one.
var damageRuns = []string{"run-a", "run-m", "run-z"}

const damageEvents = 30

// marker is a string only event seq of runID holds, to find it in the file.
func marker(runID string, seq uint64) string {
	return fmt.Sprintf("marker-%s-%04d-", runID, seq) + strings.Repeat("x", 240)
}

// damageFixture makes a store of three runs of 30 events of ~300 bytes, so
// that each run's events fill leaf pages of their own, and returns its path.
func damageFixture(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rein.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, id := range damageRuns {
		if _, _, err := s.Create(ctx, startEvent(id)); err != nil {
			t.Fatal(err)
		}
		for seq := uint64(2); seq <= damageEvents; seq++ {
			ev := markedEvent(id, seq)
			if _, err := s.Append(ctx, id, seq-1, []*reinv1.Event{ev}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// markedEvent is a model call (seq even) or its reply (odd) holding
// marker(runID, seq).
func markedEvent(runID string, seq uint64) *reinv1.Event {
	ev := stepEvent(runID, seq)
	if seq%2 == 0 {
		ev.GetModelRequested().InputHash = marker(runID, seq)
		return ev
	}
	ev.Actor = "model"
	ev.Payload = &reinv1.Event_ModelReturned{ModelReturned: &reinv1.ModelReturned{
		Decision: &reinv1.Decision{Action: &reinv1.Decision_ToolCall{ToolCall: &reinv1.ToolCall{
			Tool: "read_file", CallId: marker(runID, seq),
		}}},
	}}
	return ev
}

// markerOf is the marker an event of damageFixture holds.
func markerOf(ev *reinv1.Event) string {
	if m := ev.GetModelRequested(); m != nil {
		return m.GetInputHash()
	}
	return ev.GetModelReturned().GetDecision().GetToolCall().GetCallId()
}

// offsetOf is the offset of the only occurrence of s in the file.
func offsetOf(t *testing.T, data []byte, s string) int64 {
	t.Helper()
	i := bytes.Index(data, []byte(s))
	if i < 0 || bytes.Contains(data[i+1:], []byte(s)) {
		t.Fatalf("%q is not in the file exactly once", s)
	}
	return int64(i)
}

// damage is one way to damage the file of damageFixture, and what it
// breaks: the run and sequence the error names ("" and 0: none).
type damage struct {
	name  string
	apply func(t *testing.T, data []byte)
	// seq is the sequence the DataLoss error of run-m's events names.
	seq uint64
	// load is true when Load(run-m) fails too (its snapshot or key).
	load bool
}

const pageSize = 4096

func damages() []damage {
	return []damage{
		{"flipped byte in an event", func(t *testing.T, data []byte) {
			data[offsetOf(t, data, marker("run-m", 7))+30] ^= 0x01
		}, 7, false},
		{"flipped element offset in a leaf page", func(t *testing.T, data []byte) {
			// A leaf page: a 16-byte header, then an element of 16 bytes per
			// key (flags, pos, ksize, vsize, little-endian). The top byte of
			// the first element's pos sends the read gigabytes away.
			page := offsetOf(t, data, marker("run-m", 7)) / pageSize * pageSize
			data[page+16+4+3] ^= 0x7f
		}, 0, false},
		{"zeroed page of events", func(t *testing.T, data []byte) {
			page := offsetOf(t, data, marker("run-m", 7)) / pageSize * pageSize
			clear(data[page : page+pageSize])
		}, 0, false},
		{"flipped byte of the run's key", func(t *testing.T, data []byte) {
			// The runs bucket's leaf page holds the three run IDs as keys.
			root := bucketRoot(t, data, bucketRuns)
			page := data[root*pageSize : (root+1)*pageSize]
			i := bytes.Index(page, []byte("run-m"))
			if i < 0 {
				t.Fatal("run-m is not a key of the runs bucket's root page")
			}
			page[i+4] ^= 0x01 // run-l: still between run-a and run-z
		}, 0, true},
	}
}

// bucketRoot is the root page of a top bucket, read through bbolt from a
// copy of data.
func bucketRoot(t *testing.T, data []byte, name []byte) int64 {
	t.Helper()
	path := filepath.Join(t.TempDir(), "copy.db")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var root int64
	_ = db.View(func(tx *bbolt.Tx) error { root = int64(tx.Bucket(name).Root()); return nil })
	if root == 0 {
		t.Fatalf("bucket %s is inline", name)
	}
	return root
}

func damagedFile(t *testing.T, d damage) string {
	t.Helper()
	path := damageFixture(t)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d.apply(t, data)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestDamagedPagesAreDataLoss: a damaged value or page of one run is
// DataLoss naming that run (and the event when it is one), the process does
// not crash, the other runs still read, rein check reports it, and nothing
// of it writes to the file, whether it is opened read-write or read-only.
func TestDamagedPagesAreDataLoss(t *testing.T) {
	for _, d := range damages() {
		t.Run(d.name, func(t *testing.T) {
			path := damagedFile(t, d)
			before := readFile(t, path)
			for _, ro := range []bool{false, true} {
				s, err := Open(path, Options{ReadOnly: ro})
				if err != nil {
					t.Fatalf("Open(read-only %v): %v", ro, err)
				}
				assertDamagedRun(t, s, d)
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
			}
			problems, err := Check(path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if !mentions(problems, "run-m") {
				t.Errorf("Check found %v, want a problem with run-m", problems)
			}
			if mentions(problems, "run-a") || mentions(problems, "run-z") {
				t.Errorf("Check blames a healthy run: %v", problems)
			}
			if !bytes.Equal(before, readFile(t, path)) {
				t.Error("reading the damaged file changed it")
			}
		})
	}
}

// TestHealthyFileIsNotDataLoss is the twin: the same file undamaged reads
// whole and checks clean.
func TestHealthyFileIsNotDataLoss(t *testing.T) {
	path := damageFixture(t)
	before := readFile(t, path)
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range damageRuns {
		assertReads(t, s, id)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if problems, err := Check(path, Options{}); err != nil || len(problems) != 0 {
		t.Errorf("Check: %v, %v; want no problem", problems, err)
	}
	if !bytes.Equal(before, readFile(t, path)) {
		t.Error("opening and reading a healthy file changed it")
	}
}

func assertDamagedRun(t *testing.T, s *Store, d damage) {
	t.Helper()
	ctx := context.Background()
	_, err := s.Events(ctx, "run-m", 0, 1000)
	assertDataLoss(t, "Events(run-m)", err, d.seq)
	for _, check := range benchDamageChecks {
		check(t, s, d)
	}
	if _, err := s.Load(ctx, "run-m"); d.load {
		assertDataLoss(t, "Load(run-m)", err, 0)
	} else if err != nil {
		t.Errorf("Load(run-m): %v; its snapshot is intact", err)
	}
	for _, id := range []string{"run-a", "run-z"} {
		assertReads(t, s, id)
	}
	// The damaged run never hides the others from a listing, with a status
	// filter (the status index) or without (the runs bucket); one whose
	// state cannot be read is named as damaged.
	for _, f := range []store.Filter{{Limit: 10}, {Limit: 10, Statuses: []reinv1.RunStatus{reinv1.RunStatus_RUN_STATUS_RUNNING}}} {
		page, err := s.List(ctx, f)
		if err != nil {
			t.Fatalf("List(%v): %v; want the healthy runs", f.Statuses, err)
		}
		listed := map[string]bool{}
		for _, st := range page.Runs {
			listed[st.RunID] = true
		}
		if !listed["run-a"] || !listed["run-z"] {
			t.Errorf("List(%v) gave %v; want run-a and run-z", f.Statuses, listed)
		}
		for _, d := range page.Damaged {
			if !errors.Is(d, store.ErrDataLoss) {
				t.Errorf("List(%v) names %v as damaged, not ErrDataLoss", f.Statuses, d)
			}
		}
		if d.load && len(page.Damaged) == 0 && !listed["run-m"] {
			t.Errorf("List(%v) hides the damaged run: neither listed nor named damaged", f.Statuses)
		}
	}
}

func assertDataLoss(t *testing.T, what string, err error, seq uint64) {
	t.Helper()
	if !errors.Is(err, store.ErrDataLoss) {
		t.Fatalf("%s: %v, want ErrDataLoss", what, err)
	}
	if !strings.Contains(err.Error(), "run-m") {
		t.Errorf("%s: %v does not name the run", what, err)
	}
	if seq != 0 && !strings.Contains(err.Error(), fmt.Sprintf("event %d", seq)) {
		t.Errorf("%s: %v does not name event %d", what, err, seq)
	}
}

func assertReads(t *testing.T, s *Store, id string) {
	t.Helper()
	ctx := context.Background()
	st, err := s.Load(ctx, id)
	if err != nil || st.Version != damageEvents {
		t.Fatalf("Load(%s): version %d, %v; want %d", id, st.Version, err, damageEvents)
	}
	evs, err := s.Events(ctx, id, 0, 1000)
	if err != nil || len(evs) != damageEvents {
		t.Fatalf("Events(%s): %d events, %v; want %d", id, len(evs), err, damageEvents)
	}
	if got := markerOf(evs[6]); got != marker(id, 7) {
		t.Fatalf("Events(%s)[6]: input hash %.20q, want %.20q", id, got, marker(id, 7))
	}
}

func mentions(problems []Problem, runID string) bool {
	for _, p := range problems {
		if p.RunID == runID || strings.Contains(p.Text, runID) {
			return true
		}
	}
	return false
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// activeMeta is the offset of the meta page bbolt uses (the greater txid).
// A meta page: a 16-byte page header, then magic, version, page size,
// flags (4 bytes each), the root bucket (16), the free list's page (8), the
// high-water mark (8), the txid (8), a checksum (8); little-endian.
func activeMeta(data []byte) int64 {
	txid := func(page int64) uint64 { return binary.LittleEndian.Uint64(data[page+16+16+16+8+8:]) }
	if txid(pageSize) > txid(0) {
		return pageSize
	}
	return 0
}

func freelistPage(data []byte) int64 {
	return int64(binary.LittleEndian.Uint64(data[activeMeta(data)+16+16+16:]))
}

// TestDamagedFreelist: a flipped byte in the free list's page (its flags:
// bbolt panics "invalid freelist page" when it reads it) is refused at a
// read-write open with ErrDataLoss, not a panic; read-only opens, which do
// not read the free list, still read every run; Check reports it; the file
// is unchanged.
func TestDamagedFreelist(t *testing.T) {
	path := damageFixture(t)
	data := readFile(t, path)
	fl := freelistPage(data)
	data[fl*pageSize+8] ^= 0x01 // flags: 0x10 (free list) → 0x11
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	problems, err := Check(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !mentionsText(problems, "free list") {
		t.Errorf("Check found %v, want the free list", problems)
	}
	s, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range damageRuns {
		assertReads(t, s, id)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Last: a panic at open leaves bbolt's descriptor and lock behind.
	_, err = Open(path, Options{})
	if !errors.Is(err, store.ErrDataLoss) || !strings.Contains(err.Error(), path) {
		t.Errorf("Open: %v, want ErrDataLoss naming the path", err)
	}
	if !bytes.Equal(data, readFile(t, path)) {
		t.Error("opening the damaged file changed it")
	}
}

func mentionsText(problems []Problem, s string) bool {
	for _, p := range problems {
		if strings.Contains(p.Text, s) {
			return true
		}
	}
	return false
}

// TestLegacyValues: values written before values were sealed (a bare
// protobuf encoding) still read; a legacy value that does not decode is
// DataLoss.
func TestLegacyValues(t *testing.T) {
	path := damageFixture(t)
	unsealAll(t, path)
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range damageRuns {
		assertReads(t, s, id)
	}
	// New appends to a legacy run are sealed; both kinds read together.
	ev := markedEvent("run-a", damageEvents+1)
	if _, err := s.Append(context.Background(), "run-a", damageEvents, []*reinv1.Event{ev}); err != nil {
		t.Fatal(err)
	}
	if evs, err := s.Events(context.Background(), "run-a", 0, 1000); err != nil || len(evs) != damageEvents+1 {
		t.Fatalf("Events(run-a): %d, %v", len(evs), err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if problems, err := Check(path, Options{}); err != nil || len(problems) != 0 {
		t.Errorf("Check: %v, %v; want no problem", problems, err)
	}

	// The twin: a legacy event that no longer decodes. A scrub first, so
	// that the file holds each value once: unsealAll's rewrite left the
	// sealed copies on free pages, which the commits since may or may not
	// have reused.
	if s, err = Open(path, Options{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Scrub(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	data := readFile(t, path)
	data[offsetOf(t, data, marker("run-m", 7))-2] = 0xff // the string's length varint
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = s.Events(context.Background(), "run-m", 0, 1000)
	assertDataLoss(t, "Events(run-m)", err, 7)
}

// unsealAll rewrites every event, snapshot and contract as rein wrote them
// before values were sealed.
func unsealAll(t *testing.T, path string) {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	strip := func(b *bbolt.Bucket, k, v []byte) {
		if len(v) < sealLen || v[0] != sealMarker {
			t.Fatalf("value %q is not sealed", k)
		}
		if err := b.Put(bytes.Clone(k), bytes.Clone(v[sealLen:])); err != nil {
			t.Fatal(err)
		}
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		each := func(b *bbolt.Bucket, fn func(k, v []byte)) {
			var kvs [][2][]byte
			_ = b.ForEach(func(k, v []byte) error { kvs = append(kvs, [2][]byte{k, v}); return nil })
			for _, kv := range kvs {
				fn(kv[0], kv[1])
			}
		}
		contracts := tx.Bucket(bucketContracts)
		each(contracts, func(k, v []byte) { strip(contracts, k, v) })
		for _, id := range damageRuns {
			b := runBucket(tx, id)
			strip(b, keySnapshot, b.Get(keySnapshot))
			eb := b.Bucket(keyEvents)
			each(eb, func(k, v []byte) { strip(eb, k, v) })
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestSealRoundTrip: a sealed value reads back; any one flipped bit of it
// is DataLoss.
func TestSealRoundTrip(t *testing.T) {
	ev := stepEvent("r", 2)
	ev.RecordedAt = timestamppb.New(ev.GetRecordedAt().AsTime())
	v, err := seal.Seal(ev)
	if err != nil {
		t.Fatal(err)
	}
	got := &reinv1.Event{}
	if err := unseal(v, got, "run r event 2"); err != nil || !proto.Equal(got, ev) {
		t.Fatalf("unseal: %v, %v", got, err)
	}
	for i := range len(v) * 8 {
		w := bytes.Clone(v)
		w[i/8] ^= 1 << (i % 8)
		if err := unseal(w, &reinv1.Event{}, "run r event 2"); !errors.Is(err, store.ErrDataLoss) {
			t.Fatalf("bit %d flipped: %v, want ErrDataLoss", i, err)
		}
	}
}
