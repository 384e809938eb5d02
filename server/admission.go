package server

import (
	"context"
	"errors"
	"time"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/engine"
	"github.com/reinhq/rein/internal/store"
)

// AdmissionConfig is how a node limits the runs running at once
// (internal/admission).
type AdmissionConfig struct {
	// Tenant is a tenant's limit on running runs (0: none) and its weight,
	// read at each pass (rein serve --tenants max_running and weight).
	Tenant func(tenant string) (maxRunning int, weight float64)
	// Limited reports whether any tenant has a limit.
	Limited func() bool
	// MaxRunning limits the running runs of all tenants; 0 for none
	// (rein serve --max-running).
	MaxRunning int
	// Lock, when set, is a lock all replicas share, held across each pass.
	Lock func(ctx context.Context) (unlock func(), err error)
	// Every is how often a pass runs unasked; 0 means a second.
	Every time.Duration
}

// admissionGone reports whether the engine refused to start a queued run
// because it is no longer queued.
func admissionGone(err error) bool {
	return errors.Is(err, engine.ErrNotWaiting) || errors.Is(err, store.ErrConflict)
}

// frees reports whether evs may free a slot or add to a queue: a run
// queued, a queued run that left the queue, or a running run that paused
// or ended.
func frees(evs []*reinv1.Event) bool {
	for _, ev := range evs {
		if ev.GetRunStarted().GetQueued() {
			return true
		}
		if sc := ev.GetStatusChanged(); sc != nil && (sc.GetFrom() == reinv1.RunStatus_RUN_STATUS_RUNNING || sc.GetFrom() == reinv1.RunStatus_RUN_STATUS_QUEUED) {
			return true
		}
	}
	return false
}
