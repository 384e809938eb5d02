package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bbolt "go.etcd.io/bbolt"

	"github.com/reinhq/rein/internal/store/bolt"
)

// bloat gives the store at db 4 MiB of free pages: a bucket written and
// then deleted through bbolt, as the pages of deleted runs would be.
func bloat(t *testing.T, db string) {
	t.Helper()
	bdb, err := bbolt.Open(db, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	scratch := []byte("scratch")
	err = bdb.Update(func(tx *bbolt.Tx) error {
		b, err := tx.CreateBucket(scratch)
		if err != nil {
			return err
		}
		for i := range 64 {
			if err := b.Put(binary.BigEndian.AppendUint64(nil, uint64(i)), bytes.Repeat([]byte{byte(i)}, 64<<10)); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		err = bdb.Update(func(tx *bbolt.Tx) error { return tx.DeleteBucket(scratch) })
	}
	if err := errors.Join(err, bdb.Close()); err != nil {
		t.Fatal(err)
	}
}

// readRuns is what rein reads of runs a and b from db: their states and
// events, as JSON.
func readRuns(t *testing.T, db string, ids ...string) string {
	t.Helper()
	var out strings.Builder
	for _, id := range ids {
		out.WriteString(cli(t, "inspect", id, "--json", "--db", db).mustExit(t, 0).stdout)
		out.WriteString(cli(t, "events", id, "--json", "--db", db).mustExit(t, 0).stdout)
	}
	return out.String()
}

// mustLeaveNoCopy fails the test if a compaction's copy is beside db.
func mustLeaveNoCopy(t *testing.T, db string) {
	t.Helper()
	if left, err := filepath.Glob(db + ".compact-*"); err != nil || len(left) > 0 {
		t.Errorf("copies left beside the store: %v (%v)", left, err)
	}
}

// TestCompactCLI: rein compact shrinks a store with free pages, prints its
// sizes before and after, in bytes and in words, and every run reads as
// before and checks clean. Run again, it finds the store compact already
// and leaves it byte for byte (--json). The twin: TestCompactCLIRefuses.
func TestCompactCLI(t *testing.T) {
	t.Parallel()
	db, a, b := twoRuns(t)
	bloat(t, db)
	want := readRuns(t, db, a, b)
	before := int64(len(fileBytes(t, db)))

	r := cli(t, "compact", "--db", db).mustExit(t, 0)
	after := int64(len(fileBytes(t, db)))
	if after >= before {
		t.Fatalf("the store is %d bytes after compaction, %d before", after, before)
	}
	mustContain(t, "rein compact", r.stdout, db+" compacted in ",
		fmt.Sprintf("before: %s (%d bytes)", humanBytes(before), before),
		fmt.Sprintf("after:  %s (%d bytes)", humanBytes(after), after),
		"2 runs and ")
	if got := readRuns(t, db, a, b); got != want {
		t.Errorf("the runs read differently after compaction:\n%s\nwas\n%s", got, want)
	}
	cli(t, "check", "--db", db).mustExit(t, 0)
	mustLeaveNoCopy(t, db)

	data := fileBytes(t, db)
	r = cli(t, "compact", "--db", db, "--json").mustExit(t, 0)
	out := decodeOne(t, r.stdout)
	if out["db"] != db || out["replaced"] != false || num(t, out["before_bytes"], "before_bytes") != int(after) ||
		num(t, out["reclaimed_bytes"], "reclaimed_bytes") != 0 || num(t, out["runs"], "runs") != 2 {
		t.Errorf("rein compact --json of a compact store: %s", r.stdout)
	}
	if _, ok := out["took_ms"].(float64); !ok {
		t.Errorf("rein compact --json has no took_ms: %s", r.stdout)
	}
	if !bytes.Equal(data, fileBytes(t, db)) {
		t.Error("compacting a compact store changed it")
	}
	mustLeaveNoCopy(t, db)
}

// TestCompactCLIRefuses: a store another process holds (exit 5), a damaged
// one (exit 1, as rein check), none (exit 3) and a --server (exit 2) are
// refused with an error that says what to do, and the file is unchanged.
func TestCompactCLIRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, db, b string) (args []string, release func())
		code  int
		want  []string
	}{
		{"held by a server", func(t *testing.T, db, _ string) ([]string, func()) {
			s, err := bolt.Open(db, bolt.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return nil, func() { _ = s.Close() }
		}, exitUnavailable, []string{"is in use by another process (a running rein serve?); stop it first"}},
		{"damaged", func(t *testing.T, db, b string) ([]string, func()) {
			value, leaf := eventValue(t, db, b, 3)
			if leaf == 0 {
				t.Skip("the run's events are not a leaf page of their own")
			}
			data := fileBytes(t, db)
			page := data[leaf*4096 : (leaf+1)*4096]
			i := bytes.Index(page, value)
			if i < 0 {
				t.Fatal("the event's value is not in the events' leaf page")
			}
			page[i+len(value)/2] ^= 0x10
			if err := os.WriteFile(db, data, 0o600); err != nil {
				t.Fatal(err)
			}
			return nil, nil
		}, exitError, []string{"damaged or not a rein store", "left unchanged", "rein check --db", "run_01BIGRUNB"}},
		{"no file", func(t *testing.T, db, _ string) ([]string, func()) {
			if err := os.Remove(db); err != nil {
				t.Fatal(err)
			}
			return nil, nil
		}, exitNotFound, []string{"no rein store at"}},
		{"a --server", func(*testing.T, string, string) ([]string, func()) {
			return []string{"--server", "127.0.0.1:1"}, nil
		}, exitUsage, []string{"not a --server's"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db, _, b := bigRuns(t)
			bloat(t, db)
			args, release := tc.setup(t, db, b)
			data, _ := os.ReadFile(db)
			r := cli(t, append([]string{"compact", "--db", db}, args...)...).mustExit(t, tc.code)
			mustContain(t, "rein compact", r.stderr, tc.want...)
			if r.stdout != "" {
				t.Errorf("stdout %q, want nothing", r.stdout)
			}
			if release != nil {
				release()
			}
			if now, _ := os.ReadFile(db); !bytes.Equal(data, now) {
				t.Error("the refused store changed")
			}
			mustLeaveNoCopy(t, db)
		})
	}
}
