// Package runstate owns the fold: a run's state is Apply applied to each of its
// events in sequence order. The live loop, crash recovery, inspection and
// replay all rebuild state with the same code.
//
// Invariants enforced by Apply:
//   - the first event is run_started, and only the first;
//   - every event's sequence is the state's version + 1;
//   - a status changes only along the table of legal transitions;
//   - a terminal run takes no more events.
//
// The package is pure: no I/O, no clock, no goroutines. State is a small value
// type; Apply returns a new value and never mutates the event or the protos
// the state points to, so a state can be copied freely and shared.
package runstate
