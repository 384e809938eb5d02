package a2a_test

// Tests of rein's A2A client against a second rein node serving A2A
// in-process (as internal/a2aface's tests start one): the refund example
// as a catalog task whose write the remote's approver approves, and a
// task held on a gate the test opens, to cut the calling node mid-call.
// Nothing sleeps: the tests wait on the runs' events and the gate, under
// deadlines.

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/reinhq/rein/internal/a2aface"
	"github.com/reinhq/rein/internal/tools"
	a2a "github.com/reinhq/rein/internal/tools/a2a"
)

func TestOpenFailures(t *testing.T) {
	ctx := deadline(t)
	r := startRemote(t)
	if _, err := a2a.Open(ctx, "remote", r.url, a2a.Options{Token: "wrong-token"}); err == nil || !strings.Contains(err.Error(), "token") {
		t.Errorf("a refused token: Open = %v, want an error that names the token", err)
	}
	down := httptest.NewServer(http.NotFoundHandler())
	url := down.URL
	down.Close()
	if _, err := a2a.Open(ctx, "remote", url, a2a.Options{}); err == nil {
		t.Error("a remote that is down: Open succeeded")
	}
}

// TestCallFailures are the failure twins of a call: an unknown skill, and
// a remote that went down after Open.
func TestCallFailures(t *testing.T) {
	ctx := deadline(t)
	r := startRemote(t)
	c := open(t, ctx, r, "starter-token")
	args, _ := structpb.NewStruct(map[string]any{"invoice_id": "INV-42"})
	if _, err := c.Read(ctx, tools.Call{RunID: "run_x", CallID: "c1", Tool: "remote.nope", Args: args}); !errors.Is(err, tools.ErrNoTool) {
		t.Errorf("an unknown skill: Read = %v, want ErrNoTool", err)
	}
	r.hs.Close()
	if _, err := c.Read(ctx, tools.Call{RunID: "run_x", CallID: "c2", Tool: "remote.refund", Args: args}); err == nil {
		t.Error("a remote that is down: Read succeeded")
	}
}

// TestList offers a tool per skill with the input schema the face writes,
// and the task tool; the card's extension URI is the face's.
func TestList(t *testing.T) {
	if a2a.InputSchemaExtension != a2aface.InputSchemaExtension {
		t.Fatalf("the client reads %s, the face writes %s", a2a.InputSchemaExtension, a2aface.InputSchemaExtension)
	}
	ctx := deadline(t)
	r := startRemote(t)
	specs, err := open(t, ctx, r, "starter-token").List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]*structpb.Struct{}
	for _, s := range specs {
		names[s.Name] = s.InputSchema
	}
	for _, want := range []string{"remote.refund", "remote.gated", "remote.task"} {
		if _, ok := names[want]; !ok {
			t.Errorf("no tool %s in %v", want, names)
		}
	}
	if names["remote.refund"].GetFields()["required"].GetListValue().GetValues()[0].GetStringValue() != "invoice_id" {
		t.Errorf("remote.refund's schema is %v, want the task's input schema", names["remote.refund"])
	}
}
