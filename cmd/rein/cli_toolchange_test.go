package main

// A tool service redeployed under a paused proposal (docs/upgrading.md, "When a tool changes under a run"):
// the approval of the old hash never reaches the service's ledger; the
// proposal is previewed again, and its approval commits once.

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/tools"
	"github.com/reinhq/rein/internal/tools/remote"
)

// redeployable is an executor whose tools declare the tier a test sets,
// as a new build of a tool service would.
type redeployable struct {
	tools.Executor
	mu   sync.Mutex
	tier reinv1.ToolTier
}

func (r *redeployable) List(ctx context.Context) ([]tools.Spec, error) {
	specs, err := r.Executor.List(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range specs {
		specs[i].Tier = r.tier
	}
	return specs, err
}

func (r *redeployable) declare(t reinv1.ToolTier) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tier = t
}

func TestApproveAfterToolRedeploy(t *testing.T) {
	f, err := loadFixtures(example("refund", "tools.json"))
	if err != nil {
		t.Fatal(err)
	}
	ledger := filepath.Join(t.TempDir(), "ledger")
	if f, err = f.WithLedger(ledger); err != nil {
		t.Fatal(err)
	}
	svc := &redeployable{Executor: f, tier: reinv1.ToolTier_TOOL_TIER_WRITE}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	reinv1.RegisterToolServiceServer(srv, remote.NewServer(svc))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	flag := "billing=" + lis.Addr().String()
	db := newDB(t)

	out := decodeOne(t, cli(t, "run", example("refund", "task.json"), "--model", "script:"+example("refund", "model.jsonl"),
		"--tool-server", flag, "--db", db, "--json").mustExit(t, exitPaused).stdout)
	runID := out["run_id"].(string)
	old := obj(t, obj(t, out["pending"], "pending")["proposal"], "pending.proposal")

	// The new build of the service declares its tools read-only.
	svc.declare(reinv1.ToolTier_TOOL_TIER_READ)
	r := cli(t, "approve", runID, old["proposal_id"].(string), "--tool-server", flag, "--db", db)
	if r.code == exitOK {
		t.Fatalf("approving the old hash after the redeploy succeeded:\n%s", r.stdout)
	}
	mustContain(t, "approve", r.stderr, "changed since proposal", "tier", "approve that one")
	if raw, _ := os.ReadFile(ledger); len(raw) > 0 {
		t.Fatalf("the old hash reached the service's ledger:\n%s", raw)
	}

	got := decodeOne(t, cli(t, "inspect", runID, "--db", db, "--json").mustExit(t, exitOK).stdout)
	p := obj(t, obj(t, got["pending"], "pending")["proposal"], "pending.proposal")
	if p["proposal_id"] == old["proposal_id"] || p["hash"] == old["hash"] || p["tool_digest"] == nil {
		t.Fatalf("pending after the redeploy = %v, want a new proposal, previewed on the new definition", p)
	}
	mustContain(t, "inspect", cli(t, "inspect", runID, "--db", db).mustExit(t, exitOK).stdout, "tool event", "changed (tier)", "served by tool-server billing")

	done := decodeOne(t, cli(t, "approve", runID, p["proposal_id"].(string), "--tool-server", flag, "--db", db, "--json").mustExit(t, exitOK).stdout)
	if done["status"] != "completed" {
		t.Fatalf("after approving the new proposal: %v, want completed", done["status"])
	}
	raw, err := os.ReadFile(ledger)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(raw), "\n"); n != 1 {
		t.Fatalf("the service's ledger has %d commits, want 1:\n%s", n, raw)
	}
}

// rein serve refuses an --on-tool-change it does not know, before it
// serves anything.
func TestServeOnToolChangeRefused(t *testing.T) {
	r := cli(t, "serve", "--db", newDB(t), "--listen", "127.0.0.1:0", "--on-tool-change", "sometimes").mustExit(t, exitUsage)
	mustContain(t, "serve", r.stderr, "--on-tool-change", "pause, adopt or fail")
}
