package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/reinhq/rein/internal/tenants"
)

// tenantsFlags is rein serve's --tenants: the per-tenant settings file,
// read at start and again on SIGHUP.
type tenantsFlags struct {
	path string
	// live is the settings in force, once load has run.
	live *tenants.Holder
}

func (t *tenantsFlags) register(f *pflag.FlagSet) {
	f.StringVar(&t.path, "tenants", "", "per-tenant settings file (TOML, mode 0600): a [defaults] table and a [tenants.NAME] table per tenant, each key set there overriding the server's flag; SIGHUP reloads it, a file that does not parse keeping the previous settings")
}

// load reads --tenants, whose keys fall back to base (the server's flags),
// and returns the settings in force; a file that is refused is a usage
// error. With a file it reloads it on each SIGHUP, logging what it holds,
// or why it was refused and that the previous settings stay, until ctx
// ends or stop is called (stop waits for the reload in progress).
func (t *tenantsFlags) load(ctx context.Context, base tenants.Lifecycle, log *slog.Logger) (live *tenants.Holder, stop func(), err error) {
	live, err = tenants.NewHolder(t.path, base)
	if err != nil {
		return nil, nil, usageError("--tenants: %v", err)
	}
	t.live = live
	if t.path == "" {
		return live, func() {}, nil
	}
	log.Info("tenant settings loaded", "file", t.path, "tenants", live.Current().Tenants())
	stop = onHangup(ctx, func() {
		s, err := live.Reload()
		if err != nil {
			log.Error("tenant settings not reloaded; keeping the previous settings", "file", t.path, "error", err)
			return
		}
		log.Info("tenant settings reloaded", "file", t.path, "tenants", s.Tenants())
	})
	return live, stop, nil
}

// onHangup calls reload on each SIGHUP the process gets, one at a time,
// until ctx ends or stop is called (stop waits for the reload in
// progress).
func onHangup(ctx context.Context, reload func()) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				reload()
			}
		}
	})
	return func() { cancel(); wg.Wait() }
}
