package bolt

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reinhq/rein/internal/storeformat"
)

// newerBuild writes one format past this build's.
var newerBuild = storeformat.Build{
	Reads:  storeformat.Range{Min: storeformat.Oldest, Max: storeformat.Current + 1},
	Writes: storeformat.Range{Min: storeformat.Current, Max: storeformat.Current + 1},
}

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
		if !errors.Is(err, storeformat.ErrIncompatible) || !strings.Contains(err.Error(), "format 7") || !strings.Contains(err.Error(), "up to 6") || !strings.Contains(err.Error(), path) {
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
// meta/store_format) is in Base, and opens without a write.
func TestStoreFormatLegacyFile(t *testing.T) {
	path := damageFixture(t)
	before := readFile(t, path)
	if f, err := ReadStoreFormat(path, Options{}); err != nil || f != storeformat.Base {
		t.Fatalf("format of a file from before: %d %v", f, err)
	}
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	if !bytes.Equal(before, readFile(t, path)) {
		t.Fatal("opening a file from before store formats wrote to it")
	}
}
