// Package storeformat numbers what a rein build writes to its store: one
// integer, the store format, bumped whenever an event kind, a payload field
// the fold depends on, a key layout or an etcd value format changes
// (History lists what each bump added). A build reads a range of formats
// (every older one it can fold) and writes a range (the newest it knows,
// and the one before it while a cluster has not finalized it); Build says
// which.
//
// On etcd the replicas sharing a prefix advertise their builds in their
// name keys (Advert), and the cluster's active format is the one every
// live replica writes, persisted once finalized (docs/upgrading.md,
// "Finalization"). A replica writes only what the active format allows: a
// feature that needs a newer format asks the Gate and stays off until
// then. A build that cannot read or write the active format refuses to
// start (Build.Serves, ErrIncompatible). A bbolt file records the format it
// was last written with, and the same check refuses a newer file.
package storeformat

import (
	"errors"
	"fmt"
)

// Format is a store format.
type Format int

// The formats this build knows.
const (
	// Oldest is the oldest format this build reads: every store a rein
	// ever wrote.
	Oldest Format = 1
	// Base is the format of the builds from before formats were
	// advertised: a replica whose name key holds no Advert, or a bbolt file
	// that records none, counts as Base.
	Base Format = 6
	// Current is the newest format this build writes.
	Current Format = 7
	// maxSane bounds an advertised format: a replica that claims more is
	// not believed (a torn or forged name key).
	maxSane Format = 1 << 16
)

// Bump is one row of History: a format and what it added to the one
// before it.
type Bump struct {
	Format Format
	// Since is the date and the commits that brought it.
	Since string
	// Added is what a build must know to read it.
	Added string
}

// history is written from the code's history (git log of
// proto/rein/v1/event.proto, internal/runstate, internal/store/bolt's
// meta/format and internal/store/etcd's meta/layout); formats 1 to 6 were
// numbered after the fact, by the day their changes landed.
var history = [...]Bump{
	{1, "2026-11-29, 73b6ab1", "the first log: event kinds run_started to status_changed (fields 10-26), sealed events, snapshots and contracts; bbolt meta/format rein-store-1"},
	{2, "2026-11-30, 0fe8134 2fa1aab b8514ab 1b3386c", "model_retried, context_compacted, write_refused; the fold tracks the approved write and its key; model inputs as content-addressed blobs stored with their append; Run.cost_usd folded from model_returned"},
	{3, "2026-12-01, 6b4194f fac8dcd 5c0c08a 804a4b4 72c7653", "delegation_started, delegation_returned, run_taken; bbolt rein-store-2 then rein-store-3 (blobs in a run's log, short keys); the etcd store, layout rein-etcd-1; the fold derives the step loop's state (e560a7d)"},
	{4, "2026-12-03, 428f2e1 f40fc29", "run_steered, budget_raised, proposal_revised; the lifecycle's keys (archived runs, deletions)"},
	{5, "2026-12-05, 3a930a6 5e7b970 4a63709", "policy_decided, approval_given, run_admitted (the queued status), model_throttled"},
	{6, "2026-12-07, 14db6e6 6752e5f", "model_requested's prefix and breakpoints, Usage's cache tokens; etcd layout rein-etcd-2 (each run keeps its blobs under P rblob/)"},
	{7, "2026-12-07, d26df5f 66dfe76 80972e5", "run_started's tool_digests and a proposal's tool_digest (the fold holds the definitions a run was granted), tool_changed and tool_adopted, the pause reason tool_changed; bbolt: webhook subscriptions and their outbox, the log's records hold what each commit wrote (header rein-wa2), meta/format rein-store-4; etcd: layout rein-etcd-3, put with the finalization (or at a new prefix's creation)"},
}

// History is what each format added, oldest first.
func History() []Bump { return history[:] }

// ErrIncompatible is the error of a build that cannot serve a store: it
// cannot read or write the store's active format.
var ErrIncompatible = errors.New("incompatible store format")

// ErrNotFinalizable is the error of a finalization that cannot happen now:
// a live replica's name key is not believed.
var ErrNotFinalizable = errors.New("the store format cannot be finalized now")

// Range is the formats from Min to Max, both included.
type Range struct {
	Min Format `json:"min"`
	Max Format `json:"max"`
}

// Contains reports whether f is in the range.
func (r Range) Contains(f Format) bool { return r.Min <= f && f <= r.Max }

func (r Range) String() string {
	if r.Min == r.Max {
		return fmt.Sprint(int(r.Min))
	}
	return fmt.Sprintf("%d..%d", r.Min, r.Max)
}

// check refuses a range no build could have.
func (r Range) check() error {
	switch {
	case r.Min < Oldest:
		return fmt.Errorf("the range %d..%d begins before format %d, the first", r.Min, r.Max, Oldest)
	case r.Min > r.Max:
		return fmt.Errorf("the range %d..%d ends before it begins", r.Min, r.Max)
	case r.Max > maxSane:
		return fmt.Errorf("the range %d..%d reaches past format %d, which no build will know", r.Min, r.Max, maxSane)
	}
	return nil
}

// Build is the formats a binary reads and writes.
type Build struct {
	Reads  Range `json:"reads"`
	Writes Range `json:"writes"`
}

// This is this binary's build: it reads every format since Oldest, and
// writes Current and the one before it, so that it joins a cluster whose
// replicas have not all been upgraded yet (and writes only what that
// format allows until a finalization: Gate).
func This() Build {
	return Build{Reads: Range{Oldest, Current}, Writes: Range{Current - 1, Current}}
}

// Check refuses a build no binary could be: a range that is not one, or
// one that writes what it cannot read.
func (b Build) Check() error {
	if err := b.Reads.check(); err != nil {
		return fmt.Errorf("reads: %w", err)
	}
	if err := b.Writes.check(); err != nil {
		return fmt.Errorf("writes: %w", err)
	}
	if !b.Reads.Contains(b.Writes.Min) || !b.Reads.Contains(b.Writes.Max) {
		return fmt.Errorf("it writes formats %s but reads only %s", b.Writes, b.Reads)
	}
	return nil
}

func (b Build) String() string { return fmt.Sprintf("reads %s, writes %s", b.Reads, b.Writes) }

// Serves returns nil when the build can serve a store whose active format
// is active, and otherwise an error wrapping ErrIncompatible that names
// both and says what to do; where says what the store is ("the etcd
// prefix /rein/, whose format was finalized", "the file x.db").
func (b Build) Serves(active Format, where string) error {
	switch {
	case b.Writes.Contains(active) && b.Reads.Contains(active):
		return nil
	case active > b.Writes.Max:
		return fmt.Errorf("%w: %s is in store format %d, and this rein (%s) knows formats up to %d only: run a rein that writes format %d (the build the store was upgraded to, or a newer one); a format once written or finalized is not rolled back (docs/upgrading.md)",
			ErrIncompatible, where, active, b, b.Writes.Max, active)
	default:
		return fmt.Errorf("%w: %s is in store format %d, and this rein (%s) no longer writes it: upgrade through a build that writes both %d and %d first, and finalize (rein cluster finalize) (docs/upgrading.md)",
			ErrIncompatible, where, active, b, active, b.Writes.Min)
	}
}
