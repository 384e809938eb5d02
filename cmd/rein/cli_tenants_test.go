//go:build unix

package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestServeTenantsRefused: a --tenants file that cannot be used stops
// rein serve before anything opens, with exit 2 and the file, the line and
// the reason on stderr. The twin (a good file serves) is
// TestServeTenantsReload.
func TestServeTenantsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	badKey := filepath.Join(dir, "tenants.toml")
	if err := os.WriteFile(badKey, []byte("[defaults]\nretain = \"720h\"\n\n[tenants.beta]\n\n[tenants.acme]\narchive_aftr = \"1h\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(dir, "open.toml")
	if err := os.WriteFile(open, []byte("[defaults]\nretain = \"720h\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o644); err != nil { // past the umask
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo.toml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, file string
		want       []string
	}{
		{"unknown key", badKey, []string{"--tenants: " + badKey + `:7: unknown key "archive_aftr" in [tenants.acme]; the keys are archive_after, retain`}},
		{"syntax error", writeFile(t, "tenants.toml", "[tenants.acme\nretain = \"1h\"\n"), []string{"tenants.toml:1: ", "expected ']'"}},
		{"negative", writeFile(t, "tenants.toml", "\n[tenants.acme]\nretain = \"-1h\"\n"), []string{"tenants.toml:3: ", `retain in [tenants.acme]: "-1h" is negative`}},
		{"readable by others", open, []string{"readable by others (mode 0644)", "chmod 600 " + open}},
		{"a FIFO", fifo, []string{"named pipe (FIFO)"}},
		{"missing", filepath.Join(dir, "none.toml"), []string{"--tenants: ", "no such file"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			db := newDB(t)
			done := make(chan result, 1)
			go func() { done <- cli(t, "serve", "--listen", "127.0.0.1:0", "--db", db, "--tenants", c.file) }()
			var r result
			select {
			case r = <-done:
			case <-time.After(60 * time.Second):
				t.Fatal("rein serve did not return")
			}
			r.mustExit(t, exitUsage)
			mustContain(t, "stderr", r.stderr, c.want...)
			mustNotExist(t, db)
		})
	}
}

// TestServeTenantsReload: rein serve, as a process, logs the tenants its
// --tenants file holds; on SIGHUP with a broken file it logs why, keeps
// the previous settings and keeps serving; on SIGHUP with a fixed file it
// logs the new tenants.
func TestServeTenantsReload(t *testing.T) {
	t.Setenv(cliEnv, "1") // the server is this test binary running the CLI
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	file := writeFile(t, "tenants.toml", "[defaults]\nretain = \"720h\"\n\n[tenants.acme]\narchive_after = \"1h\"\n")
	srv := startGrpcurlServer(t, t.TempDir(), exe, []string{"serve", "--listen", "127.0.0.1:0", "--db", newDB(t), "--tenants", file})
	mustContain(t, "the server's log", srv.output(), `msg="tenant settings loaded" file=`+file+` tenants=[acme]`)

	rewrite := func(content string) { srv.rewriteAndHangUp(t, file, content) }
	waitLog := func(what string, want ...string) { srv.waitLog(t, what, want...) }

	rewrite("[defaults]\nretain = \"720h\"\n\n[tenants.acme]\narchive_aftr = \"1h\"\n[tenants.beta]\n")
	waitLog("the refused reload", "keeping the previous settings", file+`:5: unknown key \"archive_aftr\" in [tenants.acme]`)
	mustServe(t, srv)
	if strings.Contains(srv.output(), "tenant settings reloaded") {
		t.Errorf("a broken file was logged as reloaded:\n%s", srv.output())
	}

	rewrite("[defaults]\nretain = \"720h\"\n\n[tenants.acme]\narchive_after = \"1h\"\n[tenants.beta]\n")
	waitLog("the reload", `msg="tenant settings reloaded" file=`+file+` tenants="[acme beta]"`)
	mustServe(t, srv)
	srv.stop(t)
}

// rewriteAndHangUp writes content to the file at path and sends the
// server SIGHUP, which has it read the file again.
func (s *grpcurlServer) rewriteAndHangUp(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
}

// waitLog waits until the server's log holds every one of want, or fails
// after 20 s or when the server exits; what names it in the failure.
func (s *grpcurlServer) waitLog(t *testing.T, what string, want ...string) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	for {
		out := s.output()
		all := true
		for _, w := range want {
			all = all && strings.Contains(out, w)
		}
		if all {
			return
		}
		select {
		case <-tick.C:
		case <-s.exited:
			t.Fatalf("rein serve exited (%v) before it logged %s:\n%s", s.err, what, s.output())
		case <-deadline.C:
			t.Fatalf("rein serve did not log %s within 20s:\n%s", what, out)
		}
	}
}

// mustServe fails the test unless srv's health check answers SERVING.
func mustServe(t *testing.T, srv *grpcurlServer) {
	t.Helper()
	conn, err := grpc.NewClient(srv.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || res.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health check: %v %v, want SERVING", res.GetStatus(), err)
	}
}
