package tools

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"
)

// A fixture's preview and receipt render the call's arguments; a string
// with no action is returned as written.
func TestFixtureTemplates(t *testing.T) {
	f, err := ParseFixtures([]byte(`{"refunds.create": [{"preview": {"amount": "{{.amount}}", "charge": "ch_2"}, "receipt": {"refunded": "{{.amount}} {{.currency}}"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	args, _ := structpb.NewStruct(map[string]any{"amount": "600.00", "currency": "EUR"})
	call := Call{RunID: "run_1", Tool: "refunds.create", Args: args}
	preview, err := f.Propose(context.Background(), call)
	if err != nil || preview.GetStructValue().GetFields()["amount"].GetStringValue() != "600.00" || preview.GetStructValue().GetFields()["charge"].GetStringValue() != "ch_2" {
		t.Fatalf("preview %v, %v; want amount 600.00 and charge ch_2", preview, err)
	}
	receipt, err := f.Commit(context.Background(), call, "op_1")
	if err != nil || receipt.GetStructValue().GetFields()["refunded"].GetStringValue() != "600.00 EUR" {
		t.Fatalf("receipt %v, %v; want refunded 600.00 EUR", receipt, err)
	}
}

// The twins: a template that names an argument the call lacks cannot
// preview, and one that does not parse is refused when the file is read.
func TestFixtureTemplateRefusals(t *testing.T) {
	f, err := ParseFixtures([]byte(`{"refunds.create": [{"preview": {"amount": "{{.amount}}"}, "receipt": {}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	args, _ := structpb.NewStruct(map[string]any{"currency": "EUR"})
	if _, err := f.Propose(context.Background(), Call{Tool: "refunds.create", Args: args}); err == nil || !strings.Contains(err.Error(), "cannot preview") {
		t.Errorf("a preview of arguments without amount: %v, want an error that it cannot preview", err)
	}
	if _, err := ParseFixtures([]byte(`{"refunds.create": [{"preview": {"amount": "{{.amount"}, "receipt": {}}]}`)); err == nil || !strings.Contains(err.Error(), "fixtures.refunds.create[0].preview") {
		t.Errorf("a template that does not parse: %v, want a refusal naming the field", err)
	}
}
