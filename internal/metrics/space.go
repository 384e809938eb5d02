package metrics

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/reinhq/rein/internal/store"
)

// spaceAskWithin bounds the question a scrape asks the store.
const spaceAskWithin = 2 * time.Second

// TrackStoreSpace reports, at each scrape, whether the store is out of
// space (rein_store_no_space, 1 or 0): alarm asks it, and answers an error
// wrapping store.ErrNoSpace while it is (the etcd store's NOSPACE alarm,
// etcdstore.Store.SpaceAlarm), nil when it is not. When the store does not
// answer within 2s, the gauge keeps its last value.
func (m *Metrics) TrackStoreSpace(alarm func(context.Context) error) {
	if m == nil {
		return
	}
	var full atomic.Bool
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "rein_store_no_space",
		Help: "1 while the store is out of space (etcd's NOSPACE alarm: it refuses every write), else 0."},
		func() float64 {
			ctx, cancel := context.WithTimeout(context.Background(), spaceAskWithin)
			defer cancel()
			switch err := alarm(ctx); {
			case err == nil:
				full.Store(false)
			case errors.Is(err, store.ErrNoSpace):
				full.Store(true)
			}
			if full.Load() {
				return 1
			}
			return 0
		}))
}
