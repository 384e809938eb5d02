// Package failpoint crashes the process at named points, for crash tests
// that need a crash at an exact moment (between a write's dispatch and its
// commit, say) rather than at a random one.
//
// The points exist only in a binary built with the build tag failpoints
// (go build -tags failpoints ./cmd/rein, as tests/crash does). There they
// are armed with the environment variable REIN_FAILPOINTS, a comma-separated
// list of NAME or NAME@N (crash on the Nth time the point is reached;
// default the first), and a crash is os.Exit(CrashCode): no deferred
// function runs and nothing is flushed, as with SIGKILL. Unarmed, a point
// costs one atomic load. Without the tag, Inject is an empty function the
// compiler inlines away: a shipped binary neither reads REIN_FAILPOINTS nor
// can be made to crash by it.
package failpoint

// CrashCode is the exit code of a crash at a failpoint.
const CrashCode = 77

// The points rein defines.
const (
	// StoreBeforeCommit: a batch of appends is about to be committed.
	StoreBeforeCommit = "store-before-commit"
	// StoreAfterCommit: a batch is durable and not yet acknowledged.
	StoreAfterCommit = "store-after-commit"
	// WriteAfterDispatch: write_dispatched is durable; the write was not sent.
	WriteAfterDispatch = "write-after-dispatch"
	// WriteAfterCommit: the tool committed the write; its receipt is not
	// recorded.
	WriteAfterCommit = "write-after-commit"
	// DelegateAfterStart: delegation_started is durable; no child exists.
	DelegateAfterStart = "delegate-after-start"
	// DelegateAfterChild: one more child of a delegation was created.
	DelegateAfterChild = "delegate-after-child"
	// DelegateBeforeReturn: children ended; their reports are not recorded.
	DelegateBeforeReturn = "delegate-before-return"
)
