package main

// The tool flags on the embedded default: --tool-server registers a remote
// tool service for rein run and rein approve alike, so a write proposed over
// gRPC is committed over gRPC, once.

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/tools/remote"
)

// toolService serves the refund example's fixtures, with a ledger of its
// commits, as a rein.v1.ToolService on a loopback port.
func toolService(t *testing.T) (addr, ledger string) {
	t.Helper()
	f, err := loadFixtures(example("refund", "tools.json"))
	if err != nil {
		t.Fatal(err)
	}
	ledger = filepath.Join(t.TempDir(), "ledger")
	if f, err = f.WithLedger(ledger); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	reinv1.RegisterToolServiceServer(srv, remote.NewServer(f))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String(), ledger
}

func TestToolServerOnTheEmbeddedDefault(t *testing.T) {
	addr, ledger := toolService(t)
	db := newDB(t)
	flag := "billing=" + addr
	out := decodeOne(t, cli(t, "run", example("refund", "task.json"), "--model", "script:"+example("refund", "model.jsonl"),
		"--tool-server", flag, "--db", db, "--json").mustExit(t, exitPaused).stdout)
	prop := obj(t, obj(t, out["pending"], "pending")["proposal"], "pending.proposal")
	if p := obj(t, prop["preview"], "preview"); p["refund"] == nil {
		t.Fatalf("preview %v, want the service's", p)
	}
	runID := out["run_id"].(string)
	done := decodeOne(t, cli(t, "approve", runID, prop["proposal_id"].(string), "--tool-server", flag, "--db", db, "--json").mustExit(t, exitOK).stdout)
	if done["status"] != "completed" {
		t.Fatalf("after approve: %v, want completed", done["status"])
	}
	raw, err := os.ReadFile(ledger)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(raw), "\n"); n != 1 {
		t.Fatalf("the service's ledger has %d commits, want 1:\n%s", n, raw)
	}
}

func TestToolFlagRefusals(t *testing.T) {
	db := newDB(t)
	run := []string{"run", example("refund", "task.json"), "--model", "script:" + example("refund", "model.jsonl"), "--db", db}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"no address", []string{"--tool-server", "billing"}, []string{"--tool-server", "NAME=ADDR"}},
		{"bad name", []string{"--tool-server", "bil ling=127.0.0.1:1"}, []string{"--tool-server", "NAME must be"}},
		{"dotted name", []string{"--mcp", "a.b=http://127.0.0.1:1/mcp"}, []string{"--mcp", "NAME must be", "'.'"}},
		{"no mcp target", []string{"--mcp", "fs="}, []string{"--mcp", "NAME=COMMAND|URL"}},
		{"remote server", []string{"--tool-server", "billing=127.0.0.1:1", "--server", "127.0.0.1:1"}, []string{"embedded server"}},
		{"prices with a remote server", []string{"--prices", "prices.json", "--server", "127.0.0.1:1"}, []string{"--prices", "embedded server"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := cli(t, append(append([]string{}, run...), tc.args...)...).mustExit(t, exitUsage)
			mustContain(t, "stderr", r.stderr, tc.want...)
			if _, err := os.Stat(db); err == nil {
				t.Fatal("a refused run created the store")
			}
		})
	}
}
