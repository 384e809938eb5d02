package server

import (
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/catalog"
)

// taskCatalog is a catalog of two tasks: "lookup", for anyone, and
// "refund", for acme's operators, whose inputs need an invoice_id.
func taskCatalog(t *testing.T) *catalog.Holder {
	t.Helper()
	model, err := protojson.Marshal(&reinv1.ModelSpec{Provider: "script", Script: []*reinv1.ScriptedReply{final("done")}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string]string{
		"lookup.json": `{"name": "lookup", "description": "Look it up.", "goal": "look", "model": ` + string(model) + `}`,
		"refund.json": `{"name": "refund", "description": "Refund.", "tenants": ["acme"], "roles": ["operator"],
  "input_schema": {"type": "object", "properties": {"invoice_id": {"type": "string"}}, "required": ["invoice_id"]},
  "goal": "refund", "tools": [{"name": "lookup", "tier": "TOOL_TIER_READ"}], "model": ` + string(model) + `}`,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	h, err := catalog.NewHolder(dir)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestListTasksByPrincipal(t *testing.T) {
	s := newTCPServer(t, Config{Directory: testDirectory(t), Tasks: taskCatalog(t)})
	ctx := context.Background()
	for who, want := range map[string]int{"a-operator": 2, "a-viewer": 1, "b-operator": 1, "a-admin": 2} {
		resp, err := s.client.ListTasks(ctx, &reinv1.ListTasksRequest{}, as(who))
		if err != nil || len(resp.GetTasks()) != want {
			t.Errorf("%s lists %v (%v), want %d tasks", who, resp.GetTasks(), err, want)
		}
	}
	got, err := s.client.GetTask(ctx, &reinv1.GetTaskRequest{Name: "refund"}, as("a-operator"))
	if err != nil || got.GetTask().GetInputSchema() == nil || got.GetTask().GetDigest() == "" {
		t.Errorf("GetTask refund: %v, %v", got, err)
	}
	// Another tenant's task is missing, not forbidden.
	if _, err := s.client.GetTask(ctx, &reinv1.GetTaskRequest{Name: "refund"}, as("b-operator")); status.Code(err) != codes.NotFound {
		t.Errorf("GetTask of another tenant's task: %v, want NotFound", err)
	}
}

func TestStartRunFromATask(t *testing.T) {
	tasks := taskCatalog(t)
	s := newTCPServer(t, Config{Directory: testDirectory(t), Tasks: tasks})
	ctx := context.Background()
	in, _ := structpb.NewStruct(map[string]any{"invoice_id": "INV-42"})
	resp, err := s.client.StartRun(ctx, &reinv1.StartRunRequest{RequestId: rand.Text(), Task: "refund", Inputs: in}, as("a-operator"))
	if err != nil {
		t.Fatal(err)
	}
	task, _ := tasks.Current().Get("refund")
	labels := resp.GetRun().GetContract().GetLabels()
	if labels[catalog.LabelTask] != "refund" || labels[catalog.LabelDigest] != task.Digest {
		t.Errorf("the run's labels %v do not record the task", labels)
	}
	if resp.GetRun().GetContract().GetInputs().AsMap()["invoice_id"] != "INV-42" {
		t.Errorf("the run's inputs %v", resp.GetRun().GetContract().GetInputs())
	}
	if run := s.waitRest(t, "a-operator", resp.GetRun().GetRunId(), 0); run.GetStatus() != stCompleted {
		t.Errorf("the run ended %v", run.GetStatus())
	}
}

func TestStartRunFromATaskRefused(t *testing.T) {
	s := newTCPServer(t, Config{Directory: testDirectory(t), Tasks: taskCatalog(t)})
	ctx := context.Background()
	bad, _ := structpb.NewStruct(map[string]any{"invoice_id": 42})
	none, _ := structpb.NewStruct(map[string]any{})
	for _, tc := range []struct {
		name  string
		who   string
		req   *reinv1.StartRunRequest
		code  codes.Code
		field string
	}{
		{"inputs break the schema", "a-operator", &reinv1.StartRunRequest{Task: "refund", Inputs: bad}, codes.InvalidArgument, "inputs.invoice_id"},
		{"a required input missing", "a-operator", &reinv1.StartRunRequest{Task: "refund", Inputs: none}, codes.InvalidArgument, "inputs.invoice_id"},
		{"another tenant's task", "b-operator", &reinv1.StartRunRequest{Task: "refund"}, codes.NotFound, ""},
		{"no such task", "a-operator", &reinv1.StartRunRequest{Task: "nope"}, codes.NotFound, ""},
		{"both a task and a contract", "a-operator", &reinv1.StartRunRequest{Task: "lookup", Contract: contract(nil, final("x"))}, codes.InvalidArgument, "task"},
		{"neither", "a-operator", &reinv1.StartRunRequest{}, codes.InvalidArgument, "contract"},
		{"inputs with a contract", "a-operator", &reinv1.StartRunRequest{Contract: contract(nil, final("x")), Inputs: none}, codes.InvalidArgument, "inputs"},
		{"a viewer", "a-viewer", &reinv1.StartRunRequest{Task: "lookup"}, codes.PermissionDenied, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.RequestId = rand.Text()
			_, err := s.client.StartRun(ctx, tc.req, as(tc.who))
			if status.Code(err) != tc.code {
				t.Fatalf("StartRun: %v, want %v", err, tc.code)
			}
			if tc.field != "" && violationField(err) != tc.field {
				t.Errorf("the error names %q, want %q: %v", violationField(err), tc.field, err)
			}
			runs, err := s.client.ListRuns(ctx, &reinv1.ListRunsRequest{}, as("a-admin"))
			if err != nil || len(runs.GetRuns()) != 0 {
				t.Errorf("a refused start stored runs: %v, %v", runs.GetRuns(), err)
			}
		})
	}
}

// violationField is the field a BadRequest detail of err names.
func violationField(err error) string {
	for _, d := range status.Convert(err).Details() {
		if br, ok := d.(*errdetails.BadRequest); ok && len(br.GetFieldViolations()) > 0 {
			return br.GetFieldViolations()[0].GetField()
		}
	}
	return ""
}

// TestStartRunFromATaskWarns: a task whose proposal_ttl outlives its
// timeout starts with the same warning a full contract gets, since every
// pending proposal of its runs ends at the run's deadline; the twin, a
// task without such a TTL, starts with none.
func TestStartRunFromATaskWarns(t *testing.T) {
	model, err := protojson.Marshal(&reinv1.ModelSpec{Provider: "script", Script: []*reinv1.ScriptedReply{final("done")}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, body := range map[string]string{
		"slow.json": `{"name": "slow", "description": "Slow.", "goal": "slow", "model": ` + string(model) + `,
  "budget": {"timeout": "60s"}, "approval": {"proposal_ttl": "3600s"}}`,
		"quick.json": `{"name": "quick", "description": "Quick.", "goal": "quick", "model": ` + string(model) + `,
  "budget": {"timeout": "3600s"}, "approval": {"proposal_ttl": "60s"}}`,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tasks, err := catalog.NewHolder(dir)
	if err != nil {
		t.Fatal(err)
	}
	s := newTCPServer(t, Config{Directory: testDirectory(t), Tasks: tasks})
	for task, warns := range map[string]bool{"slow": true, "quick": false} {
		resp, err := s.client.StartRun(context.Background(), &reinv1.StartRunRequest{RequestId: rand.Text(), Task: task}, as("a-operator"))
		if err != nil {
			t.Fatal(err)
		}
		w := resp.GetWarnings()
		if got := len(w) == 1 && strings.Contains(w[0], "outlives contract.budget.timeout"); got != warns {
			t.Errorf("task %s started with warnings %q; want a warning %v", task, w, warns)
		}
	}
}
