package bolt

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	bbolt "go.etcd.io/bbolt"

	"github.com/reinhq/rein/internal/storeformat"
)

// newerBuild writes one format past this build's.
var newerBuild = storeformat.Build{
	Reads:  storeformat.Range{Min: storeformat.Oldest, Max: storeformat.Current + 1},
	Writes: storeformat.Range{Min: storeformat.Current, Max: storeformat.Current + 1},
}

// baseOnly is a build that writes store format 6 only, as the builds from
// before store formats did.
var baseOnly = storeformat.Build{Reads: storeformat.Range{Min: storeformat.Oldest, Max: storeformat.Base}, Writes: storeformat.Range{Min: storeformat.Base, Max: storeformat.Base}}

// TestStoreFormatNewerFileRefused: a file a newer build opened records its
// format, and this build refuses it, read-write and read-only, with an
// error naming both formats, leaving it byte-identical. Its twins: this
// build opens a file it wrote (and one from before formats), writing
// nothing to it, and the newer build opens its own.
func TestStoreFormatNewerFileRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rein.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if f, err := s.StoreFormat(); err != nil || f != storeformat.Current {
		t.Fatalf("a new file's format: %d %v", f, err)
	}
	_ = s.Close()
	before := readFile(t, path)
	if s, err = Open(path, Options{}); err != nil {
		t.Fatalf("this build on its own file: %v", err)
	}
	_ = s.Close()
	if !bytes.Equal(before, readFile(t, path)) {
		t.Fatal("opening a file in this build's format wrote to it")
	}
	if s, err = Open(path, Options{Formats: newerBuild}); err != nil {
		t.Fatalf("the newer build on an older file: %v", err)
	}
	_ = s.Close()
	if f, err := ReadStoreFormat(path, Options{}); err != nil || f != storeformat.Current+1 {
		t.Fatalf("after the newer build: format %d %v", f, err)
	}
	newer := readFile(t, path)
	for _, ro := range []bool{false, true} {
		_, err := Open(path, Options{ReadOnly: ro})
		if !errors.Is(err, storeformat.ErrIncompatible) || !strings.Contains(err.Error(), fmt.Sprintf("format %d", storeformat.Current+1)) ||
			!strings.Contains(err.Error(), fmt.Sprintf("up to %d", storeformat.Current)) || !strings.Contains(err.Error(), path) {
			t.Fatalf("read-only %v: this build on a newer file: %v", ro, err)
		}
	}
	if !bytes.Equal(newer, readFile(t, path)) {
		t.Fatal("a refused open changed the file")
	}
	if s, err = Open(path, Options{Formats: newerBuild}); err != nil {
		t.Fatalf("the newer build on its own file: %v", err)
	}
	_ = s.Close()
}

// TestStoreFormatLegacyFile: a file from before store formats (no
// meta/store_format) is in Base. A build that writes only Base opens it
// without a write; this build records its own format and marks the file
// rein-store-4, which the builds from before formats refuse (they check
// meta/format only), and such a build then refuses it too.
func TestStoreFormatLegacyFile(t *testing.T) {
	path := damageFixture(t)
	setFormat(t, path, formatV3)
	forgetStoreFormat(t, path)
	before := readFile(t, path)
	if f, err := ReadStoreFormat(path, Options{}); err != nil || f != storeformat.Base {
		t.Fatalf("format of a file from before: %d %v", f, err)
	}
	s, err := Open(path, Options{Formats: baseOnly})
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	if !bytes.Equal(before, readFile(t, path)) {
		t.Fatal("a build that writes the file's format wrote to it at open")
	}
	if s, err = Open(path, Options{}); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	if f, err := ReadStoreFormat(path, Options{}); err != nil || f != storeformat.Current {
		t.Fatalf("after this build opened it: format %d %v, want %d", f, err, storeformat.Current)
	}
	if got := metaFormat(t, path); got != string(formatV4) {
		t.Fatalf("after this build opened it, meta/format is %q, want %q", got, formatV4)
	}
	if _, err := Open(path, Options{Formats: baseOnly}); !errors.Is(err, storeformat.ErrIncompatible) {
		t.Fatalf("a build that writes format %d only, on a file this build opened: %v", storeformat.Base, err)
	}
}

// TestStoreFormatUnknownLayoutRefused: a file marked with a layout past
// rein-store-4 is refused, unchanged.
func TestStoreFormatUnknownLayoutRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rein.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bbolt.Tx) error { return tx.Bucket(bucketMeta).Put(keyFormat, []byte("rein-store-5")) }); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	before := readFile(t, path)
	if _, err := Open(path, Options{}); err == nil || !strings.Contains(err.Error(), `"rein-store-5"`) {
		t.Fatalf("a file marked rein-store-5: %v", err)
	}
	if !bytes.Equal(before, readFile(t, path)) {
		t.Fatal("a refused open changed the file")
	}
}

// metaFormat is the file's meta/format.
func metaFormat(t *testing.T, path string) string {
	t.Helper()
	db, err := bbolt.Open(path, 0o400, &bbolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v string
	_ = db.View(func(tx *bbolt.Tx) error { v = string(tx.Bucket(bucketMeta).Get(keyFormat)); return nil })
	return v
}

// TestStoreFormatNewFile: a new file is in the format of the build that
// made it, whichever formats that build writes, and a build that cannot
// write that format then refuses it.
func TestStoreFormatNewFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rein.db")
	s, err := Open(path, Options{Formats: newerBuild})
	if err != nil {
		t.Fatalf("a build that no longer writes format %d, on a new file: %v", storeformat.Base, err)
	}
	_ = s.Close()
	if f, err := ReadStoreFormat(path, Options{Formats: newerBuild}); err != nil || f != storeformat.Current+1 {
		t.Fatalf("the new file's format: %d %v, want %d", f, err, storeformat.Current+1)
	}
	if _, err := Open(path, Options{}); !errors.Is(err, storeformat.ErrIncompatible) {
		t.Fatalf("this build on the newer build's new file: %v", err)
	}
}
