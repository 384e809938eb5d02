package crash_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/reinhq/rein/client"
	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// driveTimeout bounds the whole drive of TestSIGKILL, kills included.
const driveTimeout = 2 * time.Minute

// driven is what the driver saw of one run: every version a successful
// call acknowledged, and every event the watch handed over.
type driven struct {
	index     int
	requestID string
	runID     string
	acks      []ack
	seen      []*reinv1.Event
	// found is 1 when the acknowledged StartRun answered created=false:
	// an earlier call whose answer a crash lost had created the run.
	found int
	// retries counts calls retried after a transient error.
	retries int
	err     error
	// think draws how long the person takes to answer each pause.
	think *rand.Rand
}

// ack is a version a successful call returned: every event up to it is
// durable.
type ack struct {
	rpc     string
	version uint64
}

func (d *driven) ack(rpc string, v uint64) { d.acks = append(d.acks, ack{rpc, v}) }

// pause is a short wait between retries of a call that failed with
// something other than the server being down (calls wait for it to be
// back by themselves).
func pause(ctx context.Context) error {
	t := time.NewTimer(10 * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// maxThink bounds how long a person takes to answer a pause: answers
// spread over the first seconds, so that kills find runs at every stage.
const maxThink = 2500 * time.Millisecond

// drive starts the run (retrying with its request ID until a start is
// acknowledged) and follows it with a resuming watch to its end, approving
// its write and answering its question as the watch shows it pause, each
// after a person's think time.
func (d *driven) drive(ctx context.Context, cl *client.Client) error {
	for {
		cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
		resp, err := cl.Runs.StartRun(cctx, &reinv1.StartRunRequest{RequestId: d.requestID, Contract: contract(d.index)})
		cancel()
		if err == nil {
			d.runID = resp.GetRun().GetRunId()
			d.ack("StartRun", resp.GetRun().GetVersion())
			if !resp.GetCreated() {
				d.found++
			}
			break
		}
		if !transient(err) {
			return fmt.Errorf("StartRun %s: %w", d.requestID, err)
		}
		d.retries++
		if err := pause(ctx); err != nil {
			return fmt.Errorf("StartRun %s: %w", d.requestID, err)
		}
	}
	var proposal *reinv1.Proposal
	return cl.Watch(ctx, d.runID, 0, func(ev *reinv1.Event) error {
		d.seen = append(d.seen, proto.Clone(ev).(*reinv1.Event))
		switch p := ev.GetPayload().(type) {
		case *reinv1.Event_ApprovalRequested:
			proposal = p.ApprovalRequested.GetProposal()
		case *reinv1.Event_WriteOutcomeUnknown:
			return d.act(ctx, cl, ev.GetSequence(), stNeedsApproval, proposal)
		case *reinv1.Event_StatusChanged:
			if to := p.StatusChanged.GetTo(); to == stNeedsApproval || to == stNeedsInput {
				if err := d.thinkTime(ctx); err != nil {
					return err
				}
				return d.act(ctx, cl, ev.GetSequence(), to, proposal)
			}
		}
		return nil
	})
}

// thinkTime is the person reading the run before answering.
func (d *driven) thinkTime(ctx context.Context) error {
	t := time.NewTimer(time.Duration(d.think.Int64N(int64(maxThink))))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// act approves the proposal (needs_approval) or answers the question
// (needs_input) of a run the watch saw pause at version at. It calls until
// a call is acknowledged, or until the run is past that version: then an
// earlier call whose answer was lost in a crash took effect.
func (d *driven) act(ctx context.Context, cl *client.Client, at uint64, want reinv1.RunStatus, p *reinv1.Proposal) error {
	refused := 0
	for {
		cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
		got, err := cl.Runs.GetRun(cctx, &reinv1.GetRunRequest{RunId: d.runID})
		cancel()
		if err != nil {
			if !transient(err) {
				return fmt.Errorf("GetRun %s: %w", d.runID, err)
			}
			d.retries++
			if err := pause(ctx); err != nil {
				return err
			}
			continue
		}
		run := got.GetRun()
		d.ack("GetRun", run.GetVersion())
		switch {
		case run.GetVersion() < at:
			return fmt.Errorf("run %s: GetRun answers version %d, but the watch showed event %d: an acknowledged event is gone", d.runID, run.GetVersion(), at)
		case run.GetVersion() > at:
			return nil
		case run.GetStatus() != want:
			return fmt.Errorf("run %s at version %d is %s, but the watch showed it pause as %s there", d.runID, at, run.GetStatus(), want)
		}
		var version uint64
		rpc := "ProvideInput"
		if want == stNeedsApproval {
			rpc = "DecideApproval"
			pending := run.GetPending().GetProposal()
			if pending.GetProposalId() != p.GetProposalId() || pending.GetHash() != p.GetHash() {
				return fmt.Errorf("run %s at version %d waits for proposal %q (hash %s), but the watch showed %q (hash %s)",
					d.runID, at, pending.GetProposalId(), pending.GetHash(), p.GetProposalId(), p.GetHash())
			}
			cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
			var resp *reinv1.DecideApprovalResponse
			resp, err = cl.Runs.DecideApproval(cctx, &reinv1.DecideApprovalRequest{
				RunId: d.runID, ProposalId: pending.GetProposalId(), ProposalHash: pending.GetHash(), Verdict: approve, Reason: "crash test",
			})
			cancel()
			version = resp.GetRun().GetVersion()
		} else {
			cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
			var resp *reinv1.ProvideInputResponse
			resp, err = cl.Runs.ProvideInput(cctx, &reinv1.ProvideInputRequest{RunId: d.runID, Text: "yes"})
			cancel()
			version = resp.GetRun().GetVersion()
		}
		switch {
		case err == nil:
			d.ack(rpc, version)
			return nil
		case status.Code(err) == codes.FailedPrecondition && refused < 3:
			// An earlier call took effect while this one was refused:
			// GetRun will show the run past at.
			refused++
		case !transient(err):
			return fmt.Errorf("run %s at version %d: %s: %w", d.runID, at, rpc, err)
		}
		d.retries++
		if err := pause(ctx); err != nil {
			return err
		}
	}
}

// TestSIGKILL drives -crash.runs runs while the server is killed with
// SIGKILL -crash.kills times at random moments, then checks the histories:
// every run completed, its log is gap-free, every event the server
// acknowledged (a version a call returned, an event a watch handed over)
// is stored as it was seen, every approved write was applied exactly once
// and recorded, no request ID made two runs, and the bbolt file is
// consistent after every kill and after the final clean stop.
func TestSIGKILL(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	t.Logf("seed %d (rerun this kill schedule with -crash.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0x6b696c6c))
	began := time.Now()

	in := newInstance(t)
	srv := in.start(t)
	in.waitServing(t, srv)
	cl := in.dial(t, client.Backoff{Min: 5 * time.Millisecond, Max: 100 * time.Millisecond})

	ctx, cancel := context.WithTimeout(context.Background(), driveTimeout)
	defer cancel()
	runs := make([]*driven, *runsFlag)
	var wg sync.WaitGroup
	for i := range runs {
		runs[i] = &driven{index: i, requestID: fmt.Sprintf("crash-%03d", i), think: rand.New(rand.NewPCG(uint64(seed), uint64(i)))}
		wg.Add(1)
		go func(d *driven) {
			defer wg.Done()
			d.err = d.drive(ctx, cl)
		}(runs[i])
	}
	driversDone := make(chan struct{})
	go func() {
		wg.Wait()
		close(driversDone)
	}()

	// The killer: wait a random moment, SIGKILL, restart on the same
	// files and address. One restart in four is killed again within 40ms
	// of its start, while it opens the database and settles writes; the
	// others once they serve, after 10–300ms.
	kills, busy, early := 0, 0, 0
	for kills < *killsFlag {
		delay := 10*time.Millisecond + time.Duration(rng.Int64N(int64(290*time.Millisecond)))
		if srv.gen > 1 && rng.IntN(4) == 0 {
			delay = time.Duration(rng.Int64N(int64(40 * time.Millisecond)))
			early++
		} else {
			in.waitServing(t, srv)
		}
		timer := time.NewTimer(delay)
		select {
		case <-timer.C:
		case <-srv.exited:
			t.Fatalf("rein serve (generation %d) exited on its own: %v", srv.gen, srv.state)
		case <-ctx.Done():
			t.Fatalf("the drive did not end within %v; %d kills so far", driveTimeout, kills)
		}
		select {
		case <-driversDone:
		default:
			busy++
		}
		srv.kill(t)
		kills++
		// What SIGKILL left must be a consistent bbolt file.
		checkBolt(t, in.db)
		srv = in.start(t)
	}
	in.waitServing(t, srv)
	select {
	case <-driversDone:
	case <-ctx.Done():
		// Every call the drivers make ends with ctx: wait for them.
		timer := time.NewTimer(30 * time.Second)
		select {
		case <-driversDone:
			timer.Stop()
		case <-timer.C:
			t.Fatalf("the drivers did not stop within 30s of the drive's deadline")
		}
	}
	drove := time.Since(began)
	t.Logf("%d kills (%d while runs were still being driven, %d within 40ms of a start), %d generations, drive took %v",
		kills, busy, early, in.gens, drove.Round(time.Millisecond))
	if busy < kills {
		t.Logf("note: %d kills found every run finished; raise the scripts' delays or lower the kill delays to keep them busy", kills-busy)
	}

	// Read every run back from the last generation, then stop it cleanly.
	vctx, vcancel := context.WithTimeout(context.Background(), time.Minute)
	defer vcancel()
	logs := make([]runLog, len(runs)) // by run index
	stuck := 0
	for _, d := range runs {
		if d.err != nil {
			stuck++
			if stuck <= 5 {
				t.Errorf("run %d (%s, request %s): the driver stopped: %v", d.index, d.runID, d.requestID, d.err)
			}
		}
		if d.runID == "" {
			continue
		}
		l, err := fetchLog(vctx, cl, d.runID)
		if err != nil {
			t.Fatalf("read run %d back: %v", d.index, err)
		}
		logs[d.index] = l
	}
	if stuck > 5 {
		t.Errorf("… and %d more runs whose driver stopped", stuck-5)
	}
	listed := listRuns(t, vctx, cl)
	in.stop(t, srv)
	led := readLedger(t, in.ledger)
	checkBolt(t, in.db)

	// The invariants, over what the driver saw and what the server kept.
	var problems, known []string
	droppedByTool := map[string]int{}
	report := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	var resumedCalls, redispatches, found, retries int
	for i, d := range runs {
		found += d.found
		retries += d.retries
		if d.runID == "" {
			report("run %d (request %s) was never started", d.index, d.requestID)
			continue
		}
		l := logs[i]
		if msg := l.gapFree(); msg != "" {
			report("run %d: %s\n%v", d.index, msg, l)
			continue
		}
		if l.run.GetStatus() != stCompleted {
			report("run %d ended %s, not completed: reason %q, last error %q\n%v", d.index, l.run.GetStatus(), l.run.GetStatusReason(), l.run.GetLastError(), l)
		}
		for _, a := range d.acks {
			if a.version > l.run.GetVersion() || a.version == 0 {
				report("run %d: %s acknowledged version %d, but the run is at version %d\n%v", d.index, a.rpc, a.version, l.run.GetVersion(), l)
			}
		}
		for _, ev := range d.seen {
			if s := ev.GetSequence(); s == 0 || s > uint64(len(l.events)) || !proto.Equal(ev, l.events[s-1]) {
				report("run %d: the watch handed over event %d (%s), but the stored log does not hold it as seen\nseen:\n%s%v",
					d.index, s, payloadName(ev), eventsText([]*reinv1.Event{ev}), l)
			}
		}
		if d.err == nil && len(d.seen) != len(l.events) {
			report("run %d: the watch ended after %d events, but the log holds %d\n%v", d.index, len(d.seen), len(l.events), l)
		}
		for _, ev := range l.find("model_requested") {
			if ev.GetModelRequested().GetResumed() {
				resumedCalls++
			}
		}
		for _, ev := range l.find("write_dispatched") {
			if ev.GetActor() == "harness" {
				redispatches++
			}
		}
		// A tool call the log requested must have an outcome before the
		// model is called again (see droppedCalls). The script's shape
		// holds only for a run that lost none: one read, one write
		// proposed, approved and committed, one question answered.
		if dropped := droppedCalls(l); len(dropped) > 0 {
			for _, c := range dropped {
				droppedByTool[strings.Fields(c)[0]]++
			}
			known = append(known, fmt.Sprintf("run %d (%s) ended %s: %s\n%v", d.index, l.run.GetRunId(), l.run.GetStatus(), strings.Join(dropped, "; "), l))
			continue
		}
		for _, want := range []struct {
			payload string
			n       int
		}{{"approval_requested", 1}, {"approval_decided", 1}, {"write_committed", 1}, {"input_provided", 1}} {
			if got := l.count(want.payload); got != want.n && l.run.GetStatus() == stCompleted {
				report("run %d completed with %d %s events, want %d\n%v", d.index, got, want.payload, want.n, l)
			}
		}
	}
	var started []runLog
	for _, l := range logs {
		if l.run != nil {
			started = append(started, l)
		}
	}
	problems = append(problems, writeProblems(started, led)...)
	if len(listed) != len(runs) {
		report("ListRuns shows %d runs of the tenant, want %d (one per request ID)", len(listed), len(runs))
	}
	if errs := in.log.grep("", "level=ERROR"); len(errs) > 0 {
		t.Logf("rein serve logged %d errors, the first ones:\n%s", len(errs), strings.Join(errs[:min(len(errs), 10)], "\n"))
	}
	t.Logf("%d runs; %d StartRun retries found their run; %d calls retried; %d model calls resumed after a crash; %d writes dispatched again after a lookup; ledger: %d lines, %d operations applied",
		len(runs), found, retries, resumedCalls, redispatches, len(led.lines), len(led.applied))
	t.Logf("total %v", time.Since(began).Round(time.Millisecond))
	if len(problems) > 0 {
		sort.Strings(problems)
		for _, p := range problems[:min(len(problems), 10)] {
			t.Error(p)
		}
		t.Errorf("%d problems in all (seed %d)", len(problems), seed)
	}
	if len(known) > 0 {
		t.Error(fmt.Sprintf("%d of %d runs carried on past a tool call whose outcome a crash lost (%d %s reads, %d %s writes; seed %d); the first:\n%s",
			len(known), len(runs), droppedByTool[readTool], readTool, droppedByTool[writeTool], writeTool, seed, known[0]))
	}
}

// droppedCalls lists the tool calls of a run that the harness carried on
// past without an outcome: a tool_requested with, before the next
// model_requested, neither its tool_returned (a read, or a write that
// could not be proposed) nor its approval_requested (a write). After a
// crash between the two commits the log shows the call in flight; the run
// must not go on as if it had not been made (docs/design.md §3: a call in flight
// at a crash is visible in the log, and failures are classified —
// interruption — before recovery, every retry an event).
func droppedCalls(l runLog) []string {
	var dropped []string
	open := map[string]*reinv1.Event{} // call ID → its tool_requested
	for _, ev := range l.events {
		switch p := ev.GetPayload().(type) {
		case *reinv1.Event_ToolRequested:
			open[p.ToolRequested.GetCallId()] = ev
		case *reinv1.Event_ToolReturned:
			delete(open, p.ToolReturned.GetCallId())
		case *reinv1.Event_ApprovalRequested:
			delete(open, p.ApprovalRequested.GetProposal().GetCallId())
		case *reinv1.Event_ModelRequested:
			for id, req := range open {
				dropped = append(dropped, fmt.Sprintf("%s call %s (tool_requested at sequence %d) has no outcome, yet model_requested at sequence %d calls the model again",
					req.GetToolRequested().GetTool(), id, req.GetSequence(), ev.GetSequence()))
				delete(open, id)
			}
		}
	}
	sort.Strings(dropped)
	return dropped
}

// listRuns is the ID of every run of the driver's tenant.
func listRuns(t *testing.T, ctx context.Context, cl *client.Client) []string {
	t.Helper()
	var ids []string
	req := &reinv1.ListRunsRequest{PageSize: 1000}
	for {
		page, err := cl.Runs.ListRuns(ctx, req)
		if err != nil {
			t.Fatalf("ListRuns: %v", err)
		}
		for _, r := range page.GetRuns() {
			ids = append(ids, r.GetRunId())
		}
		if page.GetNextPageToken() == "" {
			slices.Sort(ids)
			return ids
		}
		req.PageToken = page.GetNextPageToken()
	}
}
