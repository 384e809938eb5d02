package server

import (
	"context"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// SteerRun records a person's message to a running run, for its next
// model call.
func (s *runService) SteerRun(ctx context.Context, req *reinv1.SteerRunRequest) (*reinv1.SteerRunResponse, error) {
	if _, err := s.load(ctx, req.GetRunId()); err != nil {
		return nil, toStatus(s.log, "SteerRun", err)
	}
	st, created, err := s.engine.Steer(ctx, req.GetRunId(), req.GetText(), req.GetRequestId(), s.identity(ctx).ID)
	if err != nil {
		return nil, toStatus(s.log, "SteerRun", err)
	}
	return &reinv1.SteerRunResponse{Run: st.Proto(true), Created: created}, nil
}

// RaiseBudget raises the budget of a run paused on it and carries it on.
func (s *runService) RaiseBudget(ctx context.Context, req *reinv1.RaiseBudgetRequest) (*reinv1.RaiseBudgetResponse, error) {
	if _, err := s.load(ctx, req.GetRunId()); err != nil {
		return nil, toStatus(s.log, "RaiseBudget", err)
	}
	st, err := s.engine.RaiseBudget(ctx, req, s.identity(ctx).ID)
	if err != nil {
		return nil, toStatus(s.log, "RaiseBudget", err)
	}
	return &reinv1.RaiseBudgetResponse{Run: st.Proto(true)}, nil
}
