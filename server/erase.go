package server

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
)

// defaultDeletionPage and maxDeletionPage size ListDeletions' pages.
const (
	defaultDeletionPage = 50
	maxDeletionPage     = 1000
)

// DeleteRun erases a run that ended, of the caller's tenant (another
// tenant's is NotFound, as everywhere).
func (s *runService) DeleteRun(ctx context.Context, req *reinv1.DeleteRunRequest) (*reinv1.DeleteRunResponse, error) {
	if s.keeper == nil {
		return nil, status.Error(codes.Unimplemented, "this server's store cannot delete runs")
	}
	id := s.identity(ctx)
	if req.GetReason() == "" {
		return nil, invalidArgument("reason", "required: say why the run is deleted (it is kept in the deletion record)")
	}
	if _, err := s.load(ctx, req.GetRunId()); err != nil {
		// A run deleted before answers with its record, once more.
		rec, derr := s.keeper.Store.Deletion(ctx, req.GetRunId())
		if derr != nil || rec.GetTenant() != id.Tenant {
			return nil, toStatus(s.log, "DeleteRun", err)
		}
		return &reinv1.DeleteRunResponse{Deletions: []*reinv1.RunDeletion{rec}}, nil
	}
	callInfoFrom(ctx).set(func(c *callInfo) { c.runID = req.GetRunId() })
	recs, err := s.keeper.Erase(ctx, req.GetRunId(), "principal:"+id.ID, req.GetReason(), req.GetTree())
	if err != nil {
		if errors.Is(err, store.ErrLive) {
			return nil, status.Error(codes.FailedPrecondition, err.Error())
		}
		return nil, toStatus(s.log, "DeleteRun", err)
	}
	return &reinv1.DeleteRunResponse{Deletions: recs}, nil
}

// ListDeletions lists the caller's tenant's deletion records.
func (s *runService) ListDeletions(ctx context.Context, req *reinv1.ListDeletionsRequest) (*reinv1.ListDeletionsResponse, error) {
	if s.keeper == nil {
		return nil, status.Error(codes.Unimplemented, "this server's store cannot delete runs")
	}
	id := s.identity(ctx)
	if t := req.GetTenant(); t != "" && t != id.Tenant {
		return nil, status.Errorf(codes.PermissionDenied, "tenant %q: you may list your own tenant's deletions only", t)
	}
	size, err := pageSize(req.GetPageSize(), defaultDeletionPage, maxDeletionPage)
	if err != nil {
		return nil, err
	}
	after, err := decodeToken(req.GetPageToken())
	if err != nil {
		return nil, err
	}
	recs, next, err := s.keeper.Store.Deletions(ctx, id.Tenant, after, size)
	if errors.Is(err, store.ErrInvalidCursor) {
		return nil, invalidArgument("page_token", "not a token this server issued; pass next_page_token unchanged")
	}
	if err != nil {
		return nil, toStatus(s.log, "ListDeletions", err)
	}
	return &reinv1.ListDeletionsResponse{Deletions: recs, NextPageToken: encodeToken(next)}, nil
}
