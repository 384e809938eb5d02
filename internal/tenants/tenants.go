// Package tenants owns rein serve's per-tenant settings file (--tenants): its
// format, its checks, and how a tenant's setting is resolved.
//
// The file is TOML: a [defaults] table and a [tenants.NAME] table per
// tenant, each holding the same keys (for now the lifecycle keys
// archive_after and retain). A key a tenant's table leaves out comes from
// [defaults], and one [defaults] leaves out from the server's flags (the
// base). A file is taken whole or not at all: an unknown key, a value of the
// wrong type or out of range, an empty tenant name or a TOML syntax error
// refuses it, naming the file and the line.
//
// Settings are immutable once parsed; a Holder holds the current ones and
// swaps them atomically when the file is reloaded, so a reader never sees a
// half-read file and a bad file leaves the previous settings in force.
//
// To add a key: a field in table (its TOML name in the tag; the list of keys
// the errors give comes from the tags), the field it becomes (in Lifecycle,
// or a new sibling struct of Tenant), its check in table.settings, and its
// resolution beside Resolve.
package tenants

import (
	"slices"
	"time"
)

// Lifecycle is how long a tenant's ended runs stay: ArchiveAfter is how long
// after a run ends it moves to the archive, Retain how long after it ends it
// is deleted. A nil field is not set; a set 0 means at once.
type Lifecycle struct {
	ArchiveAfter, Retain *time.Duration
}

// over is l with each field it leaves unset taken from below.
func (l Lifecycle) over(below Lifecycle) Lifecycle {
	if l.ArchiveAfter == nil {
		l.ArchiveAfter = below.ArchiveAfter
	}
	if l.Retain == nil {
		l.Retain = below.Retain
	}
	return l
}

// Tenant is what one table of the file sets: [defaults] or a
// [tenants.NAME].
type Tenant struct {
	Lifecycle Lifecycle
	Admission Admission
}

// Admission is how many runs a tenant may run at once (MaxRunning; 0 for
// no limit) and its weight in the fair share of the slots (Weight; 1 by
// default). A nil field is not set.
type Admission struct {
	MaxRunning *int
	Weight     *float64
	// RequestsPerMinute and TokensPerMinute limit the tenant's model
	// calls, across models (internal/ratelimit); 0 for no limit.
	RequestsPerMinute, TokensPerMinute *float64
}

// RatesOf is tenant's model-rate limits: requests and tokens a minute,
// from its table, else [defaults]; 0 for no limit.
func (s *Settings) RatesOf(tenant string) (requests, tokens float64) {
	if s == nil {
		return 0, 0
	}
	t, d := s.tenants[tenant].Admission, s.defaults.Admission
	pick := func(a, b *float64) float64 {
		switch {
		case a != nil:
			return *a
		case b != nil:
			return *b
		}
		return 0
	}
	return pick(t.RequestsPerMinute, d.RequestsPerMinute), pick(t.TokensPerMinute, d.TokensPerMinute)
}

// AdmissionOf is tenant's admission settings: each key from its table,
// else from [defaults]; a key neither sets is 0 (no limit) and weight 1. A
// nil Settings (no file) has no limits.
func (s *Settings) AdmissionOf(tenant string) (maxRunning int, weight float64) {
	weight = 1
	if s == nil {
		return 0, weight
	}
	t, d := s.tenants[tenant].Admission, s.defaults.Admission
	switch {
	case t.MaxRunning != nil:
		maxRunning = *t.MaxRunning
	case d.MaxRunning != nil:
		maxRunning = *d.MaxRunning
	}
	switch {
	case t.Weight != nil:
		weight = *t.Weight
	case d.Weight != nil:
		weight = *d.Weight
	}
	return maxRunning, weight
}

// Limited reports whether any tenant's runs are limited by the file
// ([defaults] or a tenant's max_running above 0).
func (s *Settings) Limited() bool {
	if s == nil {
		return false
	}
	if m := s.defaults.Admission.MaxRunning; m != nil && *m > 0 {
		return true
	}
	for _, t := range s.tenants {
		if m := t.Admission.MaxRunning; m != nil && *m > 0 {
			return true
		}
	}
	return false
}

// Settings is one parsed tenants file, and the base its lookups fall back
// to. It is not changed once made, so it may be shared freely.
type Settings struct {
	name     string
	defaults Tenant
	tenants  map[string]Tenant
	// base is what a key neither table sets resolves to: the server's
	// flags. Settings a Holder hands out carry the Holder's base; those
	// from Parse or Load carry none.
	base Lifecycle
}

// Name is the name of the file the settings came from ("" for none).
func (s *Settings) Name() string {
	if s == nil {
		return ""
	}
	return s.name
}

// Tenants are the names of the tenants the file has a table for, sorted.
func (s *Settings) Tenants() []string {
	if s == nil {
		return nil
	}
	names := make([]string, 0, len(s.tenants))
	for n := range s.tenants {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Tenant is what tenant's own table sets, and whether the file has one.
func (s *Settings) Tenant(tenant string) (Tenant, bool) {
	if s == nil {
		return Tenant{}, false
	}
	t, ok := s.tenants[tenant]
	return t, ok
}

// Defaults is what the [defaults] table sets.
func (s *Settings) Defaults() Tenant {
	if s == nil {
		return Tenant{}
	}
	return s.defaults
}

// Resolve is tenant's lifecycle: each key from its table, else from
// [defaults], else from base. A nil Settings (no file) resolves to base.
func (s *Settings) Resolve(tenant string, base Lifecycle) Lifecycle {
	if s == nil {
		return base
	}
	return s.tenants[tenant].Lifecycle.over(s.defaults.Lifecycle.over(base))
}

// Soonest is the least time after a run's end at which the lifecycle of
// any tenant, resolved over base, archives or deletes it: a tenant of its
// own table, or any other ([defaults] over base); false when none does.
func (s *Settings) Soonest(base Lifecycle) (time.Duration, bool) {
	var least time.Duration
	found := false
	take := func(l Lifecycle) {
		for _, d := range []*time.Duration{l.ArchiveAfter, l.Retain} {
			if d != nil && (!found || *d < least) {
				least, found = *d, true
			}
		}
	}
	take(s.Resolve("", base))
	if s != nil {
		for name := range s.tenants {
			take(s.Resolve(name, base))
		}
	}
	return least, found
}

// Lifecycle is tenant's lifecycle resolved over the settings' own base
// (Resolve), as durations and whether each is in force.
func (s *Settings) Lifecycle(tenant string) (archiveAfter, retain time.Duration, archiveOn, retainOn bool) {
	var base Lifecycle
	if s != nil {
		base = s.base
	}
	l := s.Resolve(tenant, base)
	if l.ArchiveAfter != nil {
		archiveAfter, archiveOn = *l.ArchiveAfter, true
	}
	if l.Retain != nil {
		retain, retainOn = *l.Retain, true
	}
	return archiveAfter, retain, archiveOn, retainOn
}

// withBase is a copy of s whose lookups fall back to base.
func (s *Settings) withBase(base Lifecycle) *Settings {
	c := *s
	c.base = base
	return &c
}
