// Package store defines rein's event store: an append-only log of events per
// run, with the run's state kept as a snapshot beside it. Backends live in
// sub-packages (bolt); every backend passes the conformance suite in
// storetest.
//
// A store validates every append by folding it onto the stored snapshot
// (runstate.Apply) in the same transaction that writes it, so what the fold
// rejects never reaches the log and two writers at one version get a
// conflict, never a forked history. A refused request changes no stored byte.
package store

import (
	"context"
	"errors"
	"slices"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
)

// Errors a store returns, wrapped with the detail. Match with errors.Is.
var (
	// ErrNotFound: no run with that ID.
	ErrNotFound = errors.New("run not found")
	// ErrConflict: the expected version is not the run's version: another
	// writer got there first. Reload and try again.
	ErrConflict = errors.New("version conflict")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("store closed")
	// ErrFenced: the append came from an owner whose lease on the run was
	// taken over (a stale epoch). Its writer must stop driving the run.
	ErrFenced = errors.New("stale owner fenced")
)

// Store is an event store. It is safe for concurrent use.
type Store interface {
	// Create stores a new run whose first event is started (a run_started
	// event with run_id and sequence 1 set). If the run's tenant already has a
	// run with the same request ID, Create returns that run's state and
	// created=false, and stores nothing.
	Create(ctx context.Context, started *reinv1.Event) (st runstate.State, created bool, err error)
	// Append adds events to a run whose version is expected. The events carry
	// run_id and sequences expected+1, expected+2, …; they are applied to the
	// stored state with runstate.Apply and written only if all of them apply.
	// A stale expected version is ErrConflict. The events are durable when
	// Append returns nil.
	Append(ctx context.Context, runID string, expected uint64, events []*reinv1.Event, opts ...AppendOption) error
	// Acquire makes owner the run's owner and returns its lease epoch, one
	// more than the last. Appends made WithEpoch an older epoch are refused
	// (ErrFenced) in the same transaction that would write them.
	Acquire(ctx context.Context, runID, owner string) (epoch uint64, err error)
	// Load returns a run's current state from its snapshot.
	Load(ctx context.Context, runID string) (runstate.State, error)
	// Events returns up to limit events with sequence > after, in order.
	Events(ctx context.Context, runID string, after uint64, limit int) ([]*reinv1.Event, error)
	// List returns a page of runs, newest first.
	List(ctx context.Context, f Filter) (Page, error)
	// Changes returns up to limit status changes with a cursor greater than
	// after, in commit order, and the cursor of the last change stored. A
	// run's creation is a change from unspecified to running.
	Changes(ctx context.Context, after uint64, limit int) ([]Change, uint64, error)
	// Close releases the store. Appends in flight finish first.
	Close() error
}

// AppendOption qualifies an Append.
type AppendOption func(*AppendOptions)

// AppendOptions are the options an Append was given.
type AppendOptions struct {
	// Epoch, when not 0, is the appending owner's lease epoch: the append is
	// refused with ErrFenced unless it is the run's current epoch.
	Epoch uint64
}

// WithEpoch fences an append with the owner's lease epoch.
func WithEpoch(epoch uint64) AppendOption {
	return func(o *AppendOptions) { o.Epoch = epoch }
}

// Options folds opts into AppendOptions (for backends).
func Options(opts []AppendOption) AppendOptions {
	var o AppendOptions
	for _, f := range opts {
		f(&o)
	}
	return o
}

// Change is one status change, as Changes returns it.
type Change struct {
	Cursor uint64
	Tenant string
	// Change is the API form; its Cursor equals the field above.
	Change *reinv1.RunChange
}

// Filter selects runs for List.
type Filter struct {
	// Statuses keeps runs in any of them; empty keeps all.
	Statuses []reinv1.RunStatus
	// Labels keeps runs whose contract carries every one of these labels.
	Labels map[string]string
	// Tenant keeps the tenant's runs; empty keeps all.
	Tenant string
	// Limit is the page size; it must be positive.
	Limit int
	// After is the Next of a previous page; empty starts at the newest run.
	After string
}

// Matches reports whether a run's state passes the filter's statuses,
// tenant and labels (Limit and After are paging, not filtering).
func (f Filter) Matches(st runstate.State) bool {
	if len(f.Statuses) > 0 && !slices.Contains(f.Statuses, st.Status) {
		return false
	}
	if f.Tenant != "" && st.Tenant != f.Tenant {
		return false
	}
	labels := st.Contract.GetLabels()
	for k, v := range f.Labels {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Page is one page of List.
type Page struct {
	Runs []runstate.State
	// Next is the ID to pass as Filter.After for the next page; empty on the
	// last page.
	Next string
}
