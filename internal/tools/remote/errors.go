package remote

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/reinhq/rein/internal/tools"
)

// callError is a failed call to a tool service. Its message says what went
// wrong and what to do; its causes are what errors.Is and status.Code see:
// the gRPC status always, and a context error or tools.ErrNoTool when the
// code means one.
type callError struct {
	msg    string
	causes []error
}

func (e *callError) Error() string   { return e.msg }
func (e *callError) Unwrap() []error { return e.causes }

// fail maps the error of a call to method (on tool, "" for ListTools) to
// one that names the service and says what to do. It is the client's one
// place that reads gRPC codes.
func (c *Client) fail(ctx context.Context, method, tool string, err error) error {
	st := status.Convert(err)
	where := fmt.Sprintf("tool server %s at %s", c.name, c.addr)
	what := method
	if tool != "" {
		what += " " + tool
	}
	wrap := func(format string, args ...any) error {
		return &callError{msg: fmt.Sprintf(format, args...), causes: []error{err}}
	}
	// A commit the service refused wrote nothing: a known outcome, which
	// rein tells the model.
	if method == "CommitWrite" && (st.Code() == codes.FailedPrecondition || st.Code() == codes.InvalidArgument) {
		return &callError{msg: fmt.Sprintf("the %s refused the write: %s", where, st.Message()), causes: []error{err, tools.ErrRefused}}
	}
	switch st.Code() {
	case codes.Unavailable:
		return wrap("the %s is unreachable: start it or check --tool-server; rein re-dials it, so the call may be tried again in a moment (%s: %s)", where, what, st.Message())
	case codes.DeadlineExceeded, codes.Canceled:
		cause := ctx.Err()
		if cause == nil && st.Code() == codes.DeadlineExceeded {
			cause = context.DeadlineExceeded
		}
		if cause == nil {
			return wrap("%s: %s was cancelled: %s", where, what, st.Message())
		}
		how := "did not answer before the call's deadline"
		if errors.Is(cause, context.Canceled) {
			how = "was cancelled"
		}
		return &callError{msg: fmt.Sprintf("%s: %s %s (%v)", where, what, how, cause), causes: []error{err, cause}}
	case codes.NotFound:
		return &callError{
			msg:    fmt.Sprintf("the %s has no tool %q: %s", where, tool, st.Message()),
			causes: []error{err, tools.ErrNoTool},
		}
	case codes.InvalidArgument:
		// Written for the model, which reads it and can fix its call.
		return wrap("%s", st.Message())
	case codes.Unimplemented:
		if method == "LookupWrite" {
			return &callError{
				msg:    fmt.Sprintf("the %s cannot look writes up (it does not implement LookupWrite)", where),
				causes: []error{err, tools.ErrNoLookup},
			}
		}
		return wrap("the %s does not implement %s: upgrade it, or grant the tool from another server (%s)", where, method, st.Message())
	case codes.FailedPrecondition, codes.PermissionDenied, codes.Unauthenticated, codes.Aborted:
		return wrap("the %s refused %s: %s", where, what, st.Message())
	case codes.ResourceExhausted:
		return wrap("the %s is over a limit and refused %s: %s; try again later", where, what, st.Message())
	}
	return wrap("%s: %s failed: %s (%s)", where, what, st.Message(), st.Code())
}

// toStatus maps an executor's error to the status the service answers with.
// It is the server's one place that chooses codes:
//
//   - an error that carries a gRPC status keeps it: an executor written for
//     a tool service picks its code (InvalidArgument for arguments the model
//     must fix, FailedPrecondition for a world that moved);
//   - tools.ErrNoTool is NotFound, the one meaning NotFound has here;
//   - tools.ErrRefused (a commit that wrote nothing) is FailedPrecondition;
//   - context errors are their codes;
//   - anything else is Unknown with the error's message. Unlike rein's own
//     API, the message is not hidden: a tool's error is its result, which
//     the model reads (docs/design.md §3: an error is an observation too).
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case errors.Is(err, tools.ErrNoTool):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, tools.ErrRefused):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	}
	return status.Error(codes.Unknown, err.Error())
}
