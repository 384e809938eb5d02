package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"

	"github.com/reinhq/rein/internal/archive"
	"github.com/reinhq/rein/internal/lifecycle"
	"github.com/reinhq/rein/internal/tenants"
	"github.com/reinhq/rein/server"
)

// lifecycleFlags are rein serve's flags for the runs' lifetime: where
// finished runs are archived, and when they are archived and deleted.
type lifecycleFlags struct {
	archive      string
	archiveAfter time.Duration
	retain       time.Duration
	sweepEvery   time.Duration
	flags        *pflag.FlagSet
}

func (l *lifecycleFlags) register(f *pflag.FlagSet) {
	l.flags = f
	f.StringVar(&l.archive, "archive", "", "archive runs that ended to this blob store: file:///DIR or s3://BUCKET?endpoint=…&region=… (credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY); default with --archive-after: the directory DB.archive beside --db")
	f.DurationVar(&l.archiveAfter, "archive-after", 0, "archive a run this long after it ended, moving it from the live store to --archive (0s: as soon as it ends; off unless given; a tenant's archive_after in --tenants overrides it)")
	f.DurationVar(&l.retain, "retain", 0, "delete a run wholly (live store, archive, stub) this long after it ended, leaving a deletion record (off unless given; a tenant's retain in --tenants overrides it)")
	f.DurationVar(&l.sweepEvery, "lifecycle-every", time.Second, "how often the server looks for runs to archive or delete")
}

// defaultArchiveDir is the archive beside a bbolt file.
func defaultArchiveDir(db string) string { return db + ".archive" }

// fileURL is the file:// URL of a directory.
func fileURL(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(abs)}).String()
}

// configure sets the node's archive and policy from the flags (and the
// tenants' settings, read at each sweep). db is the bbolt file, "" on etcd.
func (l *lifecycleFlags) configure(ctx context.Context, cfg *server.Config, db string, live *tenants.Holder, log *slog.Logger) (closeArchive func(), err error) {
	policyOf := tenantPolicy(live)
	if l.archiveAfter < 0 || l.retain < 0 || l.sweepEvery <= 0 {
		return nil, usageError("--archive-after and --retain must not be negative, --lifecycle-every must be positive")
	}
	archiveOn, retainOn := l.flags.Changed("archive-after"), l.flags.Changed("retain")
	target := l.archive
	if target == "" && db != "" {
		// The default place: used when asked for, and read whenever it
		// holds runs archived before.
		if _, err := os.Stat(defaultArchiveDir(db)); archiveOn || err == nil {
			target = fileURL(defaultArchiveDir(db))
		}
	}
	if target == "" && archiveOn {
		return nil, usageError("--archive-after needs --archive with --etcd: name a blob store every server reaches (s3://BUCKET?endpoint=…&region=…)")
	}
	closeArchive = func() {}
	if target != "" {
		a, err := archive.Open(ctx, target)
		if err != nil {
			return nil, usageError("%v", err)
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := a.Check(cctx); err != nil {
			// Not fatal: runs stay in the live store until it answers.
			log.Warn("the archive does not answer; runs stay in the live store and are retried", "archive", a.Name(), "err", err)
		}
		cfg.Archive = a
		closeArchive = func() { _ = a.Close() }
	}
	base := lifecycle.Policy{ArchiveAfter: l.archiveAfter, ArchiveOn: archiveOn, Retain: l.retain, RetainOn: retainOn}
	cfg.Policy = func(tenant string) lifecycle.Policy {
		if policyOf == nil {
			return base
		}
		return policyOf(tenant, base)
	}
	cfg.PolicySoonest = func() (time.Duration, bool) {
		var settings *tenants.Settings // no file: the flags alone
		if live != nil {
			settings = live.Current()
		}
		return settings.Soonest(lifecycleOf(base))
	}
	cfg.SweepEvery = l.sweepEvery
	log.Info("run lifecycle", "archive", archiveName(cfg.Archive), "archive_after", durationText(archiveOn, l.archiveAfter), "retain", durationText(retainOn, l.retain))
	return closeArchive, nil
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

// embeddedArchive opens the archive beside a bbolt file when it exists, so
// that the CLI's commands read the runs archived there; nil when there is
// none.
func embeddedArchive(ctx context.Context, db string) *archive.Archive {
	dir := defaultArchiveDir(db)
	if info, err := os.Stat(dir); err != nil || !info.IsDir() {
		return nil
	}
	a, err := archive.Open(ctx, fileURL(dir))
	if err != nil {
		fmt.Fprintln(os.Stderr, "rein: the archive beside --db:", err)
		return nil
	}
	return a
}

// tenantPolicy resolves a tenant's lifecycle from the live --tenants
// settings over the flags' (base), read at each sweep so that a reload
// applies at the next.
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
