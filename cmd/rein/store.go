package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/store/bolt"
)

// openStore opens the store rein keeps its runs in, for rein serve and the
// embedded server alike: the bbolt file at db (the embedded default),
// creating its directory. It is the one place the CLI chooses a backend.
func openStore(db string) (store.Store, error) {
	if err := os.MkdirAll(filepath.Dir(db), 0o700); err != nil {
		return nil, &exitErr{code: exitError, err: fmt.Errorf("create the directory for --db %s: %w", db, err)}
	}
	st, err := bolt.Open(db, bolt.Options{})
	if err != nil {
		return nil, &exitErr{code: exitUnavailable, err: err}
	}
	return st, nil
}
