package storeformat

import (
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
)

// Gate tells the features of a build which formats it may write now: up
// to the store's active format. A feature that needs a newer format asks
// Allows before it writes, and stays off until the format is active (a
// cluster finalized it).
type Gate struct {
	build  Build
	active atomic.Int64
	log    *slog.Logger

	mu sync.Mutex
	// off are the features Allows refused, by name, with the format each
	// needs; logged once each.
	off map[string]Format
}

// NewGate is a gate for build on a store whose active format is active.
func NewGate(build Build, active Format, log *slog.Logger) *Gate {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	g := &Gate{build: build, log: log, off: map[string]Format{}}
	g.active.Store(int64(active))
	return g
}

// Build is the build the gate is for.
func (g *Gate) Build() Build { return g.build }

// Active is the store's active format.
func (g *Gate) Active() Format { return Format(g.active.Load()) }

// SetActive moves the active format (a finalization); features it allows
// now are on from their next write.
func (g *Gate) SetActive(f Format) {
	if prev := Format(g.active.Swap(int64(f))); prev != f {
		g.log.Info("the store's active format changed", "from", int(prev), "to", int(f))
		g.mu.Lock()
		for name, need := range g.off {
			if need <= f && g.build.Writes.Contains(need) {
				delete(g.off, name)
			}
		}
		g.mu.Unlock()
	}
}

// Allows reports whether feature, which writes format need, may write
// now: need is active and this build writes it. A feature it refuses is
// logged the first time, and listed by Off until it is allowed.
func (g *Gate) Allows(feature string, need Format) bool {
	if need <= g.Active() && g.build.Writes.Contains(need) {
		return true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, seen := g.off[feature]; !seen {
		g.off[feature] = need
		g.log.Warn("a feature stays off: it writes a store format the cluster has not made active; it turns on once every replica runs a build that writes it and the format is finalized (rein cluster status)",
			"feature", feature, "needs_format", int(need), "active_format", int(g.Active()), "build_writes", g.build.Writes.String())
	}
	return false
}

// Off lists the features Allows refused and does not allow yet, by name.
func (g *Gate) Off() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	names := make([]string, 0, len(g.off))
	for n := range g.off {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
