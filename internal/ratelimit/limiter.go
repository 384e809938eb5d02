package ratelimit

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Cells keep the buckets' states by name. Update reads a state, gives it
// to f and stores what f returns, atomically against every other Update of
// the name (on etcd, by compare-and-swap, tried again on a conflict).
type Cells interface {
	Update(ctx context.Context, name string, f func(old []byte) ([]byte, error)) error
}

// Key is what a model call draws on: its provider and model, and its run's
// tenant.
type Key struct {
	Provider, Model, Tenant string
}

// Limits are the limits in force: by "provider/model" (or "provider/*"),
// and a tenant's, read at each call so a reload takes effect.
type Limits struct {
	Models map[string]ModelLimit
	Tenant func(tenant string) ModelLimit
}

// ModelLimit is requests and tokens a minute; 0 for no limit.
type ModelLimit struct {
	RequestsPerMinute, TokensPerMinute float64
}

// Limiter takes from the buckets of a call's key.
type Limiter struct {
	cells  Cells
	limits Limits
	clock  func() time.Time
}

// New returns a Limiter over cells with limits, on clock.
func New(cells Cells, limits Limits, clock func() time.Time) *Limiter {
	if clock == nil {
		clock = time.Now
	}
	return &Limiter{cells: cells, limits: limits, clock: clock}
}

// bucket is one of a key's buckets: its name (in Cells, and as the model
// waits say which was empty), its limit, and what a call takes of it.
type bucket struct {
	name  string
	limit Limit
	n     float64
}

// buckets are key's buckets that have a limit, a call of tokens taking
// one request and tokens.
func (l *Limiter) buckets(k Key, tokens float64) []bucket {
	var out []bucket
	add := func(scope string, m ModelLimit) {
		if m.RequestsPerMinute > 0 {
			out = append(out, bucket{name: scope + "/requests", limit: Limit{m.RequestsPerMinute}, n: 1})
		}
		if m.TokensPerMinute > 0 && tokens > 0 {
			out = append(out, bucket{name: scope + "/tokens", limit: Limit{m.TokensPerMinute}, n: tokens})
		}
	}
	if m, ok := l.models(k); ok {
		add("model/"+url.PathEscape(k.Provider)+"/"+url.PathEscape(k.Model), m)
	}
	if l.limits.Tenant != nil {
		add("tenant/"+url.PathEscape(k.Tenant), l.limits.Tenant(k.Tenant))
	}
	return out
}

// models is the model limit of k's provider and model, else its
// provider's "provider/*".
func (l *Limiter) models(k Key) (ModelLimit, bool) {
	if m, ok := l.limits.Models[k.Provider+"/"+k.Model]; ok {
		return m, true
	}
	m, ok := l.limits.Models[k.Provider+"/*"]
	return m, ok
}

// Take reserves one request and tokens of every bucket of k that has a
// limit, and returns how long the call waits before it is sent (0: at
// once) and the bucket it waits longest for ("" when none). A call that
// then does not go out gives them back with Settle.
func (l *Limiter) Take(ctx context.Context, k Key, tokens uint64) (time.Duration, string, error) {
	wait, err := l.held(ctx, k)
	if err != nil {
		return 0, "", fmt.Errorf("rate hold of %s/%s: %w", k.Provider, k.Model, err)
	}
	var which string
	if wait > 0 {
		which = holdName(k)
	}
	for _, b := range l.buckets(k, float64(tokens)) {
		var w time.Duration
		err := l.cells.Update(ctx, b.name, func(old []byte) ([]byte, error) {
			now := l.clock()
			s, err := decode(old, b.limit, now)
			if err != nil {
				return nil, err
			}
			s, w = s.take(b.limit, b.n, now)
			return encode(s)
		})
		if err != nil {
			return 0, "", fmt.Errorf("rate bucket %s: %w", b.name, err)
		}
		if w > wait {
			wait, which = w, b.name
		}
	}
	return wait, which, nil
}

// Settle corrects the tokens a call of k took by delta (the tokens it
// used less those it reserved; negative gives some back), and gives back
// its request too with undo (a call that was not sent).
func (l *Limiter) Settle(ctx context.Context, k Key, delta int64, undo bool) error {
	for _, b := range l.buckets(k, 1) {
		n := 0.0
		switch {
		case strings.HasSuffix(b.name, "/tokens"):
			n = float64(delta)
		case undo:
			n = -1
		}
		if n == 0 {
			continue
		}
		err := l.cells.Update(ctx, b.name, func(old []byte) ([]byte, error) {
			now := l.clock()
			s, err := decode(old, b.limit, now)
			if err != nil {
				return nil, err
			}
			s = s.refill(b.limit, now)
			s.Level = min(s.Level-n, b.limit.PerMinute)
			return encode(s)
		})
		if err != nil {
			return fmt.Errorf("rate bucket %s: %w", b.name, err)
		}
	}
	return nil
}

// holdName is the cell of k's model's hold, which every call of the
// model reads, whether or not the model has a limit of its own.
func holdName(k Key) string {
	return "model/" + url.PathEscape(k.Provider) + "/" + url.PathEscape(k.Model) + "/hold"
}

// held is how long a call of k waits for its model's hold.
func (l *Limiter) held(ctx context.Context, k Key) (time.Duration, error) {
	var wait time.Duration
	err := l.cells.Update(ctx, holdName(k), func(old []byte) ([]byte, error) {
		now := l.clock()
		s, err := decode(old, unlimited, now)
		if err != nil {
			return nil, err
		}
		wait = s.Until.Sub(now)
		return old, nil
	})
	return max(wait, 0), err
}

// unlimited is the hold cell's limit: it only holds.
var unlimited = Limit{PerMinute: math.MaxFloat32}

// Hold makes every call of k's provider and model wait until until: the
// provider refused a call and said when to come back (a 429's
// retry-after).
func (l *Limiter) Hold(ctx context.Context, k Key, until time.Time) error {
	return l.cells.Update(ctx, holdName(k), func(old []byte) ([]byte, error) {
		s, err := decode(old, unlimited, l.clock())
		if err != nil {
			return nil, err
		}
		if until.After(s.Until) {
			s.Until = until
		}
		return encode(s)
	})
}

// Memory is Cells in this process's memory, for one server.
type Memory struct {
	mu    sync.Mutex
	cells map[string][]byte
}

// Update implements Cells.
func (m *Memory) Update(_ context.Context, name string, f func([]byte) ([]byte, error)) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cells == nil {
		m.cells = map[string][]byte{}
	}
	next, err := f(m.cells[name])
	if err != nil {
		return err
	}
	m.cells[name] = next
	return nil
}

// ParseModelLimit parses a --model-limit value,
// PROVIDER/MODEL=requests:N,tokens:N (MODEL may be *), into its key and
// limit.
func ParseModelLimit(s string) (string, ModelLimit, error) {
	key, spec, ok := strings.Cut(s, "=")
	provider, model, ok2 := strings.Cut(key, "/")
	if !ok || !ok2 || provider == "" || model == "" || spec == "" {
		return "", ModelLimit{}, fmt.Errorf("%q: give PROVIDER/MODEL=requests:N,tokens:N (a minute; MODEL may be *), such as openai/gpt-4o=requests:500,tokens:300000", s)
	}
	var m ModelLimit
	for _, part := range strings.Split(spec, ",") {
		name, v, ok := strings.Cut(part, ":")
		n, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil || !(n > 0) || n > 1e12 {
			return "", m, fmt.Errorf("%q: %q is not NAME:N with N above 0 (requests:500, tokens:300000)", s, part)
		}
		switch name {
		case "requests":
			m.RequestsPerMinute = n
		case "tokens":
			m.TokensPerMinute = n
		default:
			return "", m, fmt.Errorf("%q: %q is neither requests nor tokens", s, name)
		}
	}
	return key, m, nil
}

// CellsFunc is a function as Cells (a store's compare-and-swap update,
// such as internal/store/etcd's UpdateRateBucket).
type CellsFunc func(ctx context.Context, name string, f func(old []byte) ([]byte, error)) error

// Update implements Cells.
func (c CellsFunc) Update(ctx context.Context, name string, f func([]byte) ([]byte, error)) error {
	return c(ctx, name, f)
}
