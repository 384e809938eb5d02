package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/export"
)

// TestGetBlobs: the blobs a run's model_requested events name come back by
// their hashes; a hash the run does not reference is refused, even when
// another run stores it.
func TestGetBlobs(t *testing.T) {
	s := newTestServer(t, fixtures())
	run := s.start(t, "blobs", contract(nil, readCall("invoices.get"), final("done")))
	refs := export.BlobRefs(s.allEvents(t, run.GetRunId()))
	if len(refs) < 3 {
		t.Fatalf("%d blobs referenced by a two-call run, want its parts", len(refs))
	}
	resp, err := s.client.GetBlobs(context.Background(), &reinv1.GetBlobsRequest{RunId: run.GetRunId(), Hashes: refs})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetBlobs()) != len(refs) {
		t.Fatalf("%d blobs back, want %d", len(resp.GetBlobs()), len(refs))
	}
	for h, b := range resp.GetBlobs() {
		if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != h {
			t.Fatalf("blob %s does not hash to its name", h)
		}
	}

	// Another run of the same goal shares its first part, but a hash only
	// this run stores is not the other run's to read.
	other := s.start(t, "other", contract(nil, final("done")))
	theirs := map[string]bool{}
	for _, h := range export.BlobRefs(s.allEvents(t, other.GetRunId())) {
		theirs[h] = true
	}
	for _, h := range refs {
		if theirs[h] {
			continue
		}
		_, err := s.client.GetBlobs(context.Background(), &reinv1.GetBlobsRequest{RunId: other.GetRunId(), Hashes: []string{h}})
		st := wantCode(t, err, codes.InvalidArgument)
		if !strings.Contains(st.Message(), "references no blob") {
			t.Fatalf("message %q, want it to say the run references no such blob", st.Message())
		}
		return
	}
	t.Fatal("every blob of the first run is the second's too: the test shows nothing")
}

func TestGetBlobsRefusesMalformedHashes(t *testing.T) {
	s := newTestServer(t, fixtures())
	run := s.start(t, "malformed", contract(nil, final("done")))
	for _, hashes := range [][]string{nil, {"ABC"}, {strings.Repeat("g", 64)}} {
		_, err := s.client.GetBlobs(context.Background(), &reinv1.GetBlobsRequest{RunId: run.GetRunId(), Hashes: hashes})
		wantCode(t, err, codes.InvalidArgument)
	}
}
