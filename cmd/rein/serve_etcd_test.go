package main

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reinhq/rein/internal/etcdtest"
)

// etcdKeys is every key under prefix on the cluster, with its value and
// revision: what "nothing was written" is checked against.
func etcdKeys(t *testing.T, cli *clientv3.Client, prefix string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, kv := range resp.Kvs {
		m[string(kv.Key)] = fmt.Sprintf("%d:%q", kv.ModRevision, kv.Value)
	}
	return m
}

// TestServeEtcdRefused: rein serve --etcd refuses before it serves, saying
// what to do and writing nothing to the cluster: flags that do not fit
// (exit 2), a prefix that holds another program's keys or a rein layout it
// does not know, and a cluster that does not answer (exit 5, naming etcd).
// The twin: on a fresh prefix of the same cluster it starts.
func TestServeEtcdRefused(t *testing.T) {
	c := etcdtest.Start(t, 1)
	ep := c.Endpoint(0)
	etcdCli := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for k, v := range map[string]string{"/app/config/db": "postgres://", "/future/meta/layout": "rein-etcd-99"} {
		if _, err := etcdCli.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	serve := func(args ...string) []string {
		return append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		says []string
	}{
		{"a prefix without its slash", serve("--etcd", ep, "--etcd-prefix", "/rein"), exitUsage, []string{"--etcd-prefix", "must end in /"}},
		{"a TTL of part of a second", serve("--etcd", ep, "--lease-ttl", "1500ms"), exitUsage, []string{"--lease-ttl", "whole seconds"}},
		{"a lease without etcd", serve("--db", t.TempDir()+"/r.db", "--lease-ttl", "5s"), exitUsage, []string{"--lease-ttl", "--etcd"}},
		{"a name with a trailing space", serve("--etcd", ep, "--name", "r1 "), exitUsage, []string{"--name", `"r1 "`, "no space"}},
		{"a name with a slash", serve("--etcd", ep, "--name", "eu/r1"), exitUsage, []string{"--name", `'/'`}},
		{"a half client certificate", serve("--etcd", ep, "--etcd-tls-cert", "c.pem"), exitUsage, []string{"--etcd-tls-key"}},
		{"another program's keys", serve("--etcd", ep, "--etcd-prefix", "/app/"), exitUnavailable, []string{"/app/"}},
		{"a layout from a newer rein", serve("--etcd", ep, "--etcd-prefix", "/future/"), exitUnavailable, []string{"rein-etcd-99"}},
		{"no cluster", serve("--etcd", "127.0.0.1:1", "--etcd-timeout", "1s"), exitUnavailable, []string{"etcd"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := etcdKeys(t, etcdCli, "/")
			r := cli(t, tc.args...).mustExit(t, tc.code)
			for _, s := range tc.says {
				if !strings.Contains(r.stderr, s) {
					t.Errorf("stderr does not say %q:\n%s", s, r.stderr)
				}
			}
			if after := etcdKeys(t, etcdCli, "/"); !maps.Equal(before, after) {
				t.Errorf("the refused serve wrote to etcd: %d keys before, %d after", len(before), len(after))
			}
		})
	}

	// The twin: a fresh prefix is made rein's, and the server serves until
	// it is stopped.
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan int, 1)
	log := newWatchWriter("serving")
	go func() {
		done <- Run(sctx, serve("--etcd", ep, "--etcd-prefix", "/fresh/", "--lease-ttl", "2s"), strings.NewReader(""), &strings.Builder{}, log)
	}()
	served := log.waitFor(30*time.Second, func(s string) bool { return strings.Contains(s, "serving") })
	stop()
	if code := <-done; !served || code != exitOK {
		t.Fatalf("serve on a fresh prefix: served %v, exit %d\n%s", served, code, log.String())
	}
	if keys := etcdKeys(t, etcdCli, "/fresh/meta/layout"); len(keys) != 1 {
		t.Errorf("the fresh prefix holds %d layout marks, want 1", len(keys))
	}
}

// TestServeEtcdNameTaken: a second rein serve --etcd with the --name of a
// live server on the same prefix exits 2 before it serves, naming the
// clash and what to do. The twin: once the first server stopped (its
// lease revoked as it leaves), a server of that name starts at once.
func TestServeEtcdNameTaken(t *testing.T) {
	c := etcdtest.Start(t, 1)
	serve := []string{"serve", "--listen", "127.0.0.1:0", "--etcd", c.Endpoint(0), "--etcd-prefix", "/names/", "--lease-ttl", "5s", "--name", "dup"}
	// start runs serve until it is stopped; it returns the stop, which
	// waits for the exit code.
	start := func(log *watchWriter) func() int {
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan int, 1)
		go func() { done <- Run(ctx, serve, strings.NewReader(""), &strings.Builder{}, log) }()
		return func() int { stop(); return <-done }
	}
	first := newWatchWriter("serving")
	stopFirst := start(first)
	if !first.waitFor(30*time.Second, func(s string) bool { return strings.Contains(s, "rein serving") }) {
		t.Fatalf("the first server did not serve: exit %d\n%s", stopFirst(), first.String())
	}

	// The second is refused; on a rein that lets it start, it would serve
	// until this test stops it, and exit 0.
	second := newWatchWriter("serving")
	stopSecond := start(second)
	second.waitFor(30*time.Second, func(s string) bool { return strings.Contains(s, "rein:") || strings.Contains(s, "rein serving") })
	if code := stopSecond(); code != exitUsage {
		t.Fatalf("a second server named dup: exit %d, want %d (usage)\n%s", code, exitUsage, second.String())
	}
	for _, says := range []string{`"dup"`, "another server already runs as", "etcd lease", "--name", "stop the other server"} {
		if !strings.Contains(second.String(), says) {
			t.Errorf("the refusal does not say %q:\n%s", says, second.String())
		}
	}
	if strings.Contains(second.String(), "rein serving") {
		t.Errorf("the refused server served:\n%s", second.String())
	}

	if code := stopFirst(); code != exitOK {
		t.Fatalf("the first server stopped with exit %d\n%s", code, first.String())
	}
	third := newWatchWriter("serving")
	stopThird := start(third)
	served := third.waitFor(30*time.Second, func(s string) bool { return strings.Contains(s, "rein serving") || strings.Contains(s, "rein:") })
	if code := stopThird(); !served || code != exitOK || !strings.Contains(third.String(), "rein serving") {
		t.Fatalf("a server named dup after the first stopped: exit %d\n%s", code, third.String())
	}
}
