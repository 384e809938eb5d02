package tools

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"
)

// TestLedgerSharedByProcesses: two executors on one ledger file, as two
// servers over one store have: a write one committed is found by the
// other's lookup, and committing it again there is a repeat, not a second
// application. The twin: an operation no one committed is not found.
func TestLedgerSharedByProcesses(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger")
	results := map[string][]FixtureResult{"refunds.create": {{Receipt: structpb.NewStringValue("re_1")}}}
	a, err := NewFixtures(results).WithLedger(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := NewFixtures(results).WithLedger(path)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	call := Call{Tool: "refunds.create"}
	if _, found, err := b.Lookup(ctx, call, "op-1"); err != nil || found {
		t.Fatalf("lookup before any commit: found %v, %v", found, err)
	}
	if _, err := a.Commit(ctx, call, "op-1"); err != nil {
		t.Fatal(err)
	}
	receipt, found, err := b.Lookup(ctx, call, "op-1")
	if err != nil || !found || receipt.GetStringValue() != "re_1" {
		t.Fatalf("b's lookup of a's commit: %v, found %v, %v", receipt, found, err)
	}
	if _, err := b.Commit(ctx, call, "op-1"); err != nil {
		t.Fatal(err)
	}
	if _, found, err := a.Lookup(ctx, call, "op-2"); err != nil || found {
		t.Fatalf("lookup of an operation never committed: found %v, %v", found, err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := "op-1\trefunds.create\tapplied\nop-1\trefunds.create\trepeat\n"; string(data) != want {
		t.Fatalf("ledger = %q, want %q", data, want)
	}
	if strings.Count(string(data), "applied") != 1 {
		t.Fatal("the write was applied twice")
	}
}
