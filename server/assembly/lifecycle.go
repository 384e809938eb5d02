package assembly

import (
	"context"
	"time"

	"github.com/reinhq/rein/internal/archive"
	"github.com/reinhq/rein/internal/lifecycle"
	"github.com/reinhq/rein/internal/tenants"
)

// openLifecycle opens the archive and sets the node's lifecycle policy
// from cfg.Lifecycle (and the tenants' settings, read at each sweep).
func (r *Running) openLifecycle(ctx context.Context, cfg *Config) error {
	l, log := cfg.Lifecycle, cfg.logger()
	if l.Archive != "" {
		a, err := archive.Open(ctx, l.Archive)
		if err != nil {
			return refused(err)
		}
		r.atStop(func() { _ = a.Close() })
		if l.Sweep {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := a.Check(cctx)
			cancel()
			if err != nil {
				// Not fatal: runs stay in the live store until it answers.
				log.Warn("the archive does not answer; runs stay in the live store and are retried", "archive", a.Name(), "err", err)
			}
		}
		cfg.Node.Archive = a
	}
	if !l.Sweep {
		return nil
	}
	live := cfg.Tenants
	policyOf := tenantPolicy(live)
	base := lifecycle.Policy{ArchiveAfter: l.ArchiveAfter, ArchiveOn: l.ArchiveOn, Retain: l.Retain, RetainOn: l.RetainOn}
	cfg.Node.Policy = func(tenant string) lifecycle.Policy {
		if policyOf == nil {
			return base
		}
		return policyOf(tenant, base)
	}
	cfg.Node.PolicySoonest = func() (time.Duration, bool) {
		var settings *tenants.Settings // no file: the flags alone
		if live != nil {
			settings = live.Current()
		}
		return settings.Soonest(lifecycleOf(base))
	}
	cfg.Node.SweepEvery = l.Every
	log.Info("run lifecycle", "archive", archiveName(cfg.Node.Archive), "archive_after", durationText(l.ArchiveOn, l.ArchiveAfter), "retain", durationText(l.RetainOn, l.Retain))
	return nil
}

func archiveName(a *archive.Archive) string {
	if a == nil {
		return "none"
	}
	return a.Name()
}

func durationText(on bool, d time.Duration) string {
	if !on {
		return "off"
	}
	return d.String()
}

// lifecycleOf is a policy as the tenants file's keys: a duration not in
// force is unset.
func lifecycleOf(p lifecycle.Policy) tenants.Lifecycle {
	var l tenants.Lifecycle
	if p.ArchiveOn {
		l.ArchiveAfter = &p.ArchiveAfter
	}
	if p.RetainOn {
		l.Retain = &p.Retain
	}
	return l
}

// tenantPolicy resolves a tenant's lifecycle from the live tenant settings
// over the flags' (base), read at each sweep so that a reload applies at
// the next.
func tenantPolicy(h *tenants.Holder) func(tenant string, base lifecycle.Policy) lifecycle.Policy {
	if h == nil {
		return nil
	}
	return func(tenant string, b lifecycle.Policy) lifecycle.Policy {
		l := h.Current().Resolve(tenant, lifecycleOf(b))
		var p lifecycle.Policy
		if l.ArchiveAfter != nil {
			p.ArchiveAfter, p.ArchiveOn = *l.ArchiveAfter, true
		}
		if l.Retain != nil {
			p.Retain, p.RetainOn = *l.Retain, true
		}
		return p
	}
}
