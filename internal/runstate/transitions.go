package runstate

import reinv1 "github.com/reinhq/rein/gen/rein/v1"

// transitions is the table of legal status changes (docs/design.md §2). A status that
// is not a key has no exits.
var transitions = map[reinv1.RunStatus][]reinv1.RunStatus{
	reinv1.RunStatus_RUN_STATUS_RUNNING: {
		reinv1.RunStatus_RUN_STATUS_COMPLETED,
		reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT,
		reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL,
		reinv1.RunStatus_RUN_STATUS_BUDGET_EXHAUSTED,
		reinv1.RunStatus_RUN_STATUS_FAILED,
		reinv1.RunStatus_RUN_STATUS_DENIED,
		reinv1.RunStatus_RUN_STATUS_CANCELLED,
		reinv1.RunStatus_RUN_STATUS_NEEDS_BUDGET,
	},
	reinv1.RunStatus_RUN_STATUS_QUEUED: {
		reinv1.RunStatus_RUN_STATUS_RUNNING,
		reinv1.RunStatus_RUN_STATUS_BUDGET_EXHAUSTED,
		reinv1.RunStatus_RUN_STATUS_CANCELLED,
	},
	reinv1.RunStatus_RUN_STATUS_NEEDS_BUDGET: {
		reinv1.RunStatus_RUN_STATUS_RUNNING,
		reinv1.RunStatus_RUN_STATUS_EXPIRED,
		reinv1.RunStatus_RUN_STATUS_CANCELLED,
	},
	reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT: {
		reinv1.RunStatus_RUN_STATUS_RUNNING,
		reinv1.RunStatus_RUN_STATUS_BUDGET_EXHAUSTED,
		reinv1.RunStatus_RUN_STATUS_CANCELLED,
	},
	reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL: {
		reinv1.RunStatus_RUN_STATUS_RUNNING,
		reinv1.RunStatus_RUN_STATUS_DENIED,
		// The pending proposal's tool changed, and the server's
		// --on-tool-change is fail.
		reinv1.RunStatus_RUN_STATUS_FAILED,
		reinv1.RunStatus_RUN_STATUS_EXPIRED,
		reinv1.RunStatus_RUN_STATUS_BUDGET_EXHAUSTED,
		reinv1.RunStatus_RUN_STATUS_CANCELLED,
	},
}

// Legal reports whether a run may go from one status to another.
func Legal(from, to reinv1.RunStatus) bool {
	for _, s := range transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// Terminal reports whether a status has no exits.
func Terminal(s reinv1.RunStatus) bool {
	switch s {
	case reinv1.RunStatus_RUN_STATUS_COMPLETED,
		reinv1.RunStatus_RUN_STATUS_BUDGET_EXHAUSTED,
		reinv1.RunStatus_RUN_STATUS_FAILED,
		reinv1.RunStatus_RUN_STATUS_DENIED,
		reinv1.RunStatus_RUN_STATUS_EXPIRED,
		reinv1.RunStatus_RUN_STATUS_CANCELLED:
		return true
	}
	return false
}

// Paused reports whether a status waits for a person.
func Paused(s reinv1.RunStatus) bool {
	return s == reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT || s == reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL ||
		s == reinv1.RunStatus_RUN_STATUS_NEEDS_BUDGET
}

// ReasonWriteAllowed is the reason of the status change to needs_approval
// of a write a policy approved in the same commit: the run waits for no
// one, and its write is committed at once.
const ReasonWriteAllowed = "write_allowed"

// Waits reports whether the status change sc leaves the run waiting for a
// person: a pause, but not one a policy approved at once.
func Waits(sc *reinv1.StatusChanged) bool {
	return Paused(sc.GetTo()) && sc.GetReason() != ReasonWriteAllowed
}

// StatusName is a status's lower-case name, as the CLI and logs print it:
// "needs_approval" for RUN_STATUS_NEEDS_APPROVAL.
func StatusName(s reinv1.RunStatus) string {
	name, ok := statusNames[s]
	if !ok {
		return "unspecified"
	}
	return name
}

// ParseStatus is the inverse of StatusName.
func ParseStatus(name string) (reinv1.RunStatus, bool) {
	for s, n := range statusNames {
		if n == name {
			return s, true
		}
	}
	return reinv1.RunStatus_RUN_STATUS_UNSPECIFIED, false
}

var statusNames = map[reinv1.RunStatus]string{
	reinv1.RunStatus_RUN_STATUS_RUNNING:          "running",
	reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT:      "needs_input",
	reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL:   "needs_approval",
	reinv1.RunStatus_RUN_STATUS_COMPLETED:        "completed",
	reinv1.RunStatus_RUN_STATUS_BUDGET_EXHAUSTED: "budget_exhausted",
	reinv1.RunStatus_RUN_STATUS_FAILED:           "failed",
	reinv1.RunStatus_RUN_STATUS_DENIED:           "denied",
	reinv1.RunStatus_RUN_STATUS_EXPIRED:          "expired",
	reinv1.RunStatus_RUN_STATUS_CANCELLED:        "cancelled",
	reinv1.RunStatus_RUN_STATUS_NEEDS_BUDGET:     "needs_budget",
	reinv1.RunStatus_RUN_STATUS_QUEUED:           "queued",
}
