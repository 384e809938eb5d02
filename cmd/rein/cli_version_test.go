package main

import (
	"encoding/json"
	"net"
	"testing"

	"github.com/reinhq/rein/internal/version"
)

// TestVersion: rein version and rein --version print the binary's build;
// with --server, the server's too, through GetServerInfo.
func TestVersion(t *testing.T) {
	want := version.String(version.Get())
	if got := cli(t, "version").mustExit(t, exitOK).stdout; got != want+"\n" {
		t.Fatalf("rein version = %q, want %q", got, want)
	}
	if got := cli(t, "--version").mustExit(t, exitOK).stdout; got != want+"\n" {
		t.Fatalf("rein --version = %q, want %q", got, want)
	}
	mustContain(t, "rein version", want, "API rein.v1")

	addr := serveInProcess(t, newDB(t))
	r := cli(t, "version", "--server", addr, "--json").mustExit(t, exitOK)
	var out map[string]map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("rein version --json: %v\n%s", err, r.stdout)
	}
	for _, side := range []string{"client", "server"} {
		if out[side]["api_version"] != "rein.v1" || out[side]["version"] == "" {
			t.Errorf("%s build = %v", side, out[side])
		}
	}
	text := cli(t, "version", "--server", addr).mustExit(t, exitOK).stdout
	mustContain(t, "rein version --server", text, "client: "+want, "server: rein ", addr)
}

// The twin: with a --server that is not there, rein version fails as every
// client command does, with exit 5, and prints no build as the server's.
func TestVersionServerUnreachable(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	free := lis.Addr().String()
	lis.Close()
	r := cli(t, "version", "--server", free).mustExit(t, exitUnavailable)
	mustContain(t, "rein version against nothing", r.stderr, "cannot reach a rein server at "+free)
	if r.stdout != "" {
		t.Fatalf("stdout = %q, want nothing", r.stdout)
	}
}
