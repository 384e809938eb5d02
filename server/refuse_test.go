package server

// Tests of a start a server cannot carry out (issue 13 §2), on the wire: a
// grant of a tool the server has none for is InvalidArgument naming the
// grant, one it cannot tell of (a tool server down) Unavailable. Nothing is
// stored.

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/tools"
)

// downTools is a tool server that does not answer.
type downTools struct{ tools.Executor }

func (downTools) List(context.Context) ([]tools.Spec, error) {
	return nil, errors.New("tool server billing: connection refused")
}

func TestStartRunRefusesToolsTheServerHasNot(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tools tools.Executor
		code  codes.Code
		want  []string
	}{
		{"no tools", nil, codes.InvalidArgument, []string{"contract.tools[0].name", `"lookup"`, "--tools", "--workspace", "--tool-server", "--mcp"}},
		{"a tool server down", downTools{}, codes.Unavailable, []string{`"lookup"`, "billing: connection refused"}},
		{"the twin, the tool provided", fixtures(), codes.OK, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestServer(t, tc.tools)
			_, err := s.client.StartRun(context.Background(), &reinv1.StartRunRequest{RequestId: "r", Contract: contract(nil, final("done"))})
			if tc.code == codes.OK {
				if err != nil {
					t.Fatalf("StartRun: %v", err)
				}
				return
			}
			st := wantCode(t, err, tc.code)
			for _, w := range tc.want {
				if !strings.Contains(st.Message(), w) {
					t.Errorf("StartRun: %q does not say %q", st.Message(), w)
				}
			}
			if tc.code == codes.InvalidArgument {
				if got := fieldOf(st.Details()); got != "contract.tools[0].name" {
					t.Errorf("BadRequest names %q, want contract.tools[0].name", got)
				}
			}
			list, err := s.client.ListRuns(context.Background(), &reinv1.ListRunsRequest{})
			if err != nil || len(list.GetRuns()) != 0 {
				t.Fatalf("a refused start stored %d runs (%v)", len(list.GetRuns()), err)
			}
		})
	}
}

// fieldOf is the field a BadRequest detail names, "" without one.
func fieldOf(details []any) string {
	for _, d := range details {
		if b, ok := d.(*errdetails.BadRequest); ok && len(b.GetFieldViolations()) == 1 {
			return b.GetFieldViolations()[0].GetField()
		}
	}
	return ""
}
