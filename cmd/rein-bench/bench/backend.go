package bench

import (
	"fmt"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
)

// Backend is the storage engine the scenarios measure rein on. The bench
// names none: the caller (rein-bench --store) gives it, so every scenario
// runs the same way against any backend.
type Backend struct {
	// Name is the engine's name, as --store spells it.
	Name string
	// Open opens the store at path, creating it. noSync skips fsync: only
	// the untimed building of a scenario's fixtures asks for it.
	Open func(path string, noSync bool) (Store, error)
	// OpenOutbox opens the store at path, creating it, with the webhook
	// outbox set (store.Outbox), for the webhooks scenario; nil when the
	// backend keeps no webhooks (that scenario then refuses to run).
	OpenOutbox func(path string, outbox store.Outbox) (Store, error)
	// Size is the bytes the store at path takes on disk (bolt's file and
	// its log); nil means the file's size.
	Size func(path string) (int64, error)
	// MaxAppendEvents is the most events one Append may carry (an etcd
	// request has a size limit); 0 means no limit. The untimed building of
	// a scenario's fixtures appends in batches no larger.
	MaxAppendEvents int
	// Ceiling is the engine's raw speed for the scenarios' storage work,
	// the baselines of append, steps and fold; nil when it offers none
	// (those scenarios then refuse to run).
	Ceiling Ceiling
	// Target is the ratio to Ceiling that append, steps, steps-runs and
	// fold must reach on this engine; 0 means each scenario's own.
	Target float64
}

// Store is what the scenarios need of a backend's store.
type Store interface {
	store.Store
	// Commits is how many write transactions the store made since it was
	// opened: with group commit, fewer than the appends.
	Commits() uint64
	// ScanEvents calls fn with each stored event of a run after a
	// sequence, in order, decoding into one reused Event; fn must not keep
	// it.
	ScanEvents(runID string, after uint64, fn func(ev *reinv1.Event) error) error
}

// Ceiling is a backend's raw speed for the work the store's appends and
// scans come down to, in the store's own layout and with none of rein's
// logic (no validation, no snapshot, no index): the disk's ceiling that the
// append, steps and fold scenarios compare rein against. A backend offers it
// beside itself (internal/store/bolt's Ceiling); its signatures use only
// standard types so that it need not import the bench.
type Ceiling interface {
	// CreateLog creates a fresh store at path holding an empty event log
	// for each of runIDs, and opens it. put durably writes, in one commit,
	// data[i] as the event with sequence seqs[i] of run runIDs[runs[i]];
	// puts made at once from several goroutines share commits (group
	// commit), and a put alone commits in its caller's goroutine. closeLog
	// closes the store.
	CreateLog(path string, runIDs []string) (put func(runs []int, seqs []uint64, data [][]byte) error, closeLog func() error, err error)
	// Scan opens the store at path read-only (one the backend's Store
	// wrote) and calls fn with the stored bytes of each event of runID, in
	// sequence order; fn must not keep data.
	Scan(path, runID string, fn func(seq uint64, data []byte) error) error
}

// StateCeiling is a Ceiling that can also put, in one commit with a
// run's events, the other values the backend's store puts with them: the
// run's snapshot after the commit and the blobs the append brought, raw,
// in the store's layout, with no read, compare, fold or index. The steps
// scenarios measure against it when a backend offers it: commits of the
// same bytes as the store's (the snapshot sealed as every store seals it,
// seal.Seal of the state's Proto(false)). They still time the events put
// alone (CreateLog), and print that ratio beside it.
type StateCeiling interface {
	Ceiling
	// CreateStateLog is CreateLog whose put durably writes, in one commit,
	// data[i] as the event with sequence first+i of run runIDs[run],
	// snapshot as that run's snapshot, and each of blobs under its hash.
	CreateStateLog(path string, runIDs []string) (put func(run int, first uint64, data [][]byte, snapshot []byte, blobs map[string][]byte) error, closeLog func() error, err error)
}

// backend is o's backend, or an error naming what is missing.
func (o Options) backend(scenario string) (Backend, error) {
	if o.Backend.Open == nil {
		return Backend{}, fmt.Errorf("bench %s: no storage backend given (Options.Backend)", scenario)
	}
	return o.Backend, nil
}

// target is the ratio a scenario measured against the backend's ceiling
// must reach: the backend's Target when it sets one, else own, the
// scenario's.
func (o Options) target(own float64) float64 {
	if o.Backend.Target > 0 {
		return o.Backend.Target
	}
	return own
}

// ceiling is o's backend with its ceiling, or an error.
func (o Options) ceiling(scenario string) (Backend, error) {
	b, err := o.backend(scenario)
	if err != nil {
		return b, err
	}
	if b.Ceiling == nil {
		return b, fmt.Errorf("bench %s: the %s backend offers no ceiling to compare against", scenario, b.Name)
	}
	return b, nil
}
