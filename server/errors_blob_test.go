package server

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/reinhq/rein/internal/store"
)

// TestMissingBlobStatus: a blob a run's events reference that the store
// does not hold is DataLoss naming it and what to do, not Internal. The
// twin: a blob refused as invalid stays InvalidArgument.
func TestMissingBlobStatus(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	err := toStatus(log, "GetBlobs", fmt.Errorf("blob abc123 of run r: %w", store.ErrNoBlob))
	st := wantCode(t, err, codes.DataLoss)
	for _, want := range []string{"abc123", "reference", "backup"} {
		if !strings.Contains(st.Message(), want) {
			t.Errorf("message %q does not say %q", st.Message(), want)
		}
	}
	wantCode(t, toStatus(log, "ImportRun", fmt.Errorf("blob x: %w", store.ErrInvalidBlob)), codes.InvalidArgument)
}
