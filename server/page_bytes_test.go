package server

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// TestListRunsPageIsBoundedInBytes: runs of about 900 KiB each (large
// contract inputs) are listed across pages that each stay under maxPageBytes (plus
// one run), and every run is listed once; today the default page of 50
// held them all and passed the 4 MiB message limit, so the tenant's
// listing failed. The twin: small runs fill one page, as before.
func TestListRunsPageIsBoundedInBytes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		input string
		pages int // at least
	}{{"large", strings.Repeat("i", 900<<10), 3}, {"small", "test", 1}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTCPServer(t, Config{Directory: testDirectory(t)})
			want := map[string]bool{}
			for range 6 {
				c := contract(nil, final("done"))
				c.Inputs = &structpb.Struct{Fields: map[string]*structpb.Value{"doc": structpb.NewStringValue(tc.input)}}
				want[s.startAs(t, "a-operator", c).GetRunId()] = true
			}
			got, pages := map[string]bool{}, 0
			req := &reinv1.ListRunsRequest{}
			for {
				resp, err := s.client.ListRuns(context.Background(), req, as("a-viewer"))
				if err != nil {
					t.Fatalf("ListRuns page %d: %v", pages+1, err)
				}
				pages++
				if n := proto.Size(resp); n > maxPageBytes+1<<20 {
					t.Errorf("page %d is %d bytes, want it under %d and one run", pages, n, maxPageBytes)
				}
				for _, r := range resp.GetRuns() {
					if got[r.GetRunId()] {
						t.Errorf("run %s listed twice", r.GetRunId())
					}
					got[r.GetRunId()] = true
				}
				if resp.GetNextPageToken() == "" {
					break
				}
				req.PageToken = resp.GetNextPageToken()
			}
			if len(got) != len(want) || pages < tc.pages || tc.pages == 1 && pages != 1 {
				t.Fatalf("listed %d of %d runs in %d pages, want all in %d or more (1 for small runs)", len(got), len(want), pages, tc.pages)
			}
		})
	}
}
