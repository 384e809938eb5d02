package bolt

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bbolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
)

// compactFixture makes a store with room to reclaim and returns its path:
// the runs of damageFixture, blobs kept in run-a's log and blobs bucket,
// and 4 MiB of free pages. The store has no delete, so the free pages come
// from a bucket written and then deleted through bbolt, as pages freed by
// deleted runs would be.
func compactFixture(t *testing.T) string {
	t.Helper()
	path := damageFixture(t)
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	large := bytes.Repeat([]byte("a large tool output "), inlineBlobBytes/10)
	ev := markedEvent("run-a", damageEvents+1)
	if _, err := s.Append(context.Background(), "run-a", damageEvents, []*reinv1.Event{ev},
		store.WithBlobs(blobSet([]byte("a small observation"), large))); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	scratch := []byte("scratch")
	err = db.Update(func(tx *bbolt.Tx) error {
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
		err = db.Update(func(tx *bbolt.Tx) error { return tx.DeleteBucket(scratch) })
	}
	if err := errors.Join(err, db.Close()); err != nil {
		t.Fatal(err)
	}
	return path
}

// throughStore is everything the store's API reads of the file at path,
// each record encoded deterministically: every run listed, its state, every
// event, its blobs; every status change.
func throughStore(t *testing.T, path string) []string {
	t.Helper()
	s, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	enc := func(m proto.Message) string {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	page, err := s.List(ctx, store.Filter{Limit: 1000})
	if err != nil || len(page.Damaged) > 0 || page.Next != "" {
		t.Fatalf("List: %v, damaged %v, next %q", err, page.Damaged, page.Next)
	}
	var out []string
	for _, st := range page.Runs {
		id := st.RunID
		loaded, err := s.Load(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, "run "+id+" listed "+enc(st.Proto(true)), "run "+id+" loaded "+enc(loaded.Proto(true)))
		evs, err := s.Events(ctx, id, 0, 10000)
		if err != nil {
			t.Fatal(err)
		}
		var hashes []string
		for _, ev := range evs {
			out = append(out, fmt.Sprintf("run %s event %d %s", id, ev.GetSequence(), enc(ev)))
		}
		if id == "run-a" {
			hashes = []string{store.BlobHash([]byte("a small observation")),
				store.BlobHash(bytes.Repeat([]byte("a large tool output "), inlineBlobBytes/10))}
		}
		blobs, err := s.Blobs(ctx, id, hashes)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hashes {
			out = append(out, "run "+id+" blob "+h+" "+string(blobs[h]))
		}
	}
	changes, last, err := s.Changes(ctx, 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range changes {
		out = append(out, fmt.Sprintf("change %d %s %s", c.Cursor, c.Tenant, enc(c.Change)))
	}
	return append(out, fmt.Sprintf("last change %d", last))
}

// mustBeSame fails the test at the first record where got differs from want.
func mustBeSame(t *testing.T, want, got []string) {
	t.Helper()
	for i := range max(len(want), len(got)) {
		switch {
		case i >= len(got):
			t.Fatalf("after compaction, %q is missing", want[i][:min(len(want[i]), 60)])
		case i >= len(want):
			t.Fatalf("after compaction, %q is new", got[i][:min(len(got[i]), 60)])
		case want[i] != got[i]:
			t.Fatalf("after compaction, record %d differs:\n%q\nwas\n%q", i, got[i][:min(len(got[i]), 80)], want[i][:min(len(want[i]), 80)])
		}
	}
}

// mustHaveNoCopy fails the test if a compaction's copy is left beside path.
func mustHaveNoCopy(t *testing.T, path string) {
	t.Helper()
	left, err := filepath.Glob(path + ".compact-*")
	if err != nil || len(left) > 0 {
		t.Errorf("copies left beside the file: %v (%v)", left, err)
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Size()
}

// TestCompactKeepsEveryRun: compaction replaces the file with a smaller
// one (mode 0600) that reads, through the store's API, byte for byte as
// the file did, checks clean, and opens read-write. The twin, in the tests
// below: a file that cannot be compacted, or whose copy fails, is left as
// it was.
func TestCompactKeepsEveryRun(t *testing.T) {
	path := compactFixture(t)
	want := throughStore(t, path)
	before := fileSize(t, path)
	res, err := Compact(path, CompactOptions{})
	if err != nil {
		t.Fatal(err)
	}
	after := fileSize(t, path)
	if !res.Replaced || res.Before != before || res.After != after || after >= before {
		t.Errorf("Compact = %+v; the file was %d bytes and is %d, want it replaced by a smaller one", res, before, after)
	}
	if res.Runs != len(damageRuns) || res.Events != uint64(len(damageRuns)*damageEvents+1) {
		t.Errorf("Compact counted %d runs and %d events, want %d and %d", res.Runs, res.Events, len(damageRuns), len(damageRuns)*damageEvents+1)
	}
	t.Logf("%d bytes → %d in %v", before, after, res.Took)
	mustBeSame(t, want, throughStore(t, path))
	if problems, err := Check(path, Options{}); err != nil || len(problems) > 0 {
		t.Errorf("Check after compaction: %v, %v", problems, err)
	}
	if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("the compacted file: %v, %v; want mode 0600", info.Mode(), err)
	}
	mustHaveNoCopy(t, path)
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(context.Background(), "run-z", damageEvents, []*reinv1.Event{markedEvent("run-z", damageEvents+1)}); err != nil {
		t.Errorf("append to the compacted store: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestCompactNothingToReclaim: a store already compact is left byte for
// byte as it was, and the copy removed. Its twin is TestCompactKeepsEveryRun.
func TestCompactNothingToReclaim(t *testing.T) {
	path := compactFixture(t)
	if _, err := Compact(path, CompactOptions{}); err != nil {
		t.Fatal(err)
	}
	data := readFile(t, path)
	res, err := Compact(path, CompactOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Replaced || res.After < res.Before {
		t.Errorf("Compact of a compact store = %+v, want it not replaced", res)
	}
	if !bytes.Equal(data, readFile(t, path)) {
		t.Error("the file changed")
	}
	mustHaveNoCopy(t, path)
}

// TestCompactThroughALink: a --db that is a symbolic link compacts the file
// it names, beside it, and stays a link.
func TestCompactThroughALink(t *testing.T) {
	path := compactFixture(t)
	link := filepath.Join(t.TempDir(), "link.db")
	if err := os.Symlink(path, link); err != nil {
		t.Skipf("no symbolic links here: %v", err)
	}
	res, err := Compact(link, CompactOptions{})
	if err != nil || !res.Replaced || res.Path != path {
		t.Fatalf("Compact(link) = %+v, %v; want %s replaced", res, err, path)
	}
	if info, err := os.Lstat(link); err != nil || info.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link: %v, %v; want it still a link", info, err)
	}
	if fileSize(t, path) != res.After {
		t.Errorf("the file is %d bytes, want the copy's %d", fileSize(t, path), res.After)
	}
}

// TestCompactRefusesAHeldFile: a file another store holds, read-write (a
// rein serve) or read-only (a rein list), is refused with ErrInUse and an
// error that says to stop the server, and is unchanged. The twin: once it
// is closed, the file compacts.
func TestCompactRefusesAHeldFile(t *testing.T) {
	for _, readOnly := range []bool{false, true} {
		t.Run(fmt.Sprintf("read-only %v", readOnly), func(t *testing.T) {
			path := compactFixture(t)
			holder, err := Open(path, Options{ReadOnly: readOnly})
			if err != nil {
				t.Fatal(err)
			}
			data := readFile(t, path)
			_, err = Compact(path, CompactOptions{})
			if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), path+" is in use by another process (a running rein serve?); stop it first") {
				t.Errorf("Compact of a held file: %v, want ErrInUse naming the file", err)
			}
			if !bytes.Equal(data, readFile(t, path)) {
				t.Error("the held file changed")
			}
			mustHaveNoCopy(t, path)
			if err := holder.Close(); err != nil {
				t.Fatal(err)
			}
			if res, err := Compact(path, CompactOptions{}); err != nil || !res.Replaced {
				t.Errorf("Compact once the holder closed: %+v, %v", res, err)
			}
		})
	}
}

// TestCompactRefusesADamagedFile: a damaged file, or one that is not a rein
// store, is refused with a DamagedError naming it and what is wrong, and
// is byte for byte unchanged, with no copy left. The twin is
// TestCompactKeepsEveryRun.
func TestCompactRefusesADamagedFile(t *testing.T) {
	type tc struct {
		name string
		make func(t *testing.T) string
		want string
	}
	var cases []tc
	for _, d := range damages() {
		cases = append(cases, tc{d.name, func(t *testing.T) string { return damagedFile(t, d) }, "run run-"})
	}
	cases = append(cases,
		tc{"another program's bbolt file", func(t *testing.T) string {
			path := filepath.Join(t.TempDir(), "other.db")
			db, err := bbolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = db.Update(func(tx *bbolt.Tx) error {
				b, err := tx.CreateBucket([]byte("widgets"))
				if err != nil {
					return err
				}
				return b.Put([]byte("k"), []byte("v"))
			})
			if err := errors.Join(err, db.Close()); err != nil {
				t.Fatal(err)
			}
			return path
		}, "not a rein store"},
		tc{"random bytes", func(t *testing.T) string {
			path := filepath.Join(t.TempDir(), "rein.db")
			data := make([]byte, 64<<10)
			_, _ = rand.Read(data)
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			return path
		}, "cannot be opened"},
		tc{"empty file", func(t *testing.T) string {
			path := filepath.Join(t.TempDir(), "rein.db")
			if err := os.WriteFile(path, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			return path
		}, "empty"},
		// Last: a panic at open leaves bbolt's descriptor and lock behind.
		tc{"damaged free list", func(t *testing.T) string {
			path := compactFixture(t)
			data := readFile(t, path)
			data[freelistPage(data)*pageSize+8] ^= 0x01
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			return path
		}, "freelist"},
	)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := c.make(t)
			data := readFile(t, path)
			_, err := Compact(path, CompactOptions{})
			var de *DamagedError
			if !errors.As(err, &de) || de.Path != path || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "left unchanged") {
				t.Errorf("Compact: %v, want a DamagedError naming %s and %q", err, path, c.want)
			}
			if !bytes.Equal(data, readFile(t, path)) {
				t.Error("the refused file changed")
			}
			mustHaveNoCopy(t, path)
		})
	}
}

// TestCompactMissingFile: no file is os.ErrNotExist, and none is made.
func TestCompactMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rein.db")
	if _, err := Compact(path, CompactOptions{}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Compact of no file: %v, want ErrNotExist", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Compact made %s: %v", path, err)
	}
	mustHaveNoCopy(t, path)
}

// TestCompactCopyFails: when the copy fails, in the writing or in the
// verification (it does not check clean, lacks a run or a run's last
// event, or any value differs), the file is left byte for byte as it was,
// the copy removed, and the error says what failed. The twin is
// TestCompactKeepsEveryRun.
func TestCompactCopyFails(t *testing.T) {
	update := func(fn func(tx *bbolt.Tx) error) func(string) error {
		return func(copyPath string) error {
			db, err := bbolt.Open(copyPath, 0o600, nil)
			if err != nil {
				return err
			}
			return errors.Join(db.Update(fn), db.Close())
		}
	}
	lastEvent := func(tx *bbolt.Tx) (*bbolt.Bucket, []byte) {
		return tx.Bucket(bucketRuns).Bucket([]byte("run-m")).Bucket(keyEvents), binary.BigEndian.AppendUint64(nil, damageEvents)
	}
	for _, tc := range []struct {
		name      string
		afterCopy func(copyPath string) error
		want      string
	}{
		{"writing the copy fails", func(string) error { return errors.New("fsync: input/output error") }, "write the copy"},
		{"a flipped byte in an event", update(func(tx *bbolt.Tx) error {
			b, key := lastEvent(tx)
			v := bytes.Clone(b.Get(key))
			v[len(v)/2] ^= 0x01
			return b.Put(key, v)
		}), "rein check finds"},
		{"the last event of a run lost", update(func(tx *bbolt.Tx) error {
			b, key := lastEvent(tx)
			return b.Delete(key)
		}), "rein check finds"},
		{"a run lost whole", update(func(tx *bbolt.Tx) error {
			return dropRun(tx, "run-z")
		}), "run run-z is missing"},
		{"a value the check does not read", update(func(tx *bbolt.Tx) error {
			return tx.Bucket(bucketMeta).Put([]byte("extra"), []byte("x"))
		}), "differ from the file's"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := compactFixture(t)
			data := readFile(t, path)
			_, err := compact(path, CompactOptions{}, tc.afterCopy)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path+" was left unchanged and the copy removed") {
				t.Errorf("compact: %v, want an error saying %q and that the file was left unchanged", err, tc.want)
			}
			if !bytes.Equal(data, readFile(t, path)) {
				t.Error("the file changed")
			}
			mustHaveNoCopy(t, path)
		})
	}
}

// dropRun removes a run from tx and every index that names it, so that the
// store checks clean without it.
func dropRun(tx *bbolt.Tx, runID string) error {
	for _, name := range [][]byte{bucketStatus, bucketRequests} {
		b := tx.Bucket(name)
		var keys [][]byte
		err := b.ForEach(func(k, v []byte) error {
			if (bytes.Equal(name, bucketStatus) && string(k[1:]) == runID) || (bytes.Equal(name, bucketRequests) && string(v) == runID) {
				keys = append(keys, bytes.Clone(k))
			}
			return nil
		})
		if err != nil || len(keys) == 0 {
			return fmt.Errorf("%s names no %s (%v)", name, runID, err)
		}
		for _, k := range keys {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
	}
	if err := tx.Bucket(bucketContracts).Delete([]byte(runID)); err != nil {
		return err
	}
	return tx.Bucket(bucketRuns).DeleteBucket([]byte(runID))
}
