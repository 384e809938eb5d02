package a2aface

import (
	"context"
	"strconv"
	"strings"

	"github.com/a2aproject/a2a-go/v2/a2a"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// The bounds of a ListTasks call: the tasks a page holds (A2A's default
// and maximum), and the runs one call reads to find them, in pages of
// ListRuns (scanPage runs, at most scanPages of them).
const (
	defaultTasksPage = 50
	maxTasksPage     = 100
	scanPage         = 200
	scanPages        = 5
)

// ListTasks lists the caller's tasks, newest first: the runs ListRuns
// gives its credentials (its tenant's), only those of the context
// contextId names and in the state status names, when given. ListRuns
// cannot filter by context, so the face reads the runs and keeps those
// whose context matches; one call reads at most scanPage*scanPages runs,
// and a page with fewer tasks than asked and a nextPageToken is not the
// end. The token is ListRuns' own with the place in its page.
func (h *handler) ListTasks(ctx context.Context, req *a2a.ListTasksRequest) (*a2a.ListTasksResponse, error) {
	size := req.PageSize
	switch {
	case size == 0:
		size = defaultTasksPage
	case size < 0 || size > maxTasksPage:
		return nil, invalid("pageSize is " + strconv.Itoa(size) + ": give 1 to " + strconv.Itoa(maxTasksPage) + " (or none for " + strconv.Itoa(defaultTasksPage) + ")")
	}
	if len(req.ContextID) > maxContextID {
		return nil, invalid("the contextId is longer than " + strconv.Itoa(maxContextID) + " bytes")
	}
	if req.StatusTimestampAfter != nil {
		return nil, invalid("rein's face does not filter tasks by statusTimestampAfter: filter by contextId or status, or list runs with RunService's ListRuns")
	}
	skip, token, err := parseTasksToken(req.PageToken)
	if err != nil {
		return nil, err
	}
	filter := &reinv1.ListRunsRequest{PageSize: scanPage}
	if req.Status != a2a.TaskStateUnspecified {
		filter.Statuses = statusesOf(req.Status)
		if len(filter.Statuses) == 0 {
			return &a2a.ListTasksResponse{Tasks: []*a2a.Task{}, PageSize: size}, nil
		}
	}
	resp := &a2a.ListTasksResponse{Tasks: []*a2a.Task{}, PageSize: size}
	for range scanPages {
		filter.PageToken = token
		page, err := h.runs().ListRuns(out(ctx), filter)
		if err != nil {
			return nil, fromStatus(err)
		}
		runs := page.GetRuns()
		for i := skip; i < len(runs); i++ {
			if req.ContextID != "" && contextOf(runs[i]) != req.ContextID {
				continue
			}
			if len(resp.Tasks) == size {
				resp.NextPageToken = tasksToken(i, token)
				resp.TotalSize = len(resp.Tasks)
				return resp, nil
			}
			t := task(runs[i])
			if !req.IncludeArtifacts {
				t.Artifacts = nil
			}
			resp.Tasks = append(resp.Tasks, t)
		}
		skip, token = 0, page.GetNextPageToken()
		if token == "" {
			break
		}
	}
	if token != "" {
		resp.NextPageToken = tasksToken(0, token)
	}
	resp.TotalSize = len(resp.Tasks)
	return resp, nil
}

// statusesOf are the run statuses whose task state is s.
func statusesOf(s a2a.TaskState) []reinv1.RunStatus {
	var out []reinv1.RunStatus
	for n := range reinv1.RunStatus_name {
		if st := reinv1.RunStatus(n); st != reinv1.RunStatus_RUN_STATUS_UNSPECIFIED && state(st) == s {
			out = append(out, st)
		}
	}
	return out
}

// tasksToken is the ListTasks page token that resumes at the skip-th run
// of the ListRuns page token names ("" the first).
func tasksToken(skip int, token string) string {
	return strconv.Itoa(skip) + "." + token
}

// parseTasksToken reads a tasksToken; "" is the start.
func parseTasksToken(s string) (skip int, token string, err error) {
	if s == "" {
		return 0, "", nil
	}
	n, token, ok := strings.Cut(s, ".")
	skip, perr := strconv.Atoi(n)
	if !ok || perr != nil || skip < 0 || skip >= scanPage {
		return 0, "", invalid("pageToken " + strconv.Quote(s) + " is not one this face gave: pass a previous answer's nextPageToken as it was, or none to start")
	}
	return skip, token, nil
}
