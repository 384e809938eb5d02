package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/store/bolt"
	"github.com/reinhq/rein/internal/storeformat"
	"github.com/reinhq/rein/internal/version"
	"github.com/reinhq/rein/server"
)

// openStore opens the store rein keeps its runs in, for rein serve and the
// embedded server alike: the bbolt file at db (the embedded default),
// creating its directory. It and openStoreReadOnly are the one place the
// CLI chooses a backend. A store that cannot be used (locked by another
// process, damaged, not a rein store) is exit 5.
//
// outbox makes the webhook deliveries of each append (webhook.Matcher),
// in its transaction: every server on the file, embedded ones included,
// sets it, so that what a subscription must send is stored whichever
// process commits the event.
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

// singleCluster is the store format of a server alone on its bbolt file
// (rein cluster status, rein version --server), with driving counting the
// runs it drives (nil: unknown); nil for any other store.
func singleCluster(st store.Store, log *slog.Logger, driving func() int) server.Cluster {
	b, ok := st.(*bolt.Store)
	if !ok {
		return nil
	}
	f, err := b.StoreFormat()
	if err != nil {
		f = storeformat.Base // Open read it already; a read that fails now leaves the gate at the base
	}
	return storeformat.NewSingle(version.String(version.Get()), storeformat.NewGate(storeformat.This(), f, log), driving)
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
