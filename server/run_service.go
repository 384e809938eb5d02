// Package server holds rein's gRPC services: thin handlers over the harness
// engine and the event store, the error mapping, the watch hub, and the
// assembly of a node (store, engine, services) that `rein serve` and the
// CLI's embedded mode share.
package server

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/admission"
	"github.com/reinhq/rein/internal/auth"
	"github.com/reinhq/rein/internal/catalog"
	"github.com/reinhq/rein/internal/engine"
	"github.com/reinhq/rein/internal/export"
	"github.com/reinhq/rein/internal/lifecycle"
	"github.com/reinhq/rein/internal/metrics"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/taskcontract"
	"github.com/reinhq/rein/internal/version"
)

const (
	defaultRunPage   = 50
	maxRunPage       = 1000
	defaultEventPage = 500
	maxEventPage     = 10000
	// maxPageBytes bounds the encoded size of a ListRuns or ListEvents
	// page, well under gRPC's 4 MiB message limit: a page ends early (with
	// a next_page_token) rather than pass it, so that one large run or
	// event never makes a listing unreadable. A page holds at least one
	// item.
	maxPageBytes = 2 << 20
)

// fitPage is how many of items, from the first, fit in maxPageBytes
// (at least one).
func fitPage[M proto.Message](items []M) int {
	total := 0
	for i, m := range items {
		// An item costs its size and a few bytes of framing.
		if total += proto.Size(m) + 8; total > maxPageBytes && i > 0 {
			return i
		}
	}
	return len(items)
}

// runService implements reinv1.RunServiceServer.
type runService struct {
	reinv1.UnsafeRunServiceServer
	engine *engine.Engine
	store  store.Store
	hub    *Hub
	// admission starts queued runs; nil queues none.
	admission *admission.Controller
	// schedules are the store's schedules; nil when it keeps none.
	schedules store.Schedules
	log       *slog.Logger
	// resume: the server carries on the runs it stores (rein serve), so an
	// imported run that has not ended is carried on too.
	resume bool
	// done is closed when the server shuts down: watch streams end with
	// Unavailable, and the client resumes from the last sequence it saw.
	done <-chan struct{}
	// metrics counts the watch streams; nil counts nothing.
	metrics *metrics.Metrics
	// follows brings the model output of runs other servers drive into
	// the hub (Config.Relay); nil on a server of its own.
	follows *relayFollows
	// cluster is the store's format (cluster.go); nil reports none.
	cluster Cluster
	// keeper deletes runs (DeleteRun); nil for a store without a lifecycle.
	keeper *lifecycle.Keeper
	// tasks is the catalog StartRun's task names; nil is an empty one.
	tasks *catalog.Holder
}

var _ reinv1.RunServiceServer = (*runService)(nil)

func (s *runService) StartRun(ctx context.Context, req *reinv1.StartRunRequest) (*reinv1.StartRunResponse, error) {
	id := s.identity(ctx)
	contract, err := s.contractOf(id, req)
	if err != nil {
		return nil, toStatus(s.log, "StartRun", err)
	}
	traceID, parent := runTrace(ctx)
	st, created, err := s.engine.Start(ctx, engine.StartRequest{
		RequestID: req.GetRequestId(), Contract: contract, Principal: id.ID, Tenant: id.Tenant,
		TraceID: traceID, TraceParent: parent, Queued: s.admission.Queues(id.Tenant),
	})
	if err != nil {
		return nil, toStatus(s.log, "StartRun", err)
	}
	callInfoFrom(ctx).set(func(c *callInfo) { c.runID = st.RunID })
	return &reinv1.StartRunResponse{Run: s.withPosition(ctx, st), Created: created,
		Warnings: taskcontract.Warnings(contract)}, nil
}

func (s *runService) GetRun(ctx context.Context, req *reinv1.GetRunRequest) (*reinv1.GetRunResponse, error) {
	st, err := s.load(ctx, req.GetRunId())
	if err != nil {
		return nil, toStatus(s.log, "GetRun", err)
	}
	return &reinv1.GetRunResponse{Run: s.withPosition(ctx, st)}, nil
}

// withPosition is st as the API gives it, with a queued run's place in
// its tenant's queue.
func (s *runService) withPosition(ctx context.Context, st runstate.State) *reinv1.Run {
	r := st.Proto(true)
	if st.Status == reinv1.RunStatus_RUN_STATUS_QUEUED && s.admission != nil {
		if pos, err := s.admission.Position(ctx, st); err == nil {
			r.QueuePosition = pos
		}
	}
	return r
}

// identity is the caller, as the auth interceptor found it.
func (s *runService) identity(ctx context.Context) auth.Principal {
	if p, ok := auth.FromContext(ctx); ok {
		return p
	}
	// Unreachable through the interceptor chain; deny by tenant.
	return auth.Principal{ID: "unknown", Tenant: "\x00none"}
}

// load reads a run the caller may see; another tenant's run is NotFound, the
// same answer as a missing one.
func (s *runService) load(ctx context.Context, runID string) (runstate.State, error) {
	if runID == "" {
		return runstate.State{}, invalidArgument("run_id", "required")
	}
	st, err := s.store.Load(ctx, runID)
	if errors.Is(err, store.ErrNotFound) && s.keeper != nil {
		// A run deleted says so, to its own tenant.
		if rec, derr := s.keeper.Store.Deletion(ctx, runID); derr == nil && rec.GetTenant() == s.identity(ctx).Tenant {
			return st, status.Errorf(codes.NotFound, "run %q was deleted at %s by %s (%s); rein deletions lists the records",
				runID, rec.GetDeletedAt().AsTime().UTC().Format(time.RFC3339), rec.GetDeletedBy(), rec.GetReason())
		}
	}
	if err != nil {
		return st, err
	}
	if st.Tenant != s.identity(ctx).Tenant {
		return runstate.State{}, status.Errorf(codes.NotFound, "run %q: run not found", runID)
	}
	return st, nil
}

func (s *runService) ListRuns(ctx context.Context, req *reinv1.ListRunsRequest) (*reinv1.ListRunsResponse, error) {
	size, err := pageSize(req.GetPageSize(), defaultRunPage, maxRunPage)
	if err != nil {
		return nil, err
	}
	after, err := decodeToken(req.GetPageToken())
	if err != nil {
		return nil, err
	}
	for i, st := range req.GetStatuses() {
		if _, ok := reinv1.RunStatus_name[int32(st)]; !ok || st == reinv1.RunStatus_RUN_STATUS_UNSPECIFIED {
			return nil, invalidArgument("statuses["+strconv.Itoa(i)+"]", "not a run status")
		}
	}
	page, err := s.store.List(ctx, store.Filter{
		Statuses: req.GetStatuses(), Labels: req.GetLabels(), Tenant: s.identity(ctx).Tenant, Limit: size, After: after,
		TraceID: req.GetTraceId(),
		Parent:  req.GetParentRunId(),
	})
	if err != nil {
		return nil, toStatus(s.log, "ListRuns", err)
	}
	for _, d := range page.Damaged {
		// Its tenant cannot be read either: the caller is not told.
		s.log.Warn("ListRuns passed over a run whose stored state is damaged; rein check lists every problem", "error", d)
	}
	resp := &reinv1.ListRunsResponse{NextPageToken: encodeToken(page.Next)}
	var places map[string]uint32 // the queue's order, read once for the page
	for _, st := range page.Runs {
		r := st.Proto(true)
		if st.Status == reinv1.RunStatus_RUN_STATUS_QUEUED && s.admission != nil {
			if places == nil {
				if places, err = s.admission.Positions(ctx, st.Tenant); err != nil {
					places = map[string]uint32{}
				}
			}
			r.QueuePosition = places[st.RunID]
		}
		resp.Runs = append(resp.Runs, r)
	}
	if n := fitPage(resp.Runs); n < len(resp.Runs) {
		resp.Runs = resp.Runs[:n]
		resp.NextPageToken = encodeToken(resp.Runs[n-1].GetRunId())
	}
	return resp, nil
}

func (s *runService) ListEvents(ctx context.Context, req *reinv1.ListEventsRequest) (*reinv1.ListEventsResponse, error) {
	size, err := pageSize(req.GetPageSize(), defaultEventPage, maxEventPage)
	if err != nil {
		return nil, err
	}
	after := req.GetAfterSequence()
	if tok := req.GetPageToken(); tok != "" {
		raw, err := decodeToken(tok)
		if err == nil {
			after, err = strconv.ParseUint(raw, 10, 64)
		}
		if err != nil {
			return nil, invalidArgument("page_token", "not a token this server issued; pass next_page_token unchanged")
		}
	}
	if _, err := s.load(ctx, req.GetRunId()); err != nil {
		return nil, toStatus(s.log, "ListEvents", err)
	}
	evs, err := s.store.Events(ctx, req.GetRunId(), after, size)
	if err != nil {
		return nil, toStatus(s.log, "ListEvents", err)
	}
	full := len(evs) == size
	if n := fitPage(evs); n < len(evs) {
		evs, full = evs[:n], true
	}
	resp := &reinv1.ListEventsResponse{Events: evs}
	if full {
		resp.NextPageToken = encodeToken(strconv.FormatUint(evs[len(evs)-1].GetSequence(), 10))
	}
	return resp, nil
}

func (s *runService) CancelRun(ctx context.Context, req *reinv1.CancelRunRequest) (*reinv1.CancelRunResponse, error) {
	if _, err := s.load(ctx, req.GetRunId()); err != nil {
		return nil, toStatus(s.log, "CancelRun", err)
	}
	st, err := s.engine.Cancel(ctx, req.GetRunId(), req.GetReason(), "principal:"+s.identity(ctx).ID)
	if err != nil {
		return nil, toStatus(s.log, "CancelRun", err)
	}
	return &reinv1.CancelRunResponse{Run: st.Proto(true)}, nil
}

func (s *runService) ForkRun(ctx context.Context, req *reinv1.ForkRunRequest) (*reinv1.ForkRunResponse, error) {
	if _, err := s.load(ctx, req.GetRunId()); err != nil {
		return nil, toStatus(s.log, "ForkRun", err)
	}
	id := s.identity(ctx)
	traceID, parent := runTrace(ctx)
	st, created, err := s.engine.Fork(ctx, engine.ForkRequest{
		RunID: req.GetRunId(), AtSequence: req.GetAtSequence(), RequestID: req.GetRequestId(), Budget: req.GetBudget(),
		Principal: id.ID, Tenant: id.Tenant, TraceID: traceID, TraceParent: parent,
	})
	if err != nil {
		return nil, toStatus(s.log, "ForkRun", err)
	}
	callInfoFrom(ctx).set(func(c *callInfo) { c.runID = st.RunID })
	return &reinv1.ForkRunResponse{Run: st.Proto(true), Created: created}, nil
}

func (s *runService) ProvideInput(ctx context.Context, req *reinv1.ProvideInputRequest) (*reinv1.ProvideInputResponse, error) {
	if _, err := s.load(ctx, req.GetRunId()); err != nil {
		return nil, toStatus(s.log, "ProvideInput", err)
	}
	st, err := s.engine.ProvideInput(ctx, req.GetRunId(), req.GetText(), s.identity(ctx).ID)
	if err != nil {
		return nil, toStatus(s.log, "ProvideInput", err)
	}
	return &reinv1.ProvideInputResponse{Run: st.Proto(true)}, nil
}

func (s *runService) DecideApproval(ctx context.Context, req *reinv1.DecideApprovalRequest) (*reinv1.DecideApprovalResponse, error) {
	if _, err := s.load(ctx, req.GetRunId()); err != nil {
		return nil, toStatus(s.log, "DecideApproval", err)
	}
	v := engine.Verdict{
		RunID: req.GetRunId(), ProposalID: req.GetProposalId(), ProposalHash: req.GetProposalHash(),
		Approve: req.GetVerdict() == reinv1.ApprovalVerdict_APPROVAL_VERDICT_APPROVE,
		Reason:  req.GetReason(), EndRun: req.GetEndRun(), Principal: s.identity(ctx).ID,
	}
	// A revision: REVISE with the arguments, or an approval with edits.
	switch revise := req.GetVerdict() == reinv1.ApprovalVerdict_APPROVAL_VERDICT_REVISE; {
	case revise && req.GetArguments() == nil:
		return nil, toStatus(s.log, "DecideApproval", invalidArgument("arguments", "a revision (verdict REVISE) carries the write's revised arguments, in full"))
	case !revise && !v.Approve && req.GetArguments() != nil:
		return nil, toStatus(s.log, "DecideApproval", invalidArgument("arguments", "a rejection carries no arguments: to change the write, revise it (verdict REVISE)"))
	case req.GetArguments() != nil:
		v.Arguments = req.GetArguments()
	}
	st, err := s.engine.DecideApproval(ctx, v)
	if err != nil {
		return nil, toStatus(s.log, "DecideApproval", err)
	}
	return &reinv1.DecideApprovalResponse{Run: st.Proto(true)}, nil
}

// GetServerInfo says which rein answers, and whom it took the caller for.
func (s *runService) GetServerInfo(ctx context.Context, _ *reinv1.GetServerInfoRequest) (*reinv1.GetServerInfoResponse, error) {
	p := s.identity(ctx)
	c := &reinv1.Caller{Principal: p.ID, Tenant: p.Tenant}
	for _, r := range p.Roles {
		c.Roles = append(c.Roles, string(r))
	}
	return &reinv1.GetServerInfoResponse{Build: version.Get(), Caller: c, Formats: serverFormats(s.cluster)}, nil
}

// ImportRun stores an exported run, checked whole as an export file is
// (export.Check), in the caller's tenant: all of it or nothing. Only the
// blobs its events reference are stored, as GetBlobs serves only those. A
// server that resumes runs carries an imported run on at once.
func (s *runService) ImportRun(ctx context.Context, req *reinv1.ImportRunRequest) (*reinv1.ImportRunResponse, error) {
	x := req.GetExport()
	if err := export.Check(x); err != nil {
		return nil, toStatus(s.log, "ImportRun", err)
	}
	callInfoFrom(ctx).set(func(c *callInfo) { c.runID = x.GetRunId() })
	id := s.identity(ctx)
	if tenant := x.GetEvents()[0].GetRunStarted().GetTenant(); tenant != id.Tenant {
		return nil, status.Errorf(codes.PermissionDenied, "run %s belongs to tenant %q: principal %q may import only runs of its own tenant, %q",
			x.GetRunId(), tenant, id.ID, id.Tenant)
	}
	refs := export.BlobRefs(x.GetEvents())
	blobs := make(map[string][]byte, len(refs))
	for _, h := range refs {
		blobs[h] = x.GetBlobs()[h] // Check found every one
	}
	st, err := s.engine.Import(ctx, x.GetEvents(), blobs, s.resume)
	if err != nil {
		return nil, toStatus(s.log, "ImportRun", err)
	}
	return &reinv1.ImportRunResponse{Run: st.Proto(true)}, nil
}

func pageSize(n, def, max int32) (int, error) {
	switch {
	case n < 0:
		return 0, invalidArgument("page_size", "must not be negative")
	case n == 0:
		return int(def), nil
	case n > max:
		return int(max), nil
	}
	return int(n), nil
}

func encodeToken(s string) string {
	if s == "" {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString([]byte(s))
}

func decodeToken(tok string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return "", invalidArgument("page_token", "not a token this server issued; pass next_page_token unchanged")
	}
	return string(b), nil
}

// WatchRuns streams the caller's tenant's status changes from the store's
// change log, then live, woken by the hub like WatchRun.
func (s *runService) WatchRuns(req *reinv1.WatchRunsRequest, stream grpc.ServerStreamingServer[reinv1.WatchRunsResponse]) error {
	ctx := stream.Context()
	defer s.metrics.WatchOpened("runs")()
	sub := s.hub.SubscribeAll()
	defer sub.Close()
	tenant := s.identity(ctx).Tenant
	want := map[reinv1.RunStatus]bool{}
	for _, st := range req.GetStatuses() {
		want[st] = true
	}
	cursor := req.GetAfterCursor()
	_, head, err := s.store.Changes(ctx, cursor, 0)
	if err != nil {
		return toStatus(s.log, "WatchRuns", err)
	}
	if cursor > head {
		return status.Errorf(codes.OutOfRange, "after_cursor %d is beyond the last change %d; resume from %d or less", cursor, head, head)
	}
	for {
		changes, _, err := s.store.Changes(ctx, cursor, defaultEventPage)
		if err != nil {
			return toStatus(s.log, "WatchRuns", err)
		}
		for _, c := range changes {
			cursor = c.Cursor
			if c.Tenant != tenant || (len(want) > 0 && !want[c.Change.GetStatus()]) {
				continue
			}
			if len(req.GetLabels()) > 0 {
				st, err := s.store.Load(ctx, c.Change.GetRunId())
				if err != nil {
					return toStatus(s.log, "WatchRuns", err)
				}
				if !(store.Filter{Labels: req.GetLabels()}).Matches(st) {
					continue
				}
			}
			if err := stream.Send(&reinv1.WatchRunsResponse{Change: c.Change}); err != nil {
				return err
			}
		}
		if len(changes) == defaultEventPage {
			continue
		}
		select {
		case <-sub.C:
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-s.done:
			return status.Errorf(codes.Unavailable, "the server is shutting down; resume the watch with after_cursor=%d", cursor)
		}
	}
}

// maxBlobsBytes bounds one GetBlobs answer, under gRPC's default 4 MiB
// message limit; a caller asks again for the blobs left out.
const maxBlobsBytes = 3 << 20

// blobsPerRead is how many blobs GetBlobs reads from the store at once: up
// to 1,000 hashes take 16 passes over the run's blobs.
const blobsPerRead = 64

// GetBlobs returns blobs the run's events reference. A hash the run does
// not reference is refused, so that a run's blobs are read only by those
// who may read the run. The answer carries as many of the blobs asked for
// as fit in maxBlobsBytes, always at least one, in the order asked.
func (s *runService) GetBlobs(ctx context.Context, req *reinv1.GetBlobsRequest) (*reinv1.GetBlobsResponse, error) {
	if _, err := s.load(ctx, req.GetRunId()); err != nil {
		return nil, toStatus(s.log, "GetBlobs", err)
	}
	refs := map[string]bool{}
	for after := uint64(0); ; {
		evs, err := s.store.Events(ctx, req.GetRunId(), after, maxEventPage)
		if err != nil {
			return nil, toStatus(s.log, "GetBlobs", err)
		}
		for _, h := range export.BlobRefs(evs) {
			refs[h] = true
		}
		if len(evs) < maxEventPage {
			break
		}
		after = evs[len(evs)-1].GetSequence()
	}
	var want []string
	for i, h := range req.GetHashes() {
		if !refs[h] {
			return nil, invalidArgument(fmt.Sprintf("hashes[%d]", i), fmt.Sprintf("run %s references no blob %s; ask for the hashes its events name", req.GetRunId(), h))
		}
		if !slices.Contains(want, h) {
			want = append(want, h)
		}
	}
	// Read some at a time: a read is one pass over the run's blobs (a
	// backend may keep them by run, as bolt does, and find them so), and
	// what is read past the answer's bound is dropped.
	resp := &reinv1.GetBlobsResponse{Blobs: map[string][]byte{}}
	size := 0
	for chunk := range slices.Chunk(want, blobsPerRead) {
		got, err := s.store.Blobs(ctx, req.GetRunId(), chunk)
		if err != nil {
			return nil, toStatus(s.log, "GetBlobs", err)
		}
		for _, h := range chunk {
			if size > 0 && size+len(got[h]) > maxBlobsBytes {
				return resp, nil
			}
			resp.Blobs[h] = got[h]
			size += len(got[h])
		}
	}
	return resp, nil
}
