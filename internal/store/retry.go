package store

import (
	"context"
	"errors"
	"fmt"
)

// ConflictRetries is how many times RetryOnConflict tries again after
// ErrConflict, the one bound of every write that reloads a run and tries
// again when another writer got there first. Each conflict means another
// append to the run was stored, so the run's writers as a whole make
// progress; the bound is there only to end a loop that can never win. It
// is above what a run's other writers can append in a row: a run takes at
// most 1,000 people's messages (step.MaxSteers), and a driver takes its
// step again after each message that came in, so messages alone never make
// a driver give its run up; a proposal takes at most 16 approvals.
const ConflictRetries = 1024

// RetryOnConflict calls try, and calls it again each time it returns an
// error wrapping ErrConflict, up to ConflictRetries times: try reloads
// the run and decides again on what it finds, since the run moved. Any
// other error, or nil, is returned at once, and so is the conflict once
// ctx is done. A conflict on the last try is returned wrapped in an error
// that says what was done to which run (what is a verb phrase: "cancel",
// "commit a step of") and what to do; it still wraps ErrConflict.
func RetryOnConflict(ctx context.Context, runID, what string, try func() error) error {
	for retries := 0; ; retries++ {
		err := try()
		if !errors.Is(err, ErrConflict) || ctx.Err() != nil {
			return err
		}
		if retries == ConflictRetries {
			return fmt.Errorf("%s run %s: other writers changed the run first %d times in a row, and nothing of this was stored; "+
				"try again once the run is quieter: %w", what, runID, ConflictRetries+1, err)
		}
	}
}
