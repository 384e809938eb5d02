package a2aface_test

import (
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

// TestListTasks: ListTasks by context finds the task a message of that
// context started, and only the caller's tenant's; without a context it
// pages through the caller's tasks; a status filter keeps that state.
func TestListTasks(t *testing.T) {
	f := startFace(t)
	ctx := as(deadline(t), "starter")
	c, _ := f.client(t, ctx)
	send := func(contextID string) *a2a.Task {
		t.Helper()
		m := refundMessage()
		m.ContextID = contextID
		res, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: m, Config: &a2a.SendMessageConfig{ReturnImmediately: true}})
		if err != nil {
			t.Fatal(err)
		}
		return res.(*a2a.Task)
	}
	first, second := send("ctx-first"), send("ctx-second")
	ids := func(resp *a2a.ListTasksResponse) []string {
		var out []string
		for _, task := range resp.Tasks {
			out = append(out, string(task.ID))
		}
		return out
	}
	list := func(who string, req *a2a.ListTasksRequest) *a2a.ListTasksResponse {
		t.Helper()
		resp, err := c.ListTasks(as(deadline(t), who), req)
		if err != nil {
			t.Fatalf("ListTasks %+v as %s: %v", req, who, err)
		}
		return resp
	}

	got := list("starter", &a2a.ListTasksRequest{ContextID: "ctx-first"})
	if len(got.Tasks) != 1 || got.Tasks[0].ID != first.ID || got.Tasks[0].ContextID != "ctx-first" || got.NextPageToken != "" {
		t.Errorf("ListTasks of ctx-first: %v (next %q), want [%s]", ids(got), got.NextPageToken, first.ID)
	}
	if got := list("clerk", &a2a.ListTasksRequest{ContextID: "ctx-second"}); len(got.Tasks) != 1 || got.Tasks[0].ID != second.ID {
		t.Errorf("ListTasks of ctx-second by a principal of the same tenant: %v, want [%s]", ids(got), second.ID)
	}
	if got := list("starter", &a2a.ListTasksRequest{ContextID: "ctx-none"}); len(got.Tasks) != 0 {
		t.Errorf("ListTasks of a context with no message: %v, want none", ids(got))
	}

	// Paged: newest first, one a page, the token carried.
	page := list("starter", &a2a.ListTasksRequest{PageSize: 1})
	if len(page.Tasks) != 1 || page.Tasks[0].ID != second.ID || page.NextPageToken == "" {
		t.Fatalf("page 1: %v (next %q), want [%s] and a next page", ids(page), page.NextPageToken, second.ID)
	}
	page = list("starter", &a2a.ListTasksRequest{PageSize: 1, PageToken: page.NextPageToken})
	if len(page.Tasks) != 1 || page.Tasks[0].ID != first.ID || page.NextPageToken != "" {
		t.Errorf("page 2: %v (next %q), want [%s] and no next page", ids(page), page.NextPageToken, first.ID)
	}

	if _, err := c.CancelTask(ctx, &a2a.CancelTaskRequest{ID: second.ID}); err != nil {
		t.Fatal(err)
	}
	if got := list("starter", &a2a.ListTasksRequest{Status: a2a.TaskStateCanceled}); len(got.Tasks) != 1 || got.Tasks[0].ID != second.ID {
		t.Errorf("ListTasks of canceled tasks: %v, want [%s]", ids(got), second.ID)
	}
}

// TestListTasksRefusals are ListTasks' failure twins: another tenant's
// context holds nothing for the caller, and bounds are refused.
func TestListTasksRefusals(t *testing.T) {
	f := startFace(t)
	ctx := as(deadline(t), "starter")
	c, _ := f.client(t, ctx)
	m := refundMessage()
	m.ContextID = "ctx-acme"
	if _, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: m, Config: &a2a.SendMessageConfig{ReturnImmediately: true}}); err != nil {
		t.Fatal(err)
	}
	other := as(deadline(t), "other")
	for _, req := range []*a2a.ListTasksRequest{{ContextID: "ctx-acme"}, {}} {
		got, err := c.ListTasks(other, req)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Tasks) != 0 {
			t.Errorf("another tenant's ListTasks %+v found %d tasks of acme", req, len(got.Tasks))
		}
	}
	for _, tc := range []struct {
		req  *a2a.ListTasksRequest
		want string
	}{
		{&a2a.ListTasksRequest{PageSize: 101}, "pageSize"},
		{&a2a.ListTasksRequest{PageToken: "not a token"}, "pageToken"},
		{&a2a.ListTasksRequest{PageToken: "9999."}, "pageToken"},
		{&a2a.ListTasksRequest{ContextID: strings.Repeat("c", 129)}, "contextId"},
	} {
		if _, err := c.ListTasks(ctx, tc.req); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ListTasks %+v: %v, want a refusal naming %s", tc.req, err, tc.want)
		}
	}
}
