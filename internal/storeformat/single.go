package storeformat

import (
	"context"
	"fmt"
	"os"
	"time"
)

// Single is the store of one server (bbolt): its format is the one its
// file records, final once written, so no finalization is ever pending.
type Single struct {
	build   string
	card    string
	gate    *Gate
	driving func() int
	started time.Time
}

// NewSingle is the store of one server of build (its version line),
// whose gate holds the file's format; driving, when set, counts the runs
// it drives.
func NewSingle(build string, gate *Gate, driving func() int) *Single {
	host, _ := os.Hostname()
	now := time.Now().UTC()
	return &Single{
		build: build, gate: gate, driving: driving, started: now,
		card: fmt.Sprintf("host %s, pid %d, joined %s", host, os.Getpid(), now.Format(time.RFC3339)),
	}
}

// Gate is the store's format as the build's features see it.
func (s *Single) Gate() *Gate { return s.gate }

// Status is the store's format and its one server.
func (s *Single) Status(context.Context) (Status, error) {
	runs := int64(-1)
	if s.driving != nil {
		runs = int64(s.driving())
	}
	a := s.gate.Active()
	return Status{
		Backend: "bbolt", Active: a, Finalized: true, Target: a, Off: s.gate.Off(),
		Replicas: []ReplicaStatus{{Build: s.build, Card: s.card, Formats: s.gate.Build(), RunsDriven: runs, Leased: s.started, Self: true}},
	}, nil
}

// Finalize does nothing: a file's format is final once written.
func (s *Single) Finalize(context.Context) (from, to Format, err error) {
	a := s.gate.Active()
	return a, a, nil
}
