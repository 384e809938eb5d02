package storeformat

import "time"

// Status is a store's formats as `rein cluster status` shows them.
type Status struct {
	// Backend is "etcd" or "bbolt".
	Backend string
	// Active is the format the store is written in now.
	Active Format
	// Finalized says Active was persisted by a finalization (etcd); a
	// prefix never finalized is Base.
	Finalized bool
	// Target is what a finalization would make active: what every live
	// replica writes. Pending when it is over Active.
	Target  Format
	Pending bool
	// PendingSince is when this server first saw the pending target, and
	// FinalizeAfter how long it waits then (0: only rein cluster finalize).
	PendingSince  time.Time
	FinalizeAfter time.Duration
	// Blocked says why a finalization cannot happen now ("" when it can).
	Blocked string
	// Replicas are the live servers, this one among them.
	Replicas []ReplicaStatus
	// Off are the features this server keeps off (Gate.Off).
	Off []string
}

// ReplicaStatus is one live server in a Status.
type ReplicaStatus struct {
	Name   string
	Build  string
	Card   string
	Legacy bool
	// Formats are what its build reads and writes.
	Formats Build
	// Err says why its advertisement is not believed ("" when it is).
	Err string
	// RunsDriven is how many runs it holds; -1 when unknown.
	RunsDriven int64
	// Leased is when it claimed its name under its lease (zero: unknown).
	Leased time.Time
	// Self marks the server that answered.
	Self bool
}
