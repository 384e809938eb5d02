package main

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reinhq/rein/internal/etcdtest"
	"github.com/reinhq/rein/internal/store/bolt"
	"github.com/reinhq/rein/internal/storeformat"
)

// TestClusterStatusBolt: on a bbolt server, rein cluster status lists the
// one server with its build and formats, and the file's format; rein
// cluster finalize has nothing to do; rein version --server shows the
// active format. The twin: a principal without the admin role is refused
// both (exit 4), and may still read the version.
func TestClusterStatusBolt(t *testing.T) {
	tokens := writeFile(t, "tokens.json", `{"principals": [
		{"id": "root", "tenant": "acme", "roles": ["admin"], "token_sha256": "`+hashOf("root-token")+`"},
		{"id": "ops", "tenant": "acme", "roles": ["operator"], "token_sha256": "`+hashOf("ops-token")+`"}]}`)
	addr := serveInProcess(t, newDB(t), "--tokens", tokens)
	text := cli(t, "cluster", "status", "--server", addr, "--token", "root-token").mustExit(t, exitOK).stdout
	build := storeformat.This()
	mustContain(t, "rein cluster status", text, "(this server)", "rein ", build.Reads.String(), fmt.Sprintf("store: bbolt, active format %d (recorded in the file)", storeformat.Current), "finalization: none pending")
	js := decodeOne(t, cli(t, "cluster", "status", "--server", addr, "--token", "root-token", "--json").mustExit(t, exitOK).stdout)
	if js["backend"] != "bbolt" || num(t, js["active_format"], "active_format") != int(storeformat.Current) {
		t.Fatalf("rein cluster status --json: %v", js)
	}
	fin := cli(t, "cluster", "finalize", "--server", addr, "--token", "root-token").mustExit(t, exitOK).stdout
	mustContain(t, "rein cluster finalize", fin, "nothing to finalize", fmt.Sprintf("active format is %d", storeformat.Current))
	v := cli(t, "version", "--server", addr, "--token", "ops-token").mustExit(t, exitOK).stdout
	mustContain(t, "rein version --server", v, fmt.Sprintf("server store format: active %d; its build %s", storeformat.Current, build))

	for _, cmd := range []string{"status", "finalize"} {
		r := cli(t, "cluster", cmd, "--server", addr, "--token", "ops-token").mustExit(t, exitDenied)
		mustContain(t, "rein cluster "+cmd+" as an operator", r.stderr, "admin")
	}
}

// TestNewerFileRefused: a bbolt file a newer build wrote is refused by this
// one (serve, a command's embedded server, read-only ones, rein check)
// with exit 2, naming both formats, and left byte-identical. The twin: a
// file in this build's format opens, and rein check prints its format.
func TestNewerFileRefused(t *testing.T) {
	db := filepath.Join(t.TempDir(), "rein.db")
	newer := storeformat.Build{Reads: storeformat.Range{Min: 1, Max: storeformat.Current + 1}, Writes: storeformat.Range{Min: storeformat.Current, Max: storeformat.Current + 1}}
	s, err := bolt.Open(db, bolt.Options{Formats: newer})
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	before, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"serve", "--listen", "127.0.0.1:0", "--db", db},
		{"list", "--db", db},
		{"cluster", "finalize", "--db", db},
		{"check", "--db", db},
	} {
		r := cli(t, args...).mustExit(t, exitUsage)
		mustContain(t, strings.Join(args, " "), r.stderr, fmt.Sprintf("store format %d", storeformat.Current+1), fmt.Sprintf("formats up to %d", storeformat.Current), db)
	}
	if after, _ := os.ReadFile(db); !bytes.Equal(before, after) {
		t.Fatal("a refused command changed the file")
	}

	own := newDB(t)
	cli(t, exampleRun("invoice", own)...)
	r := cli(t, "check", "--db", own).mustExit(t, exitOK)
	mustContain(t, "rein check", r.stderr, fmt.Sprintf("store format %d", storeformat.Current))
	js := decodeOne(t, cli(t, "check", "--db", own, "--json").mustExit(t, exitOK).stdout)
	if num(t, js["store_format"], "store_format") != int(storeformat.Current) {
		t.Fatalf("rein check --json: %v", js)
	}
	mustContain(t, "rein cluster status --db", cli(t, "cluster", "status", "--db", own).mustExit(t, exitOK).stdout, fmt.Sprintf("active format %d", storeformat.Current))
}

// TestClusterEtcd: two servers on one etcd prefix are both listed by rein
// cluster status, from either, with their names. A new prefix is in format
// 6, and two servers of this build have this build's format pending, which
// rein cluster finalize makes active. Once the prefix is finalized to a
// format newer than this build's (as a newer build would), a server of
// this build refuses to start with exit 2, naming both formats, and writes
// nothing to etcd.
func TestClusterEtcd(t *testing.T) {
	c := etcdtest.Start(t, 1)
	ep := c.Endpoint(0)
	start := func(name string) (addr string, stop func() int) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan int, 1)
		log := newWatchWriter("rein serving")
		go func() {
			done <- Run(ctx, []string{"serve", "--listen", "127.0.0.1:0", "--etcd", ep, "--etcd-prefix", "/cl/", "--lease-ttl", "2s", "--name", name},
				strings.NewReader(""), &strings.Builder{}, log)
		}()
		if !log.waitFor(30*time.Second, func(s string) bool { return strings.Contains(s, "rein serving") || strings.Contains(s, "rein:") }) {
			cancel()
			t.Fatalf("%s did not serve: exit %d\n%s", name, <-done, log.String())
		}
		m := regexp.MustCompile(`addr=(127\.0\.0\.1:\d+)`).FindStringSubmatch(log.String())
		if m == nil {
			cancel()
			t.Fatalf("%s: no address:\n%s (exit %d)", name, log.String(), <-done)
		}
		return m[1], func() int { cancel(); return <-done }
	}
	a, stopA := start("a")
	_, stopB := start("b")
	text := cli(t, "cluster", "status", "--server", a).mustExit(t, exitOK).stdout
	mustContain(t, "rein cluster status on etcd", text, "a (this server)", "b ", fmt.Sprintf("store: etcd, active format %d (never finalized)", storeformat.Base),
		fmt.Sprintf("finalization: pending, to format %d", storeformat.Current))
	mustContain(t, "rein cluster finalize on etcd", cli(t, "cluster", "finalize", "--server", a).mustExit(t, exitOK).stdout,
		fmt.Sprintf("now %d (was %d)", storeformat.Current, storeformat.Base))
	mustContain(t, "rein cluster finalize again", cli(t, "cluster", "finalize", "--server", a).mustExit(t, exitOK).stdout, "nothing to finalize")
	if code := stopB(); code != exitOK {
		t.Fatalf("b exited %d", code)
	}
	if code := stopA(); code != exitOK {
		t.Fatalf("a exited %d", code)
	}

	etcdCli := c.Client()
	if _, err := etcdCli.Put(t.Context(), "/cl/meta/format", strconv.Itoa(int(storeformat.Current+1))); err != nil {
		t.Fatal(err)
	}
	before := etcdKeys(t, etcdCli, "/")
	r := cli(t, "serve", "--listen", "127.0.0.1:0", "--etcd", ep, "--etcd-prefix", "/cl/", "--lease-ttl", "2s", "--name", "old").mustExit(t, exitUsage)
	mustContain(t, "an older build on a finalized prefix", r.stderr, fmt.Sprintf("store format %d", storeformat.Current+1), fmt.Sprintf("formats up to %d", storeformat.Current), "finalized")
	if after := etcdKeys(t, etcdCli, "/"); !maps.Equal(before, after) {
		t.Errorf("the refused server wrote to etcd")
	}
}
