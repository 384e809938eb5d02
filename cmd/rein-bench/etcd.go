//go:build reinbench

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reinhq/rein/cmd/rein-bench/bench"
	"github.com/reinhq/rein/internal/etcdflags"
	"github.com/reinhq/rein/internal/etcdproc"
	etcdstore "github.com/reinhq/rein/internal/store/etcd"
)

// benchEtcdScenarios are the scenarios `rein-bench --store etcd` runs: the
// ones whose baseline is the backend's ceiling. The others start `rein
// serve --db` or read recorded files, which are bolt's.
var benchEtcdScenarios = []string{"append", "steps", "steps-runs", "fold"}

// benchEtcdAppendEvents is the most events a fixture's Append carries on
// etcd: about 300 KiB of events, well within etcd's request limit and its
// --max-txn-ops once nested.
const benchEtcdAppendEvents = 1000

// benchEtcdFlags are the etcd flags of rein-bench: the cluster's (the
// etcdFlags family, with its own default prefix) and --etcd-bin.
type benchEtcdFlags struct {
	etcdflags.Flags
	bin string
}

// benchEtcdPrefix is where rein-bench writes on a cluster: not /rein/, so
// that it never writes inside a running rein's prefix.
const benchEtcdPrefix = "/rein-bench/"

func (f *benchEtcdFlags) register(fs *pflag.FlagSet) {
	f.Flags.Register(fs)
	f.Prefix = benchEtcdPrefix
	pf := fs.Lookup("etcd-prefix")
	pf.DefValue = benchEtcdPrefix
	pf.Usage = "with --etcd, the key prefix the bench writes under (it must end in /); each bench run takes a fresh prefix below it and deletes it at the end"
	fs.Lookup("etcd").Usage = "with --store etcd, run against the etcd cluster at these comma-separated endpoints (host:port) instead of starting one"
	fs.StringVar(&f.bin, "etcd-bin", "", "with --store etcd and no --etcd, the etcd binary to start (default: etcd next to this binary, .bin/etcd of the working tree (bash scripts/tools.sh builds it), or etcd on $PATH)")
}

// check refuses etcd flags without --store etcd, and --etcd-bin with --etcd.
func (f *benchEtcdFlags) check(fs *pflag.FlagSet, store string) error {
	if store != "etcd" {
		for _, name := range []string{"etcd", "etcd-prefix", "etcd-tls-ca", "etcd-tls-cert", "etcd-tls-key", "etcd-timeout", "etcd-bin"} {
			if fs.Changed(name) {
				return usageError("--%s needs --store etcd", name)
			}
		}
		return nil
	}
	if f.Set() && f.bin != "" {
		return usageError("--etcd-bin starts an etcd of the bench's own; with --etcd the bench uses that cluster instead: give one or the other")
	}
	if err := f.Check(fs); err != nil {
		return &exitErr{code: exitUsage, err: err}
	}
	return nil
}

// benchEtcd is the etcd backend of one bench run: a client of the cluster
// (given, or an etcd the bench started) and a prefix of its own on it.
type benchEtcd struct {
	cli     *clientv3.Client
	root    string // this run's prefix: every store's prefix is under it
	timeout time.Duration
	proc    *etcdproc.Proc // the etcd the bench started, if it did
	dir     string         // the started etcd's data and log

	mu    sync.Mutex
	paths map[string]string // a store's path → its prefix
}

// openBenchEtcd connects to the cluster of f or, without --etcd, starts a
// single durable etcd from the pinned binary in a temporary directory
// under dir ("" is the system's), its log to a file there.
func openBenchEtcd(ctx context.Context, f *benchEtcdFlags, dir string, stderr io.Writer) (*benchEtcd, error) {
	b := &benchEtcd{timeout: f.Timeout}
	if !f.Set() {
		bin := f.bin
		if bin == "" {
			var near []string
			if exe, err := os.Executable(); err == nil {
				near = append(near, filepath.Dir(exe))
			}
			var err error
			if bin, err = etcdproc.FindBinary(near...); err != nil {
				return nil, &exitErr{code: exitUnavailable, err: fmt.Errorf("bench --store etcd without --etcd starts an etcd: %w; or give a cluster with --etcd ENDPOINTS", err)}
			}
		}
		tmp, err := os.MkdirTemp(dir, "rein-bench-etcd-")
		if err != nil {
			return nil, err
		}
		b.dir = tmp
		logf, err := os.Create(filepath.Join(tmp, "etcd.log"))
		if err != nil {
			b.close()
			return nil, err
		}
		defer logf.Close() // the child has its own descriptor
		p, err := etcdproc.StartSingle(ctx, bin, filepath.Join(tmp, "data"), true, logf)
		if err != nil {
			fmt.Fprintf(stderr, "the etcd the bench started logged to %s:\n%s\n", logf.Name(), tail(logf.Name(), 2048))
			b.close()
			return nil, &exitErr{code: exitUnavailable, err: err}
		}
		b.proc = p
		f.Endpoints = p.Member.Endpoint()
	}
	cli, err := f.Client()
	if err != nil {
		b.close()
		var ue *etcdflags.UsageError
		if errors.As(err, &ue) {
			return nil, &exitErr{code: exitUsage, err: err}
		}
		return nil, &exitErr{code: exitUnavailable, err: err}
	}
	b.cli = cli
	b.root = fmt.Sprintf("%s%s-%d/", f.Prefix, strconv.FormatInt(time.Now().Unix(), 36), os.Getpid())
	// The first request tells whether the cluster answers.
	sctx, cancel := context.WithTimeout(ctx, f.Timeout)
	defer cancel()
	if _, err := cli.Get(sctx, b.root, clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil {
		b.close()
		return nil, &exitErr{code: exitUnavailable, err: fmt.Errorf("etcd at %s did not answer within %v: %w", f.Endpoints, f.Timeout, err)}
	}
	return b, nil
}

// prefix is the key prefix of the bench store at path: one per path (a
// scenario reopens a path to read what it wrote), under the run's root,
// numbered in the order the paths come. It is short, as a deployment's
// (/rein/) is: every key carries it, and a long one (the temporary path
// itself) made each of the store's keys cost etcd's log more than the
// ceiling's fewer keys, beyond what a deployment pays.
func (b *benchEtcd) prefix(path string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	p, ok := b.paths[path]
	if !ok {
		if b.paths == nil {
			b.paths = map[string]string{}
		}
		p = fmt.Sprintf("%s%d/", b.root, len(b.paths))
		b.paths[path] = p
	}
	return p
}

// benchEtcdTarget is the ratio to etcd's ceiling that append, steps,
// steps-runs and fold must reach on etcd.
const benchEtcdTarget = 0.7

// backend is the bench's etcd Backend: stores and ceiling on the same
// client.
func (b *benchEtcd) backend(ctx context.Context) bench.Backend {
	return bench.Backend{
		Name: "etcd",
		// noSync is etcd's to decide (--unsafe-no-fsync), not a store's:
		// every store here is as durable as the cluster.
		Open: func(path string, _ bool) (bench.Store, error) {
			return etcdstore.Open(ctx, b.cli, b.prefix(path), etcdstore.Options{Timeout: b.timeout})
		},
		MaxAppendEvents: benchEtcdAppendEvents,
		Ceiling:         etcdstore.Ceiling{Client: b.cli, Prefix: b.prefix, Timeout: b.timeout},
		// What rein on etcd must reach of etcd's bare Txns, in every
		// scenario measured against them.
		Target: benchEtcdTarget,
	}
}

// close deletes the run's keys, then closes the client and stops the etcd
// the bench started (removing its directory).
func (b *benchEtcd) close() {
	if b.cli != nil {
		ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
		_, _ = b.cli.Delete(ctx, b.root, clientv3.WithPrefix())
		cancel()
		_ = b.cli.Close()
	}
	if b.proc != nil {
		_ = b.proc.Stop(10 * time.Second)
	}
	if b.dir != "" {
		_ = os.RemoveAll(b.dir)
	}
}

// tail is the last n bytes of the file at path, for an error's context.
func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > n {
		_, _ = f.Seek(fi.Size()-n, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	return strings.TrimSpace(string(b))
}

// etcdScenarios is todo, the scenarios asked for by name, as --store etcd
// runs them: all is those of benchEtcdScenarios, a group (steps) those of
// it that etcd has (not steps-stream); another is refused.
func etcdScenarios(name string, todo []bench.Scenario) ([]bench.Scenario, error) {
	var out []bench.Scenario
	for _, s := range todo {
		if slices.Contains(benchEtcdScenarios, s.Name) {
			out = append(out, s)
		} else if name != "all" && s.Group != name {
			return nil, usageError("bench %s runs on --store bolt only; on etcd the scenarios are: %s", s.Name, strings.Join(benchEtcdScenarios, ", "))
		}
	}
	return out, nil
}
