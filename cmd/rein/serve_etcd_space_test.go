package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reinhq/rein/internal/etcdtest"
	etcdstore "github.com/reinhq/rein/internal/store/etcd"
)

// serveUntil runs rein serve with args until stop is called, its log to
// log; stop returns the exit code.
func serveUntil(args []string, log *watchWriter) (stop func() int) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- Run(ctx, args, strings.NewReader(""), &strings.Builder{}, log) }()
	return func() int { cancel(); return <-done }
}

// TestServeEtcdFull: rein serve --etcd on a rein prefix of a cluster whose
// quota is full (its NOSPACE alarm raised) exits 5 before it serves,
// saying what frees etcd; --etcd-compact-every without --etcd, or below 0,
// exits 2. The twin: once an operator freed etcd, the same server serves.
func TestServeEtcdFull(t *testing.T) {
	c := etcdtest.StartWith(t, etcdtest.Options{Members: 1, QuotaBackendBytes: 4 << 20})
	etcdCli := c.Client()
	ctx := t.Context()
	st, err := etcdstore.Open(ctx, etcdCli, "/rein/", etcdstore.Options{}) // a rein prefix, made while etcd had room
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Close()
	serve := []string{"serve", "--listen", "127.0.0.1:0", "--etcd", c.Endpoint(0), "--etcd-prefix", "/rein/", "--lease-ttl", "2s"}

	for _, tc := range []struct {
		name string
		args []string
		says []string
	}{
		{"compaction without etcd", []string{"serve", "--db", t.TempDir() + "/r.db", "--etcd-compact-every", "1m"}, []string{"--etcd-compact-every", "--etcd"}},
		{"a negative period", append(serve, "--etcd-compact-every", "-1s"), []string{"--etcd-compact-every", "0 (never) or more"}},
	} {
		r := cli(t, tc.args...).mustExit(t, exitUsage)
		for _, s := range tc.says {
			if !strings.Contains(r.stderr, s) {
				t.Errorf("%s: stderr does not say %q:\n%s", tc.name, s, r.stderr)
			}
		}
	}

	c.Fill(etcdCli, "/filler/")
	r := cli(t, serve...).mustExit(t, exitUnavailable)
	for _, s := range []string{"NOSPACE alarm", "--quota-backend-bytes", "etcdctl defrag", "etcdctl alarm disarm"} {
		if !strings.Contains(r.stderr, s) {
			t.Errorf("serve on a full etcd: stderr does not say %q:\n%s", s, r.stderr)
		}
	}

	c.FreeSpace(etcdCli, "/filler/")
	log := newWatchWriter("rein serving")
	stop := serveUntil(serve, log)
	served := log.waitFor(30*time.Second, func(s string) bool { return strings.Contains(s, "rein serving") })
	if code := stop(); !served || code != exitOK {
		t.Fatalf("serve after etcd was freed: served %v, exit %d\n%s", served, code, log.String())
	}
}

// TestServeEtcdCompacts: rein serve --etcd compacts etcd's history every
// --etcd-compact-every: a revision from before it started is compacted
// away while it serves, and it warns of nothing. The twin: with
// --etcd-compact-every 0 on a cluster whose history was never compacted it
// warns that nothing compacts it, and leaves the revision readable.
func TestServeEtcdCompacts(t *testing.T) {
	for _, every := range []string{"0", "100ms"} {
		t.Run("every "+every, func(t *testing.T) {
			c := etcdtest.Start(t, 1)
			etcdCli := c.Client()
			ctx := t.Context()
			put, err := etcdCli.Put(ctx, "/app/k", "1")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := etcdCli.Put(ctx, "/app/k", "2"); err != nil { // past put's revision
				t.Fatal(err)
			}
			old := put.Header.Revision
			compacted := func() bool {
				_, err := etcdCli.Get(ctx, "/app/k", clientv3.WithRev(old))
				if err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
					t.Fatalf("read revision %d: %v", old, err)
				}
				return err != nil
			}

			log := newWatchWriter("rein serving")
			stop := serveUntil([]string{"serve", "--listen", "127.0.0.1:0", "--etcd", c.Endpoint(0), "--lease-ttl", "2s",
				"--log-level", "debug", "--etcd-compact-every", every}, log)
			if every == "0" {
				served := log.waitFor(30*time.Second, func(s string) bool { return strings.Contains(s, "rein serving") })
				if code := stop(); !served || code != exitOK {
					t.Fatalf("serve: served %v, exit %d\n%s", served, code, log.String())
				}
				if !strings.Contains(log.String(), "never compacted") || compacted() {
					t.Fatalf("with --etcd-compact-every 0: warned %v, revision %d compacted %v; want a warning and the revision kept\n%s",
						strings.Contains(log.String(), "never compacted"), old, compacted(), log.String())
				}
				return
			}
			did := log.waitFor(30*time.Second, func(s string) bool { return strings.Contains(s, "compacted etcd's history") })
			if code := stop(); !did || code != exitOK {
				t.Fatalf("serve: compacted %v, exit %d\n%s", did, code, log.String())
			}
			if !compacted() || strings.Contains(log.String(), "never compacted") {
				t.Fatalf("with --etcd-compact-every %s: revision %d compacted %v, warned %v; want it compacted, no warning\n%s",
					every, old, compacted(), strings.Contains(log.String(), "never compacted"), log.String())
			}
		})
	}
}
