package server

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/reinhq/rein/internal/engine"
	"github.com/reinhq/rein/internal/export"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/storeformat"
	"github.com/reinhq/rein/internal/taskcontract"
)

// toStatus maps a domain error to the gRPC status of docs/design.md §10. It is the one
// place that does: errors are matched with errors.Is/As, context errors pass
// through, and anything unknown becomes Internal with a safe message (the
// detail goes to the log, not the wire).
func toStatus(log *slog.Logger, method string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var fe *taskcontract.FieldError
	switch {
	case errors.As(err, &fe):
		return invalidArgument(fe.Field, fe.Description)
	case errors.Is(err, export.ErrInvalid), errors.Is(err, export.ErrVersion):
		return invalidArgument("export", err.Error())
	case errors.Is(err, store.ErrExists):
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.Is(err, store.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrFenced), errors.Is(err, runstate.ErrSequence):
		return status.Error(codes.Aborted, err.Error())
	case errors.Is(err, engine.ErrForbidden):
		return status.Error(codes.PermissionDenied, err.Error())
	case errors.Is(err, runstate.ErrTerminal), errors.Is(err, runstate.ErrIllegalTransition), errors.Is(err, engine.ErrNotWaiting),
		errors.Is(err, engine.ErrNoExecutor):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, storeformat.ErrNotFinalizable):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, store.ErrLive), errors.Is(err, store.ErrArchived):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, store.ErrInvalidBlob):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, store.ErrDataLoss):
		return status.Error(codes.DataLoss, err.Error())
	case errors.Is(err, store.ErrNoBlob):
		// A run's events name the blob, or nothing would ask for it: the
		// store lost what it should hold.
		return status.Error(codes.DataLoss, err.Error()+": the run's events reference it but the store does not hold it; restore the store from a backup, or export the run from a server that holds it")
	case errors.Is(err, store.ErrDiskFull):
		return exhausted("the server's disk is full: nothing was stored; free space on the server and retry", diskFullRetry)
	case errors.Is(err, store.ErrNoSpace):
		return exhausted("the store's etcd cluster is out of space (its --quota-backend-bytes): nothing was stored, and etcd takes no write until an operator "+
			"compacts and defragments it (etcdctl compaction REV, etcdctl defrag --cluster), then disarms its NOSPACE alarm (etcdctl alarm disarm); "+
			"archiving or deleting runs, or a larger --quota-backend-bytes, keeps it from filling again; retry after that", diskFullRetry)
	case errors.Is(err, store.ErrReadOnly):
		return status.Error(codes.FailedPrecondition, "the server's store is open read-only: it serves reads only")
	case errors.Is(err, engine.ErrToolsUnavailable), errors.Is(err, store.ErrUnavailable):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, store.ErrClosed), errors.Is(err, engine.ErrShuttingDown):
		return status.Error(codes.Unavailable, "the server is shutting down; retry against another server or later")
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	log.Error("internal error", "method", method, "error", err)
	return status.Error(codes.Internal, "internal error; the server log has the details")
}

// diskFullRetry is the RetryInfo of a full disk: freeing space takes a
// person, so a client waits a while, not a moment.
const diskFullRetry = 10 * time.Second

// invalidArgument is InvalidArgument with a BadRequest detail naming field.
func invalidArgument(field, description string) error {
	st := status.New(codes.InvalidArgument, field+": "+description)
	if d, err := st.WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
		{Field: field, Description: description},
	}}); err == nil {
		st = d
	}
	return st.Err()
}
