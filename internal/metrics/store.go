package metrics

import (
	"context"
	"time"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
)

// Store times the appends of s (rein_store_append_duration_seconds,
// rein_store_append_events, rein_store_append_errors_total); everything
// else goes to s unchanged. With a nil m it is s itself.
func (m *Metrics) Store(s store.Store) store.Store {
	if m == nil {
		return s
	}
	return &timedStore{Store: s, m: m}
}

type timedStore struct {
	store.Store
	m *Metrics
}

// Unwrap is the store t times, for a caller that needs more of it than
// store.Store (such as /readyz, which asks the etcd store for its alarms).
func (t *timedStore) Unwrap() store.Store { return t.Store }

func (t *timedStore) Append(ctx context.Context, runID string, expected uint64, events []*reinv1.Event, opts ...store.AppendOption) (runstate.State, error) {
	start := time.Now()
	st, err := t.Store.Append(ctx, runID, expected, events, opts...)
	if err != nil {
		t.m.appendErrors.Inc()
		return st, err
	}
	t.m.appendDuration.Observe(time.Since(start).Seconds())
	t.m.appendEvents.Observe(float64(len(events)))
	return st, nil
}
