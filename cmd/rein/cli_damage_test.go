package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reinhq/rein/internal/rofs"

	bbolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store/bolt"
)

// twoRuns makes a store with two completed invoice runs and returns it and
// their IDs.
func twoRuns(t *testing.T) (db, a, b string) {
	t.Helper()
	db = newDB(t)
	a = startExample(t, "invoice", db, 0)["run_id"].(string)
	b = startExample(t, "invoice", db, 0)["run_id"].(string)
	return db, a, b
}

// bigRuns makes a store with two runs of 10 events of ~300 bytes, written
// through the store directly, so that each run's events fill a leaf page of
// their own (one each: 10 fit one page); it returns the store and the run IDs.
func bigRuns(t *testing.T) (db, a, b string) {
	t.Helper()
	db = newDB(t)
	if err := os.MkdirAll(filepath.Dir(db), 0o700); err != nil {
		t.Fatal(err)
	}
	s, err := bolt.Open(db, bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, b = "run_01BIGRUNA00000000000000000", "run_01BIGRUNB00000000000000000"
	for _, id := range []string{a, b} {
		evs := []*reinv1.Event{{RunId: id, Sequence: 1, RecordedAt: timestamppb.Now(), Actor: "harness",
			Payload: &reinv1.Event_RunStarted{RunStarted: &reinv1.RunStarted{
				Contract: &reinv1.TaskContract{Goal: "a big run", Budget: &reinv1.Budget{MaxSteps: 100}}, Tenant: "default", Principal: "local",
			}}}}
		for seq := uint64(2); seq <= 10; seq++ {
			pad := fmt.Sprintf("%s-%d-%s", id, seq, strings.Repeat("x", 250))
			ev := &reinv1.Event{RunId: id, Sequence: seq, RecordedAt: timestamppb.Now(), Actor: "harness",
				Payload: &reinv1.Event_ModelRequested{ModelRequested: &reinv1.ModelRequested{Step: uint32(seq / 2), InputHash: pad}}}
			if seq%2 == 1 {
				ev.Actor = "model"
				ev.Payload = &reinv1.Event_ModelReturned{ModelReturned: &reinv1.ModelReturned{
					Decision: &reinv1.Decision{Action: &reinv1.Decision_ToolCall{ToolCall: &reinv1.ToolCall{Tool: "t", CallId: pad}}},
				}}
			}
			evs = append(evs, ev)
		}
		if _, _, err := s.Create(ctx, evs[0]); err != nil {
			t.Fatal(err)
		}
		for i, ev := range evs[1:] {
			if _, err := s.Append(ctx, id, uint64(i+1), []*reinv1.Event{ev}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return db, a, b
}

func fileBytes(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// readOnlyCommands are the commands that must never write to the store.
func readOnlyCommands(runID, exportFile string) [][]string {
	return [][]string{
		{"list"}, {"list", "--json"}, {"pending"},
		{"inspect", runID}, {"inspect", runID, "--json"},
		{"events", runID}, {"events", runID, "--json"},
		{"export", runID, "-o", exportFile},
		{"watch", runID},
		{"check"},
	}
}

// TestReadCommandsWriteNothing: list, inspect, events, export, watch,
// pending and check leave the store byte-identical (bbolt's read-write open
// rewrote its header pages), and so does a refused import. The twin: a
// command that changes a run changes the file.
func TestReadCommandsWriteNothing(t *testing.T) {
	t.Parallel()
	db, a, _ := twoRuns(t)
	file := filepath.Join(t.TempDir(), "run.rein")
	before := fileBytes(t, db)
	for _, args := range readOnlyCommands(a, file) {
		cli(t, append(args, "--db", db)...).mustExit(t, 0)
		if !bytes.Equal(before, fileBytes(t, db)) {
			t.Fatalf("rein %s changed the store", strings.Join(args, " "))
		}
	}
	r := cli(t, "import", file, "--db", db).mustExit(t, exitError)
	mustContain(t, "refused import", r.stderr, "already")
	if !bytes.Equal(before, fileBytes(t, db)) {
		t.Fatal("a refused import changed the store")
	}

	refund := startExample(t, "refund", db, exitPaused)["run_id"].(string)
	before = fileBytes(t, db)
	cli(t, "cancel", refund, "--db", db).mustExit(t, 0)
	if bytes.Equal(before, fileBytes(t, db)) {
		t.Fatal("rein cancel did not change the store")
	}
}

// TestReadCommandsOnReadOnlyStore: with the file and its directory
// read-only (modes 0400 and 0500, and for root, who ignores modes, a
// read-only bind mount), list, inspect and events work. The twin: a command
// that writes is refused with exit 5 and an error that says the file cannot
// be written, and no word of a backup.
func TestReadCommandsOnReadOnlyStore(t *testing.T) {
	t.Parallel()
	db, a, _ := twoRuns(t)
	before := fileBytes(t, db)
	db = rofs.ReadOnly(t, db)
	for _, args := range [][]string{{"list"}, {"inspect", a}, {"events", a}, {"check"}} {
		cli(t, append(args, "--db", db)...).mustExit(t, 0)
	}
	r := cli(t, exampleRun("invoice", db)...).mustExit(t, exitUnavailable)
	mustContain(t, "rein run on a read-only store", r.stderr, "cannot be written", "read-only")
	if strings.Contains(r.stderr, "backup") {
		t.Errorf("a healthy read-only store is told to restore a backup:\n%s", r.stderr)
	}
	if !bytes.Equal(before, fileBytes(t, db)) {
		t.Error("the store changed")
	}
}

// TestReadBesideHolder: while another process holds the store read-write
// (a rein serve), a read-only command is refused with exit 5 and told to use
// --server. The twin: beside another reader, it works.
func TestReadBesideHolder(t *testing.T) {
	t.Parallel()
	db, a, _ := twoRuns(t)
	w, err := bolt.Open(db, bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := cli(t, "list", "--db", db).mustExit(t, exitUnavailable)
	mustContain(t, "list beside a writer", r.stderr, "locked by another process", "--server")
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	ro, err := bolt.Open(db, bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	cli(t, "events", a, "--db", db).mustExit(t, 0)
}

// eventValue returns a stored event value of run and the leaf page that
// holds the run's events (0 when they are inline in their parent's page),
// read from a copy of the file so that the file is not opened.
func eventValue(t *testing.T, db, runID string, seq uint64) (value []byte, leaf int64) {
	t.Helper()
	cp := filepath.Join(t.TempDir(), "copy.db")
	if err := os.WriteFile(cp, fileBytes(t, db), 0o600); err != nil {
		t.Fatal(err)
	}
	bdb, err := bbolt.Open(cp, 0o600, &bbolt.Options{ReadOnly: true, PreLoadFreelist: true}) // tx.Page needs the free list
	if err != nil {
		t.Fatal(err)
	}
	defer bdb.Close()
	err = bdb.View(func(tx *bbolt.Tx) error {
		eb := tx.Bucket([]byte("runs")).Bucket([]byte(runID)).Bucket([]byte("events"))
		key := make([]byte, 8)
		binary.BigEndian.PutUint64(key, seq)
		value = bytes.Clone(eb.Get(key))
		if root := eb.Root(); root != 0 {
			if info, err := tx.Page(int(root)); err == nil && info.Type == "leaf" {
				leaf = int64(root)
			}
		}
		return nil
	})
	if err != nil || value == nil {
		t.Fatalf("event %d of run %s: %v", seq, runID, err)
	}
	return value, leaf
}

// TestDamagedStore: a flipped byte in one run's event, or a damaged leaf
// page of its events, is DataLoss for that run, naming it (and the event),
// with exit 1; the other run still reads; rein check reports it with exit
// 1; nothing writes to the file. Before, the leaf page's damage killed the
// process ("unexpected fault address"). The twin: the healthy store checks
// clean.
func TestDamagedStore(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, data, value []byte, leaf int64)
		seq    string
	}{
		{"flipped byte in an event", func(t *testing.T, data, value []byte, leaf int64) {
			if leaf == 0 {
				t.Skip("the run's events are not a leaf page of their own")
			}
			// Within the live page: freed pages may hold older copies.
			page := data[leaf*4096 : (leaf+1)*4096]
			i := bytes.Index(page, value)
			if i < 0 {
				t.Fatal("the event's value is not in the events' leaf page")
			}
			page[i+len(value)/2] ^= 0x10
		}, "event 3"},
		{"flipped element offset in the events' leaf page", func(t *testing.T, data, _ []byte, leaf int64) {
			if leaf == 0 {
				t.Skip("the run's events are not a leaf page of their own")
			}
			data[leaf*4096+16+4+3] ^= 0x7f // the first element's pos, top byte
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db, a, b := bigRuns(t)
			cli(t, "check", "--db", db).mustExit(t, 0) // the twin
			cli(t, "events", b, "--db", db).mustExit(t, 0)
			value, leaf := eventValue(t, db, b, 3)
			data := fileBytes(t, db)
			tc.damage(t, data, value, leaf)
			if err := os.WriteFile(db, data, 0o600); err != nil {
				t.Fatal(err)
			}
			for _, args := range [][]string{{"events", b}, {"inspect", b}} {
				r := cli(t, append(args, "--db", db)...).mustExit(t, exitError)
				mustContain(t, "rein "+args[0]+" of the damaged run", r.stderr, "DataLoss", b, tc.seq)
			}
			cli(t, "events", a, "--db", db).mustExit(t, 0)
			cli(t, "list", "--db", db).mustExit(t, 0)
			r := cli(t, "check", "--db", db).mustExit(t, exitError)
			mustContain(t, "rein check", r.stdout, b)
			if strings.Contains(r.stdout, a) {
				t.Errorf("rein check blames the healthy run:\n%s", r.stdout)
			}
			if !bytes.Equal(data, fileBytes(t, db)) {
				t.Error("the damaged store changed")
			}
		})
	}
}

// TestDamagedFreelist: a flipped byte in the free list's page made every
// command print a Go panic and exit 2. Now a command that opens the store
// read-write is refused with exit 5 and a clear error; the read-only ones,
// which do not read the free list, still work; rein check reports it; the
// file is unchanged.
func TestDamagedFreelistCLI(t *testing.T) {
	t.Parallel()
	db, a, _ := twoRuns(t)
	data := fileBytes(t, db)
	meta := int64(0)
	txid := func(page int64) uint64 { return binary.LittleEndian.Uint64(data[page+64:]) }
	if txid(4096) > txid(0) {
		meta = 4096
	}
	freelist := int64(binary.LittleEndian.Uint64(data[meta+48:]))
	data[freelist*4096+8] ^= 0x01 // its flags: 0x10 → 0x11
	if err := os.WriteFile(db, data, 0o600); err != nil {
		t.Fatal(err)
	}
	cli(t, "list", "--db", db).mustExit(t, 0)
	cli(t, "events", a, "--db", db).mustExit(t, 0)
	r := cli(t, "check", "--db", db).mustExit(t, exitError)
	mustContain(t, "rein check", r.stdout, "free list")
	r = cli(t, exampleRun("invoice", db)...).mustExit(t, exitUnavailable)
	mustContain(t, "rein run", r.stderr, db, "damaged")
	if strings.Contains(r.stderr, "goroutine ") {
		t.Errorf("rein run printed a panic:\n%s", r.stderr)
	}
	if !bytes.Equal(data, fileBytes(t, db)) {
		t.Error("the damaged store changed")
	}
}

// TestDiskFullCLI: on a full disk, rein run reaches the user as "the
// server's disk is full": its store cannot make its log, without which it
// takes no write (docs/storage.md), so it does not open; the runs stored
// before are all there. The twin: with room again, it runs.
func TestDiskFullCLI(t *testing.T) {
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=2M", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", dir).Run() })
	db := filepath.Join(dir, "rein.db")
	first := startExample(t, "invoice", db, 0)["run_id"].(string)
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	for buf := make([]byte, 4096); ; {
		if _, err := f.Write(buf); err != nil {
			break
		}
	}
	f.Close()
	// A run whose contract needs more pages than the file has free, so that
	// its first commit grows the file. (A run that starts and then meets the
	// full disk stops where it is, as a crash would leave it.)
	task := fileBytes(t, example("invoice", "task.json"))
	task = bytes.Replace(task, []byte(`"inputs": {`), []byte(`"inputs": {"padding": "`+strings.Repeat("x", 512<<10)+`", `), 1)
	args := exampleRun("invoice", db)
	args[1] = writeFile(t, "big-task.json", string(task))
	r := cli(t, args...).mustExit(t, exitUnavailable)
	mustContain(t, "rein run on a full disk", r.stderr, "the server's disk is full", "free the disk")
	list := cli(t, "list", "--db", db, "--json").mustExit(t, 0)
	mustContain(t, "rein list", list.stdout, first)
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	startExample(t, "invoice", db, 0)
}
