package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
)

// retryDelay is the google.rpc.RetryInfo delay err carries, and whether it
// carries one.
func retryDelay(err error) (time.Duration, bool) {
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}

// TestResourceExhaustedCarriesRetryInfo: a refusal over the rate, unary or
// a stream, carries a RetryInfo with the wait the principal's bucket needs
// for one more call (at 1 call/s, within a second), and a full disk one
// with a fixed wait. The twin: a call within the burst is served.
func TestResourceExhaustedCarriesRetryInfo(t *testing.T) {
	s := newTCPServer(t, Config{Directory: testDirectory(t), RatePerSecond: 1, RateBurst: 2})
	ctx := context.Background()
	for i := range 2 {
		if _, err := s.client.ListRuns(ctx, &reinv1.ListRunsRequest{}, as("a-viewer")); err != nil {
			t.Fatalf("call %d within the burst: %v", i+1, err)
		}
	}
	_, err := s.client.ListRuns(ctx, &reinv1.ListRunsRequest{}, as("a-viewer"))
	wantCode(t, err, codes.ResourceExhausted)
	d, ok := retryDelay(err)
	if !ok || d <= 0 || d > time.Second {
		t.Fatalf("unary refusal %v: RetryInfo %v (present %v), want a delay in (0, 1s]", err, d, ok)
	}
	stream, err := s.client.WatchRuns(ctx, &reinv1.WatchRunsRequest{}, as("a-viewer"))
	if err == nil {
		_, err = stream.Recv()
	}
	wantCode(t, err, codes.ResourceExhausted)
	if d, ok := retryDelay(err); !ok || d <= 0 || d > time.Second {
		t.Fatalf("stream refusal %v: RetryInfo %v (present %v), want a delay in (0, 1s]", err, d, ok)
	}

	err = toStatus(slog.New(slog.NewTextHandler(io.Discard, nil)), "StartRun", fmt.Errorf("append: %w", store.ErrDiskFull))
	wantCode(t, err, codes.ResourceExhausted)
	if d, ok := retryDelay(err); !ok || d != diskFullRetry {
		t.Fatalf("disk full %v: RetryInfo %v (present %v), want %v", err, d, ok, diskFullRetry)
	}
}
