package client

import (
	"context"
	"io"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestLostAnswerIsUnavailable: a unary call that grpc-go ends with a bare
// io.EOF (the connection closed as the request went out) reaches the
// caller as Unavailable, which Retry and the callers' retries cover. The
// twin: any other answer, an error or none, passes unchanged.
func TestLostAnswerIsUnavailable(t *testing.T) {
	invoker := func(err error) grpc.UnaryInvoker {
		return func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return err }
	}
	err := honourRetryInfo(t.Context(), "/rein.v1.RunService/StartRun", nil, nil, nil, invoker(io.EOF))
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "EOF") {
		t.Fatalf("a call ended by io.EOF: %v, want Unavailable saying so", err)
	}
	notFound := status.Error(codes.NotFound, "run x not found")
	for _, want := range []error{nil, notFound, io.ErrUnexpectedEOF} {
		if got := honourRetryInfo(t.Context(), "/rein.v1.RunService/GetRun", nil, nil, nil, invoker(want)); got != want {
			t.Errorf("a call answered %v: got %v, want it unchanged", want, got)
		}
	}
}
