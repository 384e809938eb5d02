// Package ratelimit keeps the model-rate limits every run shares (docs/
// design.md §17): requests and tokens per minute, per provider and model
// (rein serve --model-limit) and per tenant (--tenants), as token buckets.
// A model call takes from its buckets before it is sent and waits when
// one is empty; its tokens are settled with the usage the provider
// reports; a provider's 429 with a retry-after holds the model's buckets,
// so every run slows down, not only the one that was refused.
//
// A bucket's state is a Cell: in memory for one server, or a key in etcd
// (internal/store/etcd) updated by compare-and-swap, so that replicas draw
// on one bucket: no more is taken than the limit allows, within the clock
// skew between the replicas.
package ratelimit

import (
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// Limit is one bucket's size: so many units a minute, refilled evenly,
// with at most a minute's worth in hand.
type Limit struct {
	PerMinute float64
}

// rate is the units a second the bucket refills.
func (l Limit) rate() float64 { return l.PerMinute / 60 }

// state is a bucket as stored: the units in hand at At (negative when
// calls reserved more than there was: they wait their turn), and when a
// provider's hold ends.
type state struct {
	Level float64   `json:"level"`
	At    time.Time `json:"at"`
	Until time.Time `json:"until,omitzero"`
}

// decode is a stored state; a new bucket is full.
func decode(b []byte, l Limit, now time.Time) (state, error) {
	if len(b) == 0 {
		return state{Level: l.PerMinute, At: now}, nil
	}
	var s state
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("a rate bucket's state does not decode: %w", err)
	}
	return s, nil
}

// refill is s at now: topped up by the time since s.At, never above a
// minute's worth. A clock behind s.At (another replica's) refills nothing.
func (s state) refill(l Limit, now time.Time) state {
	if d := now.Sub(s.At); d > 0 {
		s.Level = math.Min(l.PerMinute, s.Level+d.Seconds()*l.rate())
		s.At = now
	}
	return s
}

// take reserves n units at now and returns the state after, and how long
// the caller waits for them: until the level is back to 0, and past any
// hold.
func (s state) take(l Limit, n float64, now time.Time) (state, time.Duration) {
	s = s.refill(l, now)
	s.Level -= n
	var wait time.Duration
	if s.Level < 0 {
		wait = time.Duration(-s.Level / l.rate() * float64(time.Second))
	}
	if d := s.Until.Sub(now); d > wait {
		wait = d
	}
	return s, wait
}

func encode(s state) ([]byte, error) { return json.Marshal(s) }
