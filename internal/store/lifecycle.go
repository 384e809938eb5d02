package store

import (
	"context"
	"errors"
	"time"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
)

// Errors of a run's lifecycle, wrapped with the detail.
var (
	// ErrArchived: the run left the live store for the archive; the store
	// holds its stub only (Load returns it, with Archive set). Its log and
	// blobs are read from the archive.
	ErrArchived = errors.New("run is archived")
	// ErrLive: the run has not ended, so it may be neither archived nor
	// deleted.
	ErrLive = errors.New("run has not ended")
	// ErrInvalidCursor: a page token that no call returned.
	ErrInvalidCursor = errors.New("invalid page token")
)

// Lifecycle is what a backend gives the archiver and erasure: the runs that
// ended, in the order they ended; a run replaced by its stub once its export
// is safe in the archive; a run deleted wholly, with a record of it.
type Lifecycle interface {
	// Ended returns up to limit of the runs that ended, in the order of
	// their end (oldest first), after the cursor (the Cursor of the last
	// one of a previous call; "" starts at the oldest). A deleted run is
	// not among them.
	Ended(ctx context.Context, after string, limit int) ([]Ended, error)
	// Archive replaces a run that ended with its stub, in one transaction:
	// its log, blobs, snapshot and contract give way to a snapshot that
	// keeps what ListRuns shows (Stub) and the archive record. The run must
	// be at version (else ErrConflict) and ended (else ErrLive); a run
	// archived already is ErrArchived and changes nothing. It returns the
	// stub's state.
	Archive(ctx context.Context, runID string, version uint64, rec *reinv1.RunArchive) (runstate.State, error)
	// Delete erases a run that ended (else ErrLive), or its stub, wholly:
	// nothing of it is left but d, which is stored in the same
	// transaction (its run_id, tenant, status and archived filled in from
	// the run). A run deleted before returns its record and false, and
	// changes nothing; a run never stored is ErrNotFound.
	Delete(ctx context.Context, d *reinv1.RunDeletion) (rec *reinv1.RunDeletion, deleted bool, err error)
	// Deletion returns a deleted run's record, or ErrNotFound.
	Deletion(ctx context.Context, runID string) (*reinv1.RunDeletion, error)
	// Deletions returns up to limit records, newest first, after the
	// cursor (the next of a previous call; "" starts at the newest), and
	// the cursor of the next page ("" on the last). A tenant not empty
	// keeps its own.
	Deletions(ctx context.Context, tenant, after string, limit int) (recs []*reinv1.RunDeletion, next string, err error)
}

// Ended is a run that ended, as Lifecycle.Ended lists it.
type Ended struct {
	// Cursor is where the next call starts after this one.
	Cursor string
	RunID  string
	Tenant string
	// Parent is the run that delegated it; "" for a root.
	Parent  string
	EndedAt time.Time
	// Archived is true once the run was replaced by its stub.
	Archived bool
}

// Stub is what is kept of an archived run in the live store: its identity,
// status, usage, times, labels, parent and count of children, and where
// its export is, with
// no content (no goal, answer, error text, proposal or input).
func Stub(st runstate.State, rec *reinv1.RunArchive) runstate.State {
	stub := runstate.State{
		RunID:        st.RunID,
		Status:       st.Status,
		Version:      st.Version,
		Principal:    st.Principal,
		Tenant:       st.Tenant,
		RequestID:    st.RequestID,
		TraceID:      st.TraceID,
		TraceParent:  st.TraceParent,
		Steps:        st.Steps,
		InputTokens:  st.InputTokens,
		OutputTokens: st.OutputTokens,
		ToolCalls:    st.ToolCalls,
		CostUSD:      st.CostUSD,
		DelegatedBy:  st.DelegatedBy,
		// How many runs it delegated to: where its tree goes on.
		ChildrenStarted: st.ChildrenStarted,
		CreatedAt:       st.CreatedAt,
		UpdatedAt:       st.UpdatedAt,
		Archive:         rec,
	}
	if labels := st.Contract.GetLabels(); len(labels) > 0 {
		stub.Contract = &reinv1.TaskContract{Labels: labels}
	}
	return stub
}
