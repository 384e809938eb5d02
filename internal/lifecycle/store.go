// Package lifecycle gives every run a lifetime: a run that ended leaves the
// live store for the archive (its export, one object per run, and a stub
// left behind), is deleted wholly once its retention ends or on request, and
// is read alike wherever it is.
//
// Store wraps a backend so that an archived run reads as a live one:
// Load, Events and Blobs of a stub read the run's export from the archive
// (checked against the stub's SHA-256, through a bounded cache). Keeper is
// the loop that archives and deletes, and Erase deletes on request.
package lifecycle

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/archive"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
)

// Backend is a store with a lifecycle: every rein backend.
type Backend interface {
	store.Store
	store.Lifecycle
}

// Store is a backend whose archived runs read as live ones. Writes go to
// the backend unchanged.
type Store struct {
	Backend
	arch *archive.Archive
}

// NewStore wraps b. arch may be nil (no --archive): an archived run's state
// is its stub, and its log cannot be read until the archive is given again.
func NewStore(b Backend, arch *archive.Archive) *Store {
	return &Store{Backend: b, arch: arch}
}

// Unwrap is the backend, for what looks for the store beneath (readiness).
func (s *Store) Unwrap() store.Store { return s.Backend }

// Load implements store.Store: an archived run's whole state, folded from
// its export, with its archive record.
func (s *Store) Load(ctx context.Context, runID string) (runstate.State, error) {
	st, err := s.Backend.Load(ctx, runID)
	if err != nil || st.Archive == nil {
		return st, err
	}
	x, err := s.export(ctx, st)
	if err != nil {
		return runstate.State{}, err
	}
	full, err := runstate.ApplyAll(runstate.State{}, x.GetEvents())
	if err != nil {
		return runstate.State{}, fmt.Errorf("run %s: its archived log does not fold: %w", runID, err)
	}
	full.Archive = st.Archive
	return full, nil
}

// Events implements store.Store.
func (s *Store) Events(ctx context.Context, runID string, after uint64, limit int) ([]*reinv1.Event, error) {
	evs, err := s.Backend.Events(ctx, runID, after, limit)
	if !errors.Is(err, store.ErrArchived) {
		return evs, err
	}
	x, err := s.archived(ctx, runID)
	if err != nil {
		return nil, err
	}
	all := x.GetEvents()
	if after >= uint64(len(all)) {
		return nil, nil
	}
	all = all[after:]
	if limit < len(all) {
		all = all[:limit]
	}
	out := make([]*reinv1.Event, len(all))
	for i, ev := range all {
		out[i] = proto.Clone(ev).(*reinv1.Event) // the cache's are shared
	}
	return out, nil
}

// Blobs implements store.Store.
func (s *Store) Blobs(ctx context.Context, runID string, hashes []string) (map[string][]byte, error) {
	got, err := s.Backend.Blobs(ctx, runID, hashes)
	if !errors.Is(err, store.ErrArchived) {
		return got, err
	}
	x, err := s.archived(ctx, runID)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(hashes))
	for _, h := range hashes {
		b, ok := x.GetBlobs()[h]
		if !ok {
			return nil, fmt.Errorf("run %s: blob %s: %w", runID, h, store.ErrNoBlob)
		}
		out[h] = append([]byte(nil), b...)
	}
	return out, nil
}

// archived reads an archived run's export, from its stub's record.
func (s *Store) archived(ctx context.Context, runID string) (*reinv1.RunExport, error) {
	st, err := s.Backend.Load(ctx, runID)
	if err != nil {
		return nil, err
	}
	if st.Archive == nil { // deleted or restored meanwhile: read it again
		return nil, fmt.Errorf("run %s changed while it was read: %w", runID, store.ErrConflict)
	}
	return s.export(ctx, st)
}

// export reads the export a stub names. It is shared with the cache: read
// it, never change it.
func (s *Store) export(ctx context.Context, stub runstate.State) (*reinv1.RunExport, error) {
	if s.arch == nil {
		return nil, fmt.Errorf("run %s is archived under %s, and no archive is open to read it from (rein serve --archive URL; the commands without --server use the directory DB.archive beside --db): %w",
			stub.RunID, stub.Archive.GetKey(), store.ErrUnavailable)
	}
	x, err := s.arch.Get(ctx, stub.Archive)
	switch {
	case errors.Is(err, archive.ErrUnreachable):
		return nil, fmt.Errorf("run %s: %w: %w", stub.RunID, err, store.ErrUnavailable)
	case errors.Is(err, archive.ErrMissing), errors.Is(err, archive.ErrMismatch):
		return nil, fmt.Errorf("run %s: %w: %w", stub.RunID, err, store.ErrDataLoss)
	case err != nil:
		return nil, fmt.Errorf("run %s: %w: %w", stub.RunID, err, store.ErrDataLoss)
	}
	if x.GetRunId() != stub.RunID {
		return nil, fmt.Errorf("run %s: the archive's object %s holds run %s: %w", stub.RunID, stub.Archive.GetKey(), x.GetRunId(), store.ErrDataLoss)
	}
	return x, nil
}
