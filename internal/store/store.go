// Package store defines rein's event store: an append-only log of events per
// run, with the run's state kept as a snapshot beside it. Backends live in
// sub-packages (bolt); every backend passes the conformance suite in
// storetest.
//
// A store validates every append by folding it onto the stored snapshot
// (runstate.Apply) in the same transaction that writes it, so what the fold
// rejects never reaches the log and two writers at one version get a
// conflict, never a forked history. A refused request changes no stored byte.
// Append returns the state that fold made, so that its caller (the engine)
// learns the run's next state without folding the events itself.
//
// Blobs (a model call's input, a compacted entry's full text) are stored
// apart from the events, with the run whose append brought them, and found
// by the SHA-256 of their content in lower-case hex (BlobHash), the hash the
// events name them by. An Append writes the blobs it is given WithBlobs in
// the same transaction as its events, and an Import those of the run it
// stores: a refused request stores no blob either. A blob is never
// rewritten or deleted. They are read a run at a time (Blobs): every reader
// comes to a blob through the run whose events reference it, which lets a
// backend keep a run's blobs together in the order they came (bolt does, so
// that a step's blobs do not dirty pages all over the file).
package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

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
	// ErrNoBlob: no blob is stored under that hash.
	ErrNoBlob = errors.New("blob not found")
	// ErrInvalidBlob: a blob given to Append is not keyed by its content's
	// BlobHash, or a hash is not one (64 lower-case hex digits).
	ErrInvalidBlob = errors.New("invalid blob")
	// ErrExists: Import was given a run whose ID is already stored, or
	// whose tenant already has a run with its request ID.
	ErrExists = errors.New("run already stored")
	// ErrDataLoss: a stored value is damaged (its checksum does not match,
	// it does not decode, a page of the file cannot be read). The error
	// names the run and the sequence when they are known; the rest of the
	// store still reads.
	ErrDataLoss = errors.New("stored data is damaged")
	// ErrDiskFull: the store's disk is full; the write was not stored.
	ErrDiskFull = errors.New("the server's disk is full")
	// ErrReadOnly: the store was opened read-only and refuses every write.
	ErrReadOnly = errors.New("the store is open read-only")
	// ErrUnavailable: the store's backing service (an etcd cluster) did not
	// answer in time or has no leader. A write that failed so may or may not
	// have been stored; reload the run to learn which.
	ErrUnavailable = errors.New("the store is unavailable")
	// ErrOwned: another server holds a live lease on the run and drives it,
	// so this one may not take it (a store shared by several servers, the
	// etcd backend's). It is no failure of the run: its owner carries it on,
	// and should the owner die its lease ends and the run is taken over.
	ErrOwned = errors.New("the run is driven by another server")
	// ErrNoSpace: the store's etcd cluster is out of space: a write would
	// take its database past its --quota-backend-bytes, so etcd refused it
	// and raised its NOSPACE alarm, under which it refuses every write
	// until an operator frees space and disarms the alarm. The write was not
	// stored; reads still answer. (ErrDiskFull is the bolt store's kin.)
	ErrNoSpace = errors.New("the store's etcd cluster is out of space (its --quota-backend-bytes)")
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
	// It returns the state it folded and stored: the run's state after the
	// events, its contract included, as Load returns it then. The caller
	// needs no fold of its own to learn it, and must not change what it
	// points to (runstate.State's pointers are never mutated once set).
	//
	// On an error nothing is stored and the state is the zero State. What
	// the fold rejects is an error wrapping the fold's
	// (runstate.ErrIllegalTransition, ErrSequence, ErrTerminal,
	// ErrInvalidEvent); a stale expected version is ErrConflict. The events
	// are durable when Append returns a nil error. Blobs given WithBlobs are
	// written with the events, or not at all. An append of no events stores
	// nothing and returns the run's state, as Load.
	Append(ctx context.Context, runID string, expected uint64, events []*reinv1.Event, opts ...AppendOption) (runstate.State, error)
	// Import stores a whole run recorded elsewhere (an export file): its
	// events, run_started first with sequences 1, 2, 3, …, and blobs keyed
	// by BlobHash, in one transaction, or nothing. The events are validated
	// by folding them from the zero state (runstate.ApplyAll), and the blobs
	// like Append's. A run ID already stored, or a request ID the run's
	// tenant already used, is ErrExists. A creation is recorded as one
	// status change, from unspecified to the status the events end in.
	Import(ctx context.Context, events []*reinv1.Event, blobs map[string][]byte) (runstate.State, error)
	// Acquire makes owner the run's owner and returns its lease epoch, one
	// more than the last. Appends made WithEpoch an older epoch are refused
	// (ErrFenced) in the same transaction that would write them. A store
	// shared by several servers refuses with ErrOwned a run another
	// server's live lease holds, running or paused (that server keeps its
	// deadlines).
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
	// Blobs returns a copy of each blob of hashes (BlobHashes) that an
	// append to runID, or its import, stored, keyed by hash. A hash not
	// stored is ErrNoBlob naming it, a string that is not a BlobHash
	// ErrInvalidBlob, and an unknown run ErrNotFound. A backend that stores
	// blobs once for every run may also find one another run stored: a
	// caller that must keep runs apart checks that runID's events reference
	// each hash (GetBlobs does).
	Blobs(ctx context.Context, runID string, hashes []string) (map[string][]byte, error)
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
	// Acquire, when not empty, is an owner that takes the run's lease in
	// the append's transaction, as Acquire would (the epoch one more than
	// the last, fencing every earlier owner), only if the append is stored;
	// the new epoch is written to *Acquired. Epoch is not checked then.
	Acquire  string
	Acquired *uint64
	// Blobs maps BlobHash(content) to content: they are stored in the same
	// transaction as the events, with the run (a backend may skip one it
	// holds already). A key that is not its content's hash refuses the whole
	// append with ErrInvalidBlob. The store does not keep the map or its
	// slices after Append returns; the caller must not change them during
	// the call.
	Blobs map[string][]byte
}

// WithEpoch fences an append with the owner's lease epoch.
func WithEpoch(epoch uint64) AppendOption {
	return func(o *AppendOptions) { o.Epoch = epoch }
}

// WithAcquire takes the run's lease for owner with the append, in its
// transaction, and sets *epoch to the new epoch when the append is stored:
// an owner's first append needs no commit of its own to acquire the run.
func WithAcquire(owner string, epoch *uint64) AppendOption {
	return func(o *AppendOptions) { o.Acquire, o.Acquired = owner, epoch }
}

// WithBlobs stores blobs, keyed by BlobHash, with the append's events. More
// than one WithBlobs add up.
func WithBlobs(blobs map[string][]byte) AppendOption {
	return func(o *AppendOptions) {
		if o.Blobs == nil {
			o.Blobs = blobs // read, never written: a second WithBlobs merges into a new map
			return
		}
		merged := make(map[string][]byte, len(o.Blobs)+len(blobs))
		maps.Copy(merged, o.Blobs)
		maps.Copy(merged, blobs)
		o.Blobs = merged
	}
}

// BlobHash is the key a blob is stored under: the SHA-256 of its content in
// lower-case hex.
func BlobHash(content []byte) string {
	sum := sha256.Sum256(content)
	return hex.EncodeToString(sum[:])
}

// CheckHash returns an error wrapping ErrInvalidBlob unless hash has the
// form of a BlobHash.
func CheckHash(hash string) error {
	if len(hash) != 2*sha256.Size || strings.IndexFunc(hash, func(r rune) bool {
		return (r < '0' || r > '9') && (r < 'a' || r > 'f')
	}) >= 0 {
		return fmt.Errorf("blob hash %q: %w: want the SHA-256 of the content in lower-case hex (64 digits)", hash, ErrInvalidBlob)
	}
	return nil
}

// CheckHashes is CheckHash of each of hashes, the first failure's error.
func CheckHashes(hashes []string) error {
	for _, h := range hashes {
		if err := CheckHash(h); err != nil {
			return err
		}
	}
	return nil
}

// CheckBlobs returns an error wrapping ErrInvalidBlob unless every key of
// blobs is the BlobHash of its content. Backends call it before they store
// anything.
func CheckBlobs(blobs map[string][]byte) error {
	if len(blobs) == 0 {
		return nil
	}
	for _, key := range slices.Sorted(maps.Keys(blobs)) {
		if err := CheckHash(key); err != nil {
			return err
		}
		if got := BlobHash(blobs[key]); got != key {
			return fmt.Errorf("blob %s (%d bytes): %w: its content's SHA-256 is %s; store a blob under the hash of its content",
				key, len(blobs[key]), ErrInvalidBlob, got)
		}
	}
	return nil
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
	// TraceID keeps the run whose trace it is; empty keeps all.
	TraceID string
	// Parent keeps the children the run delegated to; empty keeps all.
	Parent string
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
	if f.TraceID != "" && st.TraceID != f.TraceID {
		return false
	}
	if f.Parent != "" && st.DelegatedBy.GetParentRunId() != f.Parent {
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
	// Damaged are the runs passed over because what is stored of them
	// cannot be read: each an error wrapping ErrDataLoss that names the
	// run. The other runs are listed whole, so one damaged run never hides
	// its tenant's others, nor stops a server resuming them.
	Damaged []error
}
