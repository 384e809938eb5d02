package catalog_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/reinhq/rein/internal/auth"
	"github.com/reinhq/rein/internal/catalog"
)

const refundTask = `{
  "name": "refund",
  "description": "Refund a duplicate charge on an invoice.",
  "input_schema": {
    "type": "object",
    "properties": {"invoice_id": {"type": "string", "pattern": "^INV-[0-9]+$"}, "amount": {"type": "number"}},
    "required": ["invoice_id"],
    "additionalProperties": false
  },
  "tenants": ["acme"],
  "roles": ["operator"],
  "goal": "Refund the duplicate charge.",
  "inputs": {"currency": "EUR"},
  "tools": [{"name": "refunds.create", "tier": "TOOL_TIER_WRITE"}],
  "labels": {"team": "billing"}
}`

func writeDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestLoadAndStart(t *testing.T) {
	dir := writeDir(t, map[string]string{"refund.json": refundTask, "README.md": "not a task"})
	c, err := catalog.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	task, ok := c.Get("refund")
	if !ok || c.Len() != 1 {
		t.Fatalf("catalog holds %v", c.Names())
	}
	if !strings.HasPrefix(task.Digest, "sha256:") || task.Description == "" {
		t.Errorf("task %+v", task)
	}
	in, _ := structpb.NewStruct(map[string]any{"invoice_id": "INV-42"})
	contract, err := task.Contract(in)
	if err != nil {
		t.Fatal(err)
	}
	if contract.GetLabels()[catalog.LabelTask] != "refund" || contract.GetLabels()[catalog.LabelDigest] != task.Digest || contract.GetLabels()["team"] != "billing" {
		t.Errorf("labels %v", contract.GetLabels())
	}
	if got := contract.GetInputs().AsMap(); got["invoice_id"] != "INV-42" || got["currency"] != "EUR" {
		t.Errorf("inputs %v", got)
	}
	// The task's own contract is untouched by a start.
	again, _ := task.Contract(nil)
	if _, leaked := again.GetInputs().AsMap()["invoice_id"]; leaked {
		t.Error("a start's inputs leaked into the task")
	}
}

func TestInputsBreakingTheSchema(t *testing.T) {
	c, err := catalog.Load(writeDir(t, map[string]string{"refund.json": refundTask}))
	if err != nil {
		t.Fatal(err)
	}
	task, _ := c.Get("refund")
	for _, tc := range []struct {
		inputs map[string]any
		field  string
	}{
		{map[string]any{}, "inputs.invoice_id"},
		{map[string]any{"amount": 10}, "inputs.invoice_id"},
		{map[string]any{"invoice_id": 42}, "inputs.invoice_id"},
		{map[string]any{"invoice_id": "42"}, "inputs.invoice_id"},
		{map[string]any{"invoice_id": "INV-1", "amount": "ten"}, "inputs.amount"},
		{map[string]any{"invoice_id": "INV-1", "extra": true}, "inputs.extra"},
	} {
		in, _ := structpb.NewStruct(tc.inputs)
		_, err := task.Contract(in)
		var ie *catalog.InputError
		if !errors.As(err, &ie) || ie.Field != tc.field {
			t.Errorf("inputs %v: error %v, want one on %s", tc.inputs, err, tc.field)
		}
	}
}

func TestListByPrincipal(t *testing.T) {
	open := `{"name": "lookup", "goal": "Look it up."}`
	c, err := catalog.Load(writeDir(t, map[string]string{"refund.json": refundTask, "lookup.json": open}))
	if err != nil {
		t.Fatal(err)
	}
	names := func(p auth.Principal) string {
		var out []string
		for _, task := range c.List(p) {
			out = append(out, task.Name)
		}
		return strings.Join(out, ",")
	}
	for _, tc := range []struct {
		p    auth.Principal
		want string
	}{
		{auth.Principal{ID: "a", Tenant: "acme", Roles: []auth.Role{auth.Operator}}, "lookup,refund"},
		{auth.Principal{ID: "b", Tenant: "acme", Roles: []auth.Role{auth.Admin}}, "lookup,refund"},
		{auth.Principal{ID: "c", Tenant: "acme", Roles: []auth.Role{auth.Viewer}}, "lookup"},
		{auth.Principal{ID: "d", Tenant: "other", Roles: []auth.Role{auth.Operator}}, "lookup"},
	} {
		if got := names(tc.p); got != tc.want {
			t.Errorf("%s sees %q, want %q", tc.p.ID, got, tc.want)
		}
	}
}

func TestBadFilesNameTheirLine(t *testing.T) {
	for _, tc := range []struct {
		name, body, want string
	}{
		{"syntax", "{\n  \"name\": \"x\",\n  \"goal\": \"g\"\n  \"tools\": []\n}", "line 4"},
		{"no name", `{"goal": "g"}`, `no "name"`},
		{"bad name", "{\n\"goal\": \"g\",\n\"name\": \"Has Space\"}", "line 3"},
		{"unknown contract field", "{\"name\": \"x\",\n\"goal\": \"g\",\n\"gaol\": 1}", "line 3"},
		{"unknown nested field", "{\"name\": \"x\",\n\"goal\": \"g\",\n\"budget\": {\n \"max_stepz\": 1}}", "line 4"},
		{"bad schema type", "{\"name\": \"x\", \"goal\": \"g\",\n\"input_schema\": {\"type\": \"string\"}}", "line 2"},
		{"bad role", "{\"name\": \"x\", \"goal\": \"g\",\n\n\"roles\": [\"boss\"]}", "line 3"},
		{"invalid contract", `{"name": "x", "goal": ""}`, "goal"},
		{"twice", "{\"name\": \"x\",\n\"name\": \"y\", \"goal\": \"g\"}", "line 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeDir(t, map[string]string{"a.json": tc.body})
			_, err := catalog.Load(dir)
			if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "a.json")) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want the path and %q", err, tc.want)
			}
		})
	}
	dir := writeDir(t, map[string]string{"a.json": `{"name": "x", "goal": "g"}`, "b.json": `{"name": "x", "goal": "h"}`})
	if _, err := catalog.Load(dir); err == nil || !strings.Contains(err.Error(), "already defined") {
		t.Errorf("two tasks of one name: %v", err)
	}
}

func TestReloadKeepsTheOldCatalogOnABadFile(t *testing.T) {
	dir := writeDir(t, map[string]string{"refund.json": refundTask})
	h, err := catalog.NewHolder(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "lookup.json"), []byte(`{"name": "lookup", "goal": "g"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if c, err := h.Reload(); err != nil || c.Len() != 2 || h.Current().Len() != 2 {
		t.Fatalf("reload: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "broken.json"), []byte(`{"name": `), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Reload(); err == nil || !strings.Contains(err.Error(), "broken.json") {
		t.Fatalf("a bad file was not refused: %v", err)
	}
	if got := h.Current().Names(); strings.Join(got, ",") != "lookup,refund" {
		t.Errorf("after a refused reload the catalog is %v", got)
	}
}
