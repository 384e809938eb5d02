package main

import (
	"errors"
	"time"

	"github.com/spf13/pflag"

	"github.com/reinhq/rein/internal/etcdflags"
	etcdstore "github.com/reinhq/rein/internal/store/etcd"
)

// etcdFlags are rein serve's etcd flags: the cluster's (etcdflags.Flags)
// and what the server does for it (registerUpkeep).
type etcdFlags struct {
	etcdflags.Flags
	// compactEvery is rein serve's --etcd-compact-every (registerUpkeep).
	compactEvery time.Duration
}

func (f *etcdFlags) register(fs *pflag.FlagSet) { f.Flags.Register(fs) }

// registerUpkeep registers the flags of what a server does for the cluster
// its runs are in.
func (f *etcdFlags) registerUpkeep(fs *pflag.FlagSet) {
	fs.DurationVar(&f.compactEvery, "etcd-compact-every", etcdstore.DefaultCompactEvery, "with --etcd, compact etcd's history this often, keeping this much of it, so that old revisions do not fill etcd's --quota-backend-bytes; it compacts the whole cluster, as etcd's --auto-compaction-retention would, and every server may do it (0: never, when etcd compacts its history itself)")
}

// set reports whether --etcd was given.
func (f *etcdFlags) set() bool { return f.Set() }

// check refuses etcd flags without --etcd, and TLS flags that do not fit.
func (f *etcdFlags) check(fs *pflag.FlagSet) error {
	if err := f.Check(fs, "etcd-compact-every"); err != nil {
		return etcdFlagsError(err)
	}
	if f.compactEvery < 0 {
		return usageError("--etcd-compact-every must be 0 (never) or more")
	}
	return nil
}

// etcdFlagsError is err with its exit code: a usage error for a flag that
// is wrong, else unavailable.
func etcdFlagsError(err error) error {
	var ue *etcdflags.UsageError
	if errors.As(err, &ue) {
		return &exitErr{code: exitUsage, err: err}
	}
	return &exitErr{code: exitUnavailable, err: err}
}
