package server

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/auth"
	"github.com/reinhq/rein/internal/catalog"
)

// The catalog of named tasks (rein serve --tasks; docs/operating.md): the
// RPCs that read it, and the contract StartRun makes of a task and its
// inputs.

func (s *runService) ListTasks(ctx context.Context, _ *reinv1.ListTasksRequest) (*reinv1.ListTasksResponse, error) {
	out := &reinv1.ListTasksResponse{}
	for _, t := range s.catalog().List(s.identity(ctx)) {
		out.Tasks = append(out.Tasks, taskProto(t))
	}
	return out, nil
}

func (s *runService) GetTask(ctx context.Context, req *reinv1.GetTaskRequest) (*reinv1.GetTaskResponse, error) {
	t, err := s.task(s.identity(ctx), req.GetName())
	if err != nil {
		return nil, toStatus(s.log, "GetTask", err)
	}
	return &reinv1.GetTaskResponse{Task: taskProto(t)}, nil
}

// catalog is the catalog in force.
func (s *runService) catalog() *catalog.Catalog {
	if s.tasks == nil {
		empty, _ := catalog.NewHolder("")
		return empty.Current()
	}
	return s.tasks.Current()
}

// task is the task name that p may start; any other is NotFound, whether
// the catalog lacks it or p may not see it.
func (s *runService) task(p auth.Principal, name string) (*catalog.Task, error) {
	t, ok := s.catalog().Get(name)
	if !ok || !t.Allows(p) {
		return nil, status.Errorf(codes.NotFound, "task %q: %v among the tasks this caller may start; ListTasks (rein tasks) lists them", name, catalog.ErrNoTask)
	}
	return t, nil
}

// contractOf is the contract a StartRun asks for: its own, or its task's
// with its inputs.
func (s *runService) contractOf(p auth.Principal, req *reinv1.StartRunRequest) (*reinv1.TaskContract, error) {
	if req.GetTask() == "" {
		if req.GetContract() == nil {
			return nil, invalidArgument("contract", "a run starts from contract (a task contract) or from task (the name of a catalog task, which rein tasks lists): give one")
		}
		if req.GetInputs() != nil {
			return nil, invalidArgument("inputs", "inputs go with a task; a contract carries its own inputs")
		}
		return req.GetContract(), nil
	}
	if req.GetContract() != nil {
		return nil, invalidArgument("task", "give contract or task, not both: a task brings its own contract")
	}
	t, err := s.task(p, req.GetTask())
	if err != nil {
		return nil, err
	}
	c, err := t.Contract(req.GetInputs())
	var ie *catalog.InputError
	if errors.As(err, &ie) {
		return nil, invalidArgument(ie.Field, ie.Reason)
	}
	return c, err
}

// taskProto is t as the API gives it.
func taskProto(t *catalog.Task) *reinv1.Task {
	return &reinv1.Task{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema, Digest: t.Digest}
}
