package step

import (
	"strings"
	"testing"
)

// invoiceSchema is the schema: a required string invoice_id, and
// nothing else (internal/engine's schema tests run a step against it).
var invoiceSchema = map[string]any{
	"type":                 "object",
	"properties":           map[string]any{"invoice_id": map[string]any{"type": "string"}},
	"required":             []any{"invoice_id"},
	"additionalProperties": false,
}

// A refusal's words do not depend on map order: replay compares them.
func TestSchemaRefusalIsStable(t *testing.T) {
	is, err := compileSchema(mustStruct(t, invoiceSchema))
	if err != nil {
		t.Fatal(err)
	}
	args := mustStruct(t, map[string]any{"a": 1, "b": 2, "c": 3, "d": 4, "e": 5, "invoice_id": 7})
	first := is.mismatch("search", args)
	for range 50 {
		if got := is.mismatch("search", args); got != first {
			t.Fatalf("refusal changed:\n%s\n%s", first, got)
		}
	}
	// The fallback to the validator's words sorts its list of fields.
	loose, err := compileSchema(mustStruct(t, map[string]any{"additionalProperties": false, "properties": map[string]any{}, "minProperties": 1}))
	if err != nil {
		t.Fatal(err)
	}
	if got := validatorText(loose.resolved.Validate(map[string]any{"z": 1.0, "a": 1.0, "m": 1.0})); !strings.Contains(got, `["a" "m" "z"]`) {
		t.Errorf("validator text %q does not list the fields sorted", got)
	}
}
