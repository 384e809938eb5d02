package server

// Tests of ImportRun: an exported run goes into another server as it was,
// in the caller's tenant, and every refusal (a run already there, another
// tenant's run, a log that does not fold, a blob missing or changed, a
// request over the size limit) stores nothing.

import (
	"context"
	"crypto/rand"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/export"
	"github.com/reinhq/rein/internal/store"
)

// exportOf reads a run through the API, as `rein export --server` does:
// its events and the blobs they reference.
func exportOf(ctx context.Context, c reinv1.RunServiceClient, runID string, opts ...grpc.CallOption) (*reinv1.RunExport, error) {
	resp, err := c.ListEvents(ctx, &reinv1.ListEventsRequest{RunId: runID, PageSize: 10000}, opts...)
	if err != nil {
		return nil, err
	}
	x := &reinv1.RunExport{FormatVersion: export.Version, RunId: runID, Events: resp.GetEvents(), Blobs: map[string][]byte{}}
	if refs := export.BlobRefs(x.GetEvents()); len(refs) > 0 {
		blobs, err := c.GetBlobs(ctx, &reinv1.GetBlobsRequest{RunId: runID, Hashes: refs}, opts...)
		if err != nil {
			return nil, err
		}
		x.Blobs = blobs.GetBlobs()
	}
	return x, nil
}

// renamed is a copy of x under a new run ID and request ID: a run no store
// holds yet.
func renamed(x *reinv1.RunExport) *reinv1.RunExport {
	x = proto.Clone(x).(*reinv1.RunExport)
	x.RunId = "run_" + rand.Text()
	for _, ev := range x.GetEvents() {
		ev.RunId = x.GetRunId()
	}
	x.GetEvents()[0].GetRunStarted().RequestId = "import-" + rand.Text()
	return x
}

// copyExport is a run's export under a new ID, read as the admin of
// whichever test tenant holds the run.
func copyExport(ctx context.Context, c reinv1.RunServiceClient, runID string) (*reinv1.RunExport, error) {
	x, err := exportOf(ctx, c, runID, as("a-admin"))
	if status.Code(err) == codes.NotFound {
		x, err = exportOf(ctx, c, runID, as("b-admin"))
	}
	if err != nil {
		return nil, err
	}
	return renamed(x), nil
}

// serverState is what a refused import must leave as it was: every run of
// both tenants, with its state and its events.
type serverState struct {
	runs   []*reinv1.Run
	events map[string][]*reinv1.Event
}

func stateOf(t *testing.T, s *tcpServer) serverState {
	t.Helper()
	ctx := context.Background()
	st := serverState{events: map[string][]*reinv1.Event{}}
	for _, who := range []string{"a-admin", "b-admin"} {
		resp, err := s.client.ListRuns(ctx, &reinv1.ListRunsRequest{PageSize: 1000}, as(who))
		if err != nil {
			t.Fatal(err)
		}
		for _, run := range resp.GetRuns() {
			st.runs = append(st.runs, run)
			x, err := exportOf(ctx, s.client, run.GetRunId(), as(who))
			if err != nil {
				t.Fatal(err)
			}
			st.events[run.GetRunId()] = x.GetEvents()
		}
	}
	return st
}

// assertSame fails unless the server holds exactly the runs of before, each
// with the same state and events.
func assertSame(t *testing.T, what string, s *tcpServer, before serverState) {
	t.Helper()
	after := stateOf(t, s)
	if len(after.runs) != len(before.runs) {
		t.Fatalf("%s: the server holds %d runs, held %d", what, len(after.runs), len(before.runs))
	}
	for i, run := range before.runs {
		if !proto.Equal(after.runs[i], run) {
			t.Errorf("%s: run %s changed:\n got  %v\n want %v", what, run.GetRunId(), after.runs[i], run)
		}
		got, want := after.events[run.GetRunId()], before.events[run.GetRunId()]
		if !slices.EqualFunc(got, want, func(a, b *reinv1.Event) bool { return proto.Equal(a, b) }) {
			t.Errorf("%s: run %s's events changed: %d events, had %d", what, run.GetRunId(), len(got), len(want))
		}
	}
}

// sourceRun is a paused run on a server of its own, exported as its
// tenant's admin reads it.
func sourceRun(t *testing.T) (*reinv1.Run, *reinv1.RunExport) {
	t.Helper()
	src := newTCPServer(t, Config{Directory: testDirectory(t)})
	run := src.startAs(t, "a-operator", contract(nil, ask("which one?")))
	x, err := exportOf(context.Background(), src.client, run.GetRunId(), as("a-admin"))
	if err != nil {
		t.Fatal(err)
	}
	if len(x.GetBlobs()) == 0 {
		t.Fatal("the source run references no blob: the import of blobs goes untested")
	}
	return run, x
}

// TestImportRun: an imported run reads on the new server as it did on its
// own: the same state, events and blobs, in its tenant only, and watchers of
// the tenant's runs see it arrive.
func TestImportRun(t *testing.T) {
	ctx := context.Background()
	run, x := sourceRun(t)
	dst := newTCPServer(t, Config{Directory: testDirectory(t)})
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	changes, err := dst.client.WatchRuns(wctx, &reinv1.WatchRunsRequest{}, as("a-viewer"))
	if err != nil {
		t.Fatal(err)
	}

	resp, err := dst.client.ImportRun(ctx, &reinv1.ImportRunRequest{Export: x}, as("a-admin"))
	if err != nil {
		t.Fatalf("ImportRun: %v", err)
	}
	if !proto.Equal(resp.GetRun(), run) {
		t.Errorf("ImportRun returned\n %v\nwant the source run\n %v", resp.GetRun(), run)
	}
	got, err := dst.client.GetRun(ctx, &reinv1.GetRunRequest{RunId: run.GetRunId()}, as("a-viewer"))
	if err != nil || !proto.Equal(got.GetRun(), run) {
		t.Errorf("GetRun of the imported run: %v, %v; want the source run", got.GetRun(), err)
	}
	back, err := exportOf(ctx, dst.client, run.GetRunId(), as("a-viewer"))
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(back, x) {
		t.Errorf("the imported run's events and blobs differ from the export's: %d events, %d blobs; want %d and %d",
			len(back.GetEvents()), len(back.GetBlobs()), len(x.GetEvents()), len(x.GetBlobs()))
	}
	ch, err := changes.Recv()
	if err != nil || ch.GetChange().GetRunId() != run.GetRunId() || ch.GetChange().GetStatus() != run.GetStatus() {
		t.Errorf("WatchRuns: %v, %v; want the imported run's arrival, %v", ch, err, run.GetStatus())
	}

	// The twin: another tenant does not see it.
	_, err = dst.client.GetRun(ctx, &reinv1.GetRunRequest{RunId: run.GetRunId()}, as("b-admin"))
	wantCode(t, err, codes.NotFound)
}

// TestImportRunRefused: each refusal gets its code and changes nothing on
// the server: the same runs, each with the same state and events.
func TestImportRunRefused(t *testing.T) {
	ctx := context.Background()
	_, x := sourceRun(t)
	dst := newTCPServer(t, Config{Directory: testDirectory(t)})
	if _, err := dst.client.ImportRun(ctx, &reinv1.ImportRunRequest{Export: x}, as("a-admin")); err != nil {
		t.Fatal(err)
	}
	dst.startAs(t, "b-operator", contract(nil, final("done")))

	sameRequest := renamed(x)
	sameRequest.GetEvents()[0].GetRunStarted().RequestId = x.GetEvents()[0].GetRunStarted().GetRequestId()
	gap := renamed(x)
	gap.Events = slices.Delete(gap.Events, 2, 3)
	missingBlob := renamed(x)
	for h := range missingBlob.GetBlobs() {
		delete(missingBlob.Blobs, h)
		break
	}
	changedBlob := renamed(x)
	for h := range changedBlob.GetBlobs() {
		changedBlob.Blobs[h] = []byte("not what was hashed")
		break
	}
	noVersion := renamed(x)
	noVersion.FormatVersion = 0
	for _, tc := range []struct {
		name string
		req  *reinv1.ImportRunRequest
		who  string
		code codes.Code
		says string
	}{
		{"a run already there", &reinv1.ImportRunRequest{Export: x}, "a-admin", codes.AlreadyExists, "already stored"},
		{"a request ID already used", &reinv1.ImportRunRequest{Export: sameRequest}, "a-admin", codes.AlreadyExists, "request ID"},
		{"another tenant's run", &reinv1.ImportRunRequest{Export: renamed(x)}, "b-admin", codes.PermissionDenied, `tenant "acme"`},
		{"events that do not fold", &reinv1.ImportRunRequest{Export: gap}, "a-admin", codes.InvalidArgument, "does not fold"},
		{"a blob missing", &reinv1.ImportRunRequest{Export: missingBlob}, "a-admin", codes.InvalidArgument, "does not carry"},
		{"a blob not under its hash", &reinv1.ImportRunRequest{Export: changedBlob}, "a-admin", codes.InvalidArgument, "SHA-256"},
		{"no format version", &reinv1.ImportRunRequest{Export: noVersion}, "a-admin", codes.InvalidArgument, "format version"},
		{"no export", &reinv1.ImportRunRequest{}, "a-admin", codes.InvalidArgument, "export"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := stateOf(t, dst)
			_, err := dst.client.ImportRun(ctx, tc.req, as(tc.who))
			st := wantCode(t, err, tc.code)
			if !strings.Contains(st.Message(), tc.says) {
				t.Errorf("message %q does not say %q", st.Message(), tc.says)
			}
			if tc.code == codes.InvalidArgument {
				var br *errdetails.BadRequest
				for _, d := range st.Details() {
					if b, ok := d.(*errdetails.BadRequest); ok {
						br = b
					}
				}
				if br == nil || len(br.GetFieldViolations()) != 1 || br.GetFieldViolations()[0].GetField() != "export" {
					t.Errorf("details %v, want a BadRequest naming export", st.Details())
				}
			}
			assertSame(t, "after a refused import", dst, before)
		})
	}

	// The twin: the same run under a new ID and request ID is taken.
	if _, err := dst.client.ImportRun(ctx, &reinv1.ImportRunRequest{Export: renamed(x)}, as("a-admin")); err != nil {
		t.Fatalf("ImportRun of a new copy: %v", err)
	}
}

// TestImportRunTooLarge: an export over the server's MaxRecvBytes is
// ResourceExhausted, saying so, and stores nothing; one under it is taken.
func TestImportRunTooLarge(t *testing.T) {
	ctx := context.Background()
	src := newTCPServer(t, Config{Directory: testDirectory(t)})
	big := contract(nil, ask("which one?"))
	big.Goal = strings.Repeat("g", 60<<10) // twice in the export: in run_started and in a blob
	bigRun := src.startAs(t, "a-operator", big)
	small := src.startAs(t, "a-operator", contract(nil, ask("which one?")))
	bigX, err := exportOf(ctx, src.client, bigRun.GetRunId(), as("a-admin"))
	if err != nil {
		t.Fatal(err)
	}
	smallX, err := exportOf(ctx, src.client, small.GetRunId(), as("a-admin"))
	if err != nil {
		t.Fatal(err)
	}

	dst := newTCPServer(t, Config{Directory: testDirectory(t), MaxRecvBytes: 64 << 10})
	before := stateOf(t, dst)
	_, err = dst.client.ImportRun(ctx, &reinv1.ImportRunRequest{Export: bigX}, as("a-admin"))
	st := wantCode(t, err, codes.ResourceExhausted)
	if !strings.Contains(st.Message(), "larger than max") {
		t.Errorf("message %q does not say the request is too large", st.Message())
	}
	assertSame(t, "after an oversize import", dst, before)

	// The twin: a run that fits.
	if _, err := dst.client.ImportRun(ctx, &reinv1.ImportRunRequest{Export: smallX}, as("a-admin")); err != nil {
		t.Fatalf("ImportRun under the limit: %v", err)
	}
	if _, err := dst.node.Store.Load(ctx, small.GetRunId()); err != nil {
		t.Fatalf("the run under the limit is not stored: %v", err)
	}
	if _, err := dst.node.Store.Load(ctx, bigRun.GetRunId()); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the oversize run: %v, want ErrNotFound", err)
	}
}

// TestImportedRunIsCarriedOn: a server that resumes runs carries an imported
// running run on at once, as it would have at start; the twin, a server
// that does not resume (the CLI's embedded one), leaves it as imported.
func TestImportedRunIsCarriedOn(t *testing.T) {
	ctx := context.Background()
	_, x := sourceRun(t)
	// The run as it was right after it started: running, nothing done.
	x = proto.Clone(x).(*reinv1.RunExport)
	x.Events, x.Blobs = x.GetEvents()[:1], nil
	for _, resume := range []bool{true, false} {
		dst := newTCPServer(t, Config{Directory: testDirectory(t), Resume: resume,
			Models: scriptedModels(ask("which one?"))})
		if _, err := dst.client.ImportRun(ctx, &reinv1.ImportRunRequest{Export: x}, as("a-admin")); err != nil {
			t.Fatalf("ImportRun (resume %v): %v", resume, err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			got, err := dst.client.GetRun(ctx, &reinv1.GetRunRequest{RunId: x.GetRunId()}, as("a-viewer"))
			if err != nil {
				t.Fatal(err)
			}
			run := got.GetRun()
			if !resume {
				if run.GetStatus() != reinv1.RunStatus_RUN_STATUS_RUNNING || run.GetVersion() != 1 {
					t.Fatalf("a server that does not resume drove the imported run: %v at version %d", run.GetStatus(), run.GetVersion())
				}
				break
			}
			if run.GetStatus() == reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the imported run is still %v at version %d after 10s; want it carried on to needs_input", run.GetStatus(), run.GetVersion())
			}
			<-time.After(10 * time.Millisecond) // poll, within the deadline above
		}
	}
}
