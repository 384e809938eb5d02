package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/export"
	"github.com/reinhq/rein/internal/tools"
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

// TestGetBlobsAnswersInPartsInOrder: blobs over one answer's bound come in
// several answers, each the blobs asked for in the order asked, as many as
// fit, the next asked for again; together they are every blob, each
// matching its hash. The run's blobs are more than one read's worth.
func TestGetBlobsAnswersInPartsInOrder(t *testing.T) {
	const calls = 80 // 80 observations of 48 KiB: over 3 MiB, and over 64 blobs
	var results []tools.FixtureResult
	replies := make([]*reinv1.ScriptedReply, 0, calls+1)
	for i := range calls {
		text := fmt.Sprintf("%02d", i) + strings.Repeat("observation text ", 48<<10/17)
		results = append(results, tools.FixtureResult{Output: structpb.NewStringValue(text)})
		replies = append(replies, readCall("lookup"))
	}
	replies = append(replies, final("done"))
	s := newTestServer(t, tools.NewFixtures(map[string][]tools.FixtureResult{"lookup": results}))
	c := contract(nil, replies...)
	c.Budget = &reinv1.Budget{MaxSteps: calls + 2, MaxOutputBytes: 64 << 10, MaxContextChars: 8 << 20}
	run := s.start(t, "parts", c)
	refs := export.BlobRefs(s.allEvents(t, run.GetRunId()))
	if len(refs) <= blobsPerRead || run.GetStatus() != reinv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Fatalf("%d blobs referenced (run %s), want more than one read's %d", len(refs), run.GetStatus(), blobsPerRead)
	}
	got := map[string][]byte{}
	answers := 0
	for left := refs; len(left) > 0; answers++ {
		resp, err := s.client.GetBlobs(context.Background(), &reinv1.GetBlobsRequest{RunId: run.GetRunId(), Hashes: left})
		if err != nil {
			t.Fatal(err)
		}
		n, size := len(resp.GetBlobs()), 0
		if n == 0 {
			t.Fatalf("an answer with none of the %d blobs asked for", len(left))
		}
		for i, h := range left[:n] {
			b, ok := resp.GetBlobs()[h]
			if !ok {
				t.Fatalf("answer %d holds %d blobs but not the %d-th asked for: not the first ones, in order", answers, n, i)
			}
			if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != h {
				t.Fatalf("blob %s does not hash to its name", h)
			}
			size += len(b)
			got[h] = b
		}
		if size > maxBlobsBytes && n > 1 {
			t.Fatalf("answer %d holds %d bytes in %d blobs, over the %d bound", answers, size, n, maxBlobsBytes)
		}
		left = left[n:]
	}
	if len(got) != len(refs) || answers < 2 {
		t.Fatalf("%d blobs in %d answers, want all %d in more than one", len(got), answers, len(refs))
	}
}

// TestForkKeepsItsBlobs: a fork holds the blobs its carried events
// reference, as its own: they read through the fork, and stay when the
// parent is deleted (a store keeps a run's blobs with it). The twin: the
// parent's deletion takes its own blobs with it.
func TestForkKeepsItsBlobs(t *testing.T) {
	s := newTestServer(t, fixtures())
	ctx := context.Background()
	run := s.start(t, "parent", contract(nil, readCall("lookup"), final("done")))
	evs := s.allEvents(t, run.GetRunId())
	at := uint64(0)
	for _, ev := range evs {
		if ev.GetToolReturned() != nil && at == 0 {
			at = ev.GetSequence() // the first step's end
		}
	}
	resp, err := s.client.ForkRun(ctx, &reinv1.ForkRunRequest{RunId: run.GetRunId(), AtSequence: at, RequestId: "fork"})
	if err != nil {
		t.Fatal(err)
	}
	fork := resp.GetRun().GetRunId()
	s.watchToEnd(t, fork)
	carried := export.BlobRefs(evs[1:at])
	if len(carried) == 0 {
		t.Fatal("the carried events reference no blob: the test shows nothing")
	}
	if _, err := s.client.DeleteRun(ctx, &reinv1.DeleteRunRequest{RunId: run.GetRunId(), Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	got, err := s.client.GetBlobs(ctx, &reinv1.GetBlobsRequest{RunId: fork, Hashes: carried})
	if err != nil || len(got.GetBlobs()) != len(carried) {
		t.Fatalf("the fork's carried blobs after its parent's deletion: %d of %d, %v", len(got.GetBlobs()), len(carried), err)
	}
	_, err = s.client.GetBlobs(ctx, &reinv1.GetBlobsRequest{RunId: run.GetRunId(), Hashes: carried})
	wantCode(t, err, codes.NotFound)
}
