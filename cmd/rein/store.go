package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/store/bolt"
	"github.com/reinhq/rein/internal/storeformat"
)

// openStore opens the bbolt file at db read-write, creating its directory,
// for a caller that serves it itself (a test's server); rein serve and the
// embedded server open theirs in assembly.Start. A store that cannot be
// used (locked by another process, damaged, not a rein store) is exit 5.
//
// outbox makes the webhook deliveries of each append (webhook.Matcher),
// in its transaction.
func openStore(db string, outbox store.Outbox) (store.Store, error) {
	if err := os.MkdirAll(filepath.Dir(db), 0o700); err != nil {
		return nil, &exitErr{code: exitError, err: fmt.Errorf("create the directory for --db %s: %w", db, err)}
	}
	st, err := bolt.Open(db, bolt.Options{Outbox: outbox})
	if err != nil {
		return nil, &exitErr{code: openExitCode(err), err: err}
	}
	return st, nil
}

// openExitCode is the exit code of a store that did not open: 2 for one in
// a store format this build cannot serve (retrying will not help; another
// build will), else 5.
func openExitCode(err error) int {
	if errors.Is(err, storeformat.ErrIncompatible) {
		return exitUsage
	}
	return exitUnavailable
}

// problem is one problem checkStore found.
type problem = bolt.Problem

// checkStore checks the store at db read-only (rein check): every problem
// it found, or an error when it could not read the file at all.
func checkStore(db string) ([]problem, error) {
	return bolt.Check(db, bolt.Options{})
}

// openStoreReadOnly opens the existing store at db for a command that only
// reads: bbolt read-only, so it never writes a byte (not even bbolt's
// header pages), works on a read-only file or mount, and runs beside other
// readers. A server on it refuses every write (store.ErrReadOnly).
func openStoreReadOnly(db string) (store.Store, error) {
	st, err := bolt.Open(db, bolt.Options{ReadOnly: true})
	if err != nil {
		return nil, &exitErr{code: openExitCode(err), err: err}
	}
	return st, nil
}
