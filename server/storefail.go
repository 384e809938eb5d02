package server

import (
	"github.com/reinhq/rein/internal/store"
)

// failingStore is a store that can stop taking writes for good after a
// failure that leaves what is on disk unknown (the bolt store, after a
// failed sync or commit: docs/storage.md): Failed is closed then, and
// Failure says why.
type failingStore interface {
	Failed() <-chan struct{}
	Failure() error
}

// failingOf is s, or a store s wraps, as a failingStore; nil when none is
// one.
func failingOf(s store.Store) failingStore {
	for s != nil {
		switch w := s.(type) {
		case failingStore:
			return w
		case interface{ Unwrap() store.Store }:
			s = w.Unwrap()
		default:
			return nil
		}
	}
	return nil
}

// StoreFailed is closed when the node's store stops taking writes after a
// failure (a failed sync or commit of the bolt store): the node is then not
// ready, every write is refused with Unavailable, and rein serve drains and
// exits non-zero. Nil, which never closes, for a store that cannot fail so.
func (n *Node) StoreFailed() <-chan struct{} {
	if f := failingOf(n.Store); f != nil {
		return f.Failed()
	}
	return nil
}

// StoreErr, called once Shutdown has returned, is why the node's store
// failed: its failure (StoreFailed), or the error its Close returned at
// Shutdown (a last checkpoint that failed); nil when neither.
func (n *Node) StoreErr() error {
	if f := failingOf(n.Store); f != nil {
		if err := f.Failure(); err != nil {
			return err
		}
	}
	return n.closed
}
