package main

// The billing executor on a real bbolt file in t.TempDir(). Refusals are
// checked by their gRPC code (the service answers with it) and by what they
// leave in the file: nothing.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/reinhq/rein/internal/tools"
)

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// openBilling opens a new billing file in a temporary directory, closed at
// the end of the test.
func openBilling(t *testing.T) (*Billing, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "billing.db")
	return reopen(t, path), path
}

func reopen(t *testing.T, path string) *Billing {
	t.Helper()
	b, err := Open(path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func args(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// refundCall is a refunds.create call; amount and reason fill the usual
// arguments around invoice.
func refundCall(t *testing.T, invoice string, amount any) tools.Call {
	t.Helper()
	return tools.Call{RunID: "run_1", CallID: "c2", Tool: toolRefund,
		Args: args(t, map[string]any{"invoice_id": invoice, "amount": amount, "reason": "1 of 3 licences returned"})}
}

// proposed is call with the preview Propose gives it now, as rein commits it.
func proposed(t *testing.T, b *Billing, call tools.Call) tools.Call {
	t.Helper()
	preview, err := b.Propose(testCtx(t), call)
	if err != nil {
		t.Fatalf("Propose %v: %v", call.Args, err)
	}
	call.Preview = preview
	return call
}

func field(v *structpb.Value, name string) string {
	return v.GetStructValue().GetFields()[name].GetStringValue()
}

// wantRefusal fails unless err has code and its message contains want.
func wantRefusal(t *testing.T, err error, code codes.Code, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("accepted, want %v containing %q", code, want)
	}
	if status.Code(err) != code || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v (code %v), want %v containing %q", err, status.Code(err), code, want)
	}
}

// contents is every bucket's keys and values, and the refunds bucket's
// sequence, as text.
func contents(t *testing.T, b *Billing) string {
	t.Helper()
	var sb strings.Builder
	err := b.db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, bk *bolt.Bucket) error {
			fmt.Fprintf(&sb, "%s seq=%d\n", name, bk.Sequence())
			return bk.ForEach(func(k, v []byte) error {
				fmt.Fprintf(&sb, "  %s = %s\n", k, v)
				return nil
			})
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return sb.String()
}

func refundsIn(t *testing.T, b *Billing) int {
	t.Helper()
	n := 0
	if err := b.db.View(func(tx *bolt.Tx) error {
		n = tx.Bucket(bucketRefunds).Stats().KeyN
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestReadInvoice: invoices.get reads a seeded invoice; the twins: a
// missing invoice, a wrong argument, a write tool called as a read and a
// tool the service does not have are refused, each saying why.
func TestReadInvoice(t *testing.T) {
	b, _ := openBilling(t)
	ctx := testCtx(t)
	out, err := b.Read(ctx, tools.Call{Tool: toolInvoice, Args: args(t, map[string]any{"invoice_id": "INV-1001"})})
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	want := map[string]string{"invoice_id": "INV-1001", "customer": "Acme Ltd", "amount": "120.00", "currency": "EUR",
		"status": "paid", "refunded": "0.00", "refundable": "120.00"}
	for k, v := range want {
		if got := field(out, k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}

	for _, tc := range []struct {
		name string
		call tools.Call
		code codes.Code
		want string
	}{
		{"missing invoice", tools.Call{Tool: toolInvoice, Args: args(t, map[string]any{"invoice_id": "INV-9"})},
			codes.InvalidArgument, `no invoice "INV-9"`},
		{"no invoice_id", tools.Call{Tool: toolInvoice}, codes.InvalidArgument, "invoice_id is required"},
		{"unknown argument", tools.Call{Tool: toolInvoice, Args: args(t, map[string]any{"invoice_id": "INV-1001", "id": "x"})},
			codes.InvalidArgument, `unknown argument "id"`},
		{"write as a read", refundCall(t, "INV-1001", "40.00"), codes.FailedPrecondition, "grant it with TOOL_TIER_WRITE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := b.Read(ctx, tc.call)
			wantRefusal(t, err, tc.code, tc.want)
		})
	}
	if _, err := b.Read(ctx, tools.Call{Tool: "invoices.delete"}); !errors.Is(err, tools.ErrNoTool) {
		t.Errorf("Read of invoices.delete: %v, want tools.ErrNoTool", err)
	}
}

// TestProposeRefund: a refund within what is refundable gets a preview of
// what it would do, and writes nothing; the twins: an amount above what is
// refundable, an unpaid invoice, another currency and malformed arguments
// are refused with InvalidArgument, which the model reads.
func TestProposeRefund(t *testing.T) {
	b, _ := openBilling(t)
	ctx := testCtx(t)
	before := contents(t, b)
	for _, amount := range []any{"40.00", "40", 40.0} {
		preview, err := b.Propose(ctx, refundCall(t, "INV-1001", amount))
		if err != nil {
			t.Fatalf("Propose %v: %v", amount, err)
		}
		want := map[string]string{"invoice_id": "INV-1001", "customer": "Acme Ltd", "amount": "40.00", "currency": "EUR",
			"reason": "1 of 3 licences returned", "refundable_left": "120.00", "refundable_after": "80.00"}
		for k, v := range want {
			if got := field(preview, k); got != v {
				t.Errorf("amount %v: preview %s = %q, want %q", amount, k, got, v)
			}
		}
	}
	if after := contents(t, b); after != before {
		t.Errorf("Propose changed the file:\nbefore:\n%s\nafter:\n%s", before, after)
	}

	for _, tc := range []struct {
		name string
		call tools.Call
		want string
	}{
		{"above the refundable", refundCall(t, "INV-1001", "120.01"),
			"120.01 EUR is more than the 120.00 EUR left to refund on INV-1001 (120.00 EUR, 0.00 refunded); refund at most 120.00"},
		{"unpaid invoice", refundCall(t, "INV-1003", "10.00"), "INV-1003 is open, not paid"},
		{"another currency", tools.Call{Tool: toolRefund, Args: args(t, map[string]any{
			"invoice_id": "INV-1001", "amount": "10.00", "currency": "USD", "reason": "r"})}, "INV-1001 is in EUR, not USD"},
		{"three decimals", refundCall(t, "INV-1001", "40.001"), `"40.001" is not an amount`},
		{"negative", refundCall(t, "INV-1001", -5.0), "is not an amount"},
		{"zero", refundCall(t, "INV-1001", "0.00"), "amount must be more than 0.00"},
		{"no reason", tools.Call{Tool: toolRefund, Args: args(t, map[string]any{"invoice_id": "INV-1001", "amount": "10.00"})},
			"reason is required"},
		{"missing invoice", refundCall(t, "INV-9", "10.00"), `no invoice "INV-9"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := b.Propose(ctx, tc.call)
			wantRefusal(t, err, codes.InvalidArgument, tc.want)
		})
	}
	_, err := b.Propose(ctx, tools.Call{Tool: toolInvoice, Args: args(t, map[string]any{"invoice_id": "INV-1001"})})
	wantRefusal(t, err, codes.FailedPrecondition, "grant it with TOOL_TIER_READ")
}

// TestCommitIdempotent: a commit makes one refund; the same operation ID
// again (its preview now stale, as the refund changed the invoice) returns
// the first receipt and writes nothing. The twins: another ID is another
// refund, with its own receipt; the same ID for another refund is refused.
func TestCommitIdempotent(t *testing.T) {
	b, _ := openBilling(t)
	ctx := testCtx(t)
	call := proposed(t, b, refundCall(t, "INV-1001", "40.00"))
	first, err := b.Commit(ctx, call, "op_prop_1")
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	want := map[string]string{"refund_id": "re_1", "invoice_id": "INV-1001", "amount": "40.00", "currency": "EUR",
		"status": "succeeded", "refundable_left": "80.00"}
	for k, v := range want {
		if got := field(first, k); got != v {
			t.Errorf("receipt %s = %q, want %q", k, got, v)
		}
	}
	before := contents(t, b)
	again, err := b.Commit(ctx, call, "op_prop_1")
	if err != nil || !proto.Equal(again, first) {
		t.Fatalf("Commit with the same key: %v, %v; want the first receipt %v", again, err, first)
	}
	if after := contents(t, b); after != before {
		t.Errorf("a repeated commit changed the file:\nbefore:\n%s\nafter:\n%s", before, after)
	}

	second, err := b.Commit(ctx, proposed(t, b, refundCall(t, "INV-1001", "40.00")), "op_prop_2")
	if err != nil {
		t.Fatalf("Commit with another key: %v", err)
	}
	if field(second, "refund_id") != "re_2" || field(second, "refundable_left") != "40.00" {
		t.Errorf("second receipt %v, want re_2 with 40.00 left", second)
	}
	if n := refundsIn(t, b); n != 2 {
		t.Errorf("%d refunds stored, want 2", n)
	}

	_, err = b.Commit(ctx, proposed(t, b, refundCall(t, "INV-1001", "10.00")), "op_prop_1")
	wantRefusal(t, err, codes.FailedPrecondition, "operation op_prop_1 already refunded 40.00 on INV-1001")
}

// TestCommitStalePreview: a refund whose invoice changed between its
// proposal and its commit is refused with FailedPrecondition, naming what
// changed; so is a preview that is not the one Propose gave. The twin is
// TestCommitIdempotent's first commit, whose preview still holds.
func TestCommitStalePreview(t *testing.T) {
	b, _ := openBilling(t)
	ctx := testCtx(t)
	stale := proposed(t, b, refundCall(t, "INV-1001", "40.00"))
	if _, err := b.Commit(ctx, proposed(t, b, refundCall(t, "INV-1001", "100.00")), "op_other"); err != nil {
		t.Fatalf("Commit of another refund: %v", err)
	}
	_, err := b.Commit(ctx, stale, "op_stale")
	wantRefusal(t, err, codes.FailedPrecondition,
		`INV-1001 changed since the refund was approved (refundable_after was "80.00" when approved, is "-20.00" now; refundable_left was "120.00" when approved, is "20.00" now); propose the refund again`)

	forged := proposed(t, b, refundCall(t, "INV-1001", "10.00"))
	forged.Preview.GetStructValue().GetFields()["amount"] = structpb.NewStringValue("1.00")
	_, err = b.Commit(ctx, forged, "op_forged")
	wantRefusal(t, err, codes.FailedPrecondition, `amount was "1.00" when approved, is "10.00" now`)
	if n := refundsIn(t, b); n != 1 {
		t.Errorf("%d refunds stored, want only the other one", n)
	}
}

// TestLookup: a refund's operation ID finds its receipt; the twins: an ID
// never committed is not applied, and a tool the service does not have is
// tools.ErrNoTool.
func TestLookup(t *testing.T) {
	b, _ := openBilling(t)
	ctx := testCtx(t)
	call := proposed(t, b, refundCall(t, "INV-1001", "40.00"))
	if r, applied, err := b.Lookup(ctx, call, "op_prop_1"); err != nil || applied || r != nil {
		t.Fatalf("Lookup before the commit: %v, %v, %v; want not applied", r, applied, err)
	}
	receipt, err := b.Commit(ctx, call, "op_prop_1")
	if err != nil {
		t.Fatal(err)
	}
	if r, applied, err := b.Lookup(ctx, call, "op_prop_1"); err != nil || !applied || !proto.Equal(r, receipt) {
		t.Errorf("Lookup after the commit: %v, %v, %v; want applied with %v", r, applied, err, receipt)
	}
	if r, applied, err := b.Lookup(ctx, call, "op_prop_2"); err != nil || applied || r != nil {
		t.Errorf("Lookup of another key: %v, %v, %v; want not applied", r, applied, err)
	}
	if _, _, err := b.Lookup(ctx, tools.Call{Tool: "invoices.delete"}, "op_prop_1"); !errors.Is(err, tools.ErrNoTool) {
		t.Errorf("Lookup on invoices.delete: %v, want tools.ErrNoTool", err)
	}
}

// TestReopen: what a commit wrote survives closing and opening the file:
// the lookup, the invoice's refunded total, and idempotency (a repeat is
// still answered from the record); the seed does not run again. The twins:
// a file that is not a billing file, or is locked by another handle, is
// refused and left as it was.
func TestReopen(t *testing.T) {
	b, path := openBilling(t)
	ctx := testCtx(t)
	call := proposed(t, b, refundCall(t, "INV-1001", "40.00"))
	receipt, err := b.Commit(ctx, call, "op_prop_1")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	b = reopen(t, path)
	if r, applied, err := b.Lookup(ctx, call, "op_prop_1"); err != nil || !applied || !proto.Equal(r, receipt) {
		t.Errorf("Lookup after reopening: %v, %v, %v; want applied with %v", r, applied, err, receipt)
	}
	out, err := b.Read(ctx, tools.Call{Tool: toolInvoice, Args: args(t, map[string]any{"invoice_id": "INV-1001"})})
	if err != nil || field(out, "refunded") != "40.00" || field(out, "refundable") != "80.00" {
		t.Errorf("INV-1001 after reopening: %v, %v; want 40.00 refunded, 80.00 refundable", out, err)
	}
	if again, err := b.Commit(ctx, call, "op_prop_1"); err != nil || !proto.Equal(again, receipt) {
		t.Errorf("a repeat after reopening: %v, %v; want the first receipt", again, err)
	}
	if n := refundsIn(t, b); n != 1 {
		t.Errorf("%d refunds stored, want 1", n)
	}

	t.Run("locked", func(t *testing.T) {
		if _, err := Open(path); err == nil || !strings.Contains(err.Error(), "locked by another process") {
			t.Errorf("Open of a file in use: %v, want it refused as locked", err)
		}
	})
	t.Run("foreign", func(t *testing.T) {
		foreign := filepath.Join(t.TempDir(), "rein.db")
		db, err := bolt.Open(foreign, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Update(func(tx *bolt.Tx) error {
			_, err := tx.CreateBucket([]byte("runs"))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		before, _ := os.ReadFile(foreign)
		if _, err := Open(foreign); err == nil || !strings.Contains(err.Error(), "not a billing file (it holds buckets [runs])") {
			t.Errorf("Open of a foreign bbolt file: %v, want it refused", err)
		}
		if after, _ := os.ReadFile(foreign); !bytes.Equal(before, after) {
			t.Error("Open changed the foreign file")
		}
	})
	t.Run("not bbolt", func(t *testing.T) {
		text := filepath.Join(t.TempDir(), "notes.txt")
		if err := os.WriteFile(text, bytes.Repeat([]byte("not a database\n"), 1000), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(text); err == nil {
			t.Error("Open of a text file succeeded")
		}
	})
}

// TestRefusalChangesNothing: every refused commit leaves the file as it
// was, byte for byte, its buckets included; the twin: an accepted commit
// adds exactly one refund.
func TestRefusalChangesNothing(t *testing.T) {
	b, path := openBilling(t)
	ctx := testCtx(t)
	if _, err := b.Commit(ctx, proposed(t, b, refundCall(t, "INV-1001", "40.00")), "op_first"); err != nil {
		t.Fatal(err)
	}
	current := func(c tools.Call) tools.Call {
		c.Preview = previewFor(t, b, c)
		return c
	}
	for _, tc := range []struct {
		name string
		call tools.Call
		op   string
		code codes.Code
	}{
		{"above the refundable", current(refundCall(t, "INV-1001", "80.01")), "op_1", codes.InvalidArgument},
		{"stale preview", func() tools.Call {
			c := current(refundCall(t, "INV-1001", "10.00"))
			c.Preview.GetStructValue().GetFields()["refundable_left"] = structpb.NewStringValue("120.00")
			return c
		}(), "op_2", codes.FailedPrecondition},
		{"unpaid invoice", current(refundCall(t, "INV-1003", "10.00")), "op_3", codes.InvalidArgument},
		{"missing invoice", current(refundCall(t, "INV-9", "10.00")), "op_4", codes.InvalidArgument},
		{"key of another refund", current(refundCall(t, "INV-1001", "10.00")), "op_first", codes.FailedPrecondition},
		{"no preview", refundCall(t, "INV-1001", "10.00"), "op_5", codes.InvalidArgument},
		{"bad amount", refundCall(t, "INV-1001", "ten"), "op_6", codes.InvalidArgument},
		{"a read tool", tools.Call{Tool: toolInvoice, Args: args(t, map[string]any{"invoice_id": "INV-1001"})}, "op_7", codes.FailedPrecondition},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, file := contents(t, b), readFile(t, path)
			_, err := b.Commit(ctx, tc.call, tc.op)
			if status.Code(err) != tc.code {
				t.Errorf("Commit: %v (code %v), want %v", err, status.Code(err), tc.code)
			}
			if after := contents(t, b); after != before {
				t.Errorf("the refusal changed the buckets:\nbefore:\n%s\nafter:\n%s", before, after)
			}
			if !bytes.Equal(readFile(t, path), file) {
				t.Error("the refusal changed the file's bytes")
			}
		})
	}

	before := refundsIn(t, b)
	if _, err := b.Commit(ctx, proposed(t, b, refundCall(t, "INV-1001", "80.00")), "op_last"); err != nil {
		t.Fatalf("Commit of the rest: %v", err)
	}
	if n := refundsIn(t, b); n != before+1 {
		t.Errorf("%d refunds after an accepted commit, want %d", n, before+1)
	}
}

// previewFor is the preview the invoice gives c now, whether or not the
// refund is allowed, so that a commit gets past the preview check to the
// rule a test means.
func previewFor(t *testing.T, b *Billing, c tools.Call) *structpb.Value {
	t.Helper()
	a, err := parseRefund(c.Args)
	if err != nil {
		t.Fatal(err)
	}
	var v *structpb.Value
	if err := b.db.View(func(tx *bolt.Tx) error {
		inv, err := loadInvoice(tx, a.invoiceID)
		if err != nil {
			v = structpb.NewStructValue(&structpb.Struct{})
			return nil
		}
		v = previewOf(inv, a)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return v
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
