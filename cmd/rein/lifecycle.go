package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"

	"github.com/reinhq/rein/internal/archive"
	"github.com/reinhq/rein/server/assembly"
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

// config is the server's lifecycle from the flags: the archive (by
// default the directory beside db when asked for or when it holds runs
// archived before; db is "" on etcd) and when runs are archived and
// deleted, swept every --lifecycle-every.
func (l *lifecycleFlags) config(db string) (assembly.Lifecycle, error) {
	if l.archiveAfter < 0 || l.retain < 0 || l.sweepEvery <= 0 {
		return assembly.Lifecycle{}, usageError("--archive-after and --retain must not be negative, --lifecycle-every must be positive")
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
		return assembly.Lifecycle{}, usageError("--archive-after needs --archive with --etcd: name a blob store every server reaches (s3://BUCKET?endpoint=…&region=…)")
	}
	return assembly.Lifecycle{Archive: target, Sweep: true, ArchiveAfter: l.archiveAfter, ArchiveOn: archiveOn,
		Retain: l.retain, RetainOn: retainOn, Every: l.sweepEvery}, nil
}

// embeddedArchive opens the archive beside a bbolt file when it exists, so
// that rein upgrade reads the runs archived there; nil when there is none.
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
