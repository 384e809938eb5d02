package powerloss_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/reinhq/rein/client"
	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// rpcTimeout bounds one call.
const rpcTimeout = 10 * time.Second

const stCompleted = reinv1.RunStatus_RUN_STATUS_COMPLETED

// workload is the runs a case drives, all at once.
type workload struct {
	runs  int           // how many
	steps int           // the tool calls each makes before its answer
	delay time.Duration // the model's time for each reply
	// erase has the first run deleted once it ended, which has the store
	// checkpoint, cut its log and scrub (rewrite and rename) its file.
	erase bool
}

// contract is run i's task: steps reads of its record, then an answer.
func (w workload) contract(i int) *reinv1.TaskContract {
	record := fmt.Sprintf("R-%03d", i)
	args, err := structpb.NewStruct(map[string]any{"record": record})
	if err != nil {
		panic(err)
	}
	reply := func(d *reinv1.Decision) *reinv1.ScriptedReply {
		return &reinv1.ScriptedReply{
			Reply:   &reinv1.ScriptedReply_Decision{Decision: d},
			Usage:   &reinv1.Usage{InputTokens: 100, OutputTokens: 10},
			DelayMs: uint32(w.delay.Milliseconds()),
		}
	}
	var script []*reinv1.ScriptedReply
	for s := range w.steps {
		script = append(script, reply(&reinv1.Decision{Action: &reinv1.Decision_ToolCall{ToolCall: &reinv1.ToolCall{
			Tool: readTool, CallId: fmt.Sprintf("c%d", s+1), Arguments: args,
		}}}))
	}
	script = append(script, reply(&reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: record + " read."}}}))
	return &reinv1.TaskContract{
		Goal:   "Read record " + record + ".",
		Tools:  []*reinv1.ToolGrant{{Name: readTool, Description: "Read a record.", Tier: reinv1.ToolTier_TOOL_TIER_READ}},
		Model:  &reinv1.ModelSpec{Provider: "script", Name: "powerloss", Script: script},
		Labels: map[string]string{"test": "powerloss"},
	}
}

// driven is what the driver was told of one run, across generations:
// every commit the server acknowledged.
type driven struct {
	index     int
	requestID string
	erase     bool

	mu      sync.Mutex
	runID   string
	started []uint64        // versions StartRun answered
	seen    []*reinv1.Event // events watches handed over, every generation's
	deleted bool            // DeleteRun answered
	asked   bool            // DeleteRun was called
	ended   bool            // a watch followed it to its end
	errs    []string        // what a driver found wrong on the way
}

func newRuns(w workload) []*driven {
	runs := make([]*driven, w.runs)
	for i := range runs {
		runs[i] = &driven{index: i, requestID: fmt.Sprintf("powerloss-%02d", i), erase: w.erase && i == 0}
	}
	return runs
}

func transient(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted:
		return true
	}
	return false
}

// drive drives the run on the generation serving now, until ctx ends or the
// run ended (and, to be erased, was deleted). It returns an error only
// for something wrong, not for ctx ending.
func (d *driven) drive(ctx context.Context, cl *client.Client, w workload) error {
	d.mu.Lock()
	asked := d.asked
	d.mu.Unlock()
	if asked {
		return nil // deleted, or being: its request ID would start it anew
	}
	var runID string
	for {
		cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
		resp, err := cl.Runs.StartRun(cctx, &reinv1.StartRunRequest{RequestId: d.requestID, Contract: w.contract(d.index)})
		cancel()
		if err == nil {
			runID = resp.GetRun().GetRunId()
			d.mu.Lock()
			was := d.runID
			d.runID = runID
			d.started = append(d.started, resp.GetRun().GetVersion())
			d.mu.Unlock()
			if was != "" && was != runID {
				return fmt.Errorf("StartRun %s answered run %s, but it had answered %s before: the acknowledged run is gone", d.requestID, runID, was)
			}
			if was != "" && resp.GetCreated() {
				return fmt.Errorf("StartRun %s created run %s again after it was acknowledged: the acknowledged run is gone", d.requestID, runID)
			}
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		if !transient(err) {
			return fmt.Errorf("StartRun %s: %w", d.requestID, err)
		}
	}
	err := cl.Watch(ctx, runID, 0, func(ev *reinv1.Event) error {
		d.mu.Lock()
		d.seen = append(d.seen, proto.Clone(ev).(*reinv1.Event))
		d.mu.Unlock()
		return nil
	})
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return fmt.Errorf("watch run %s: %w", runID, err)
	}
	d.mu.Lock()
	d.ended = true
	d.mu.Unlock()
	if !d.erase {
		return nil
	}
	d.mu.Lock()
	d.asked = true
	d.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	if _, err := cl.Runs.DeleteRun(cctx, &reinv1.DeleteRunRequest{RunId: runID, Reason: "power-loss test"}); err != nil {
		if ctx.Err() != nil || transient(err) {
			return nil
		}
		return fmt.Errorf("DeleteRun %s: %w", runID, err)
	}
	d.mu.Lock()
	d.deleted = true
	d.mu.Unlock()
	return nil
}

// drivers is one generation's drivers.
type drivers struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when every driver returned
	runs   []*driven
}

// driveAll drives every run on the generation serving now.
func driveAll(ctx context.Context, cl *client.Client, w workload, runs []*driven) *drivers {
	ctx, cancel := context.WithCancel(ctx)
	ds := &drivers{cancel: cancel, done: make(chan struct{}), runs: runs}
	var wg sync.WaitGroup
	for _, d := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := d.drive(ctx, cl, w); err != nil {
				d.mu.Lock()
				d.errs = append(d.errs, err.Error())
				d.mu.Unlock()
			}
		}()
	}
	go func() {
		wg.Wait()
		close(ds.done)
	}()
	return ds
}

// stop ends the drivers and waits for them.
func (ds *drivers) stop() {
	ds.cancel()
	<-ds.done
}

// acknowledged is how many commits the server acknowledged, in all.
func acknowledged(runs []*driven) (starts, events int) {
	for _, d := range runs {
		d.mu.Lock()
		starts += len(d.started)
		events += len(d.seen)
		d.mu.Unlock()
	}
	return starts, events
}

// runLog is a run as the server holds it.
type runLog struct {
	run    *reinv1.Run
	events []*reinv1.Event
}

func fetchLog(ctx context.Context, cl *client.Client, runID string) (runLog, error) {
	cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	got, err := cl.Runs.GetRun(cctx, &reinv1.GetRunRequest{RunId: runID})
	if err != nil {
		return runLog{}, err
	}
	l := runLog{run: got.GetRun()}
	req := &reinv1.ListEventsRequest{RunId: runID, PageSize: 1000}
	for {
		page, err := cl.Runs.ListEvents(cctx, req)
		if err != nil {
			return runLog{}, fmt.Errorf("ListEvents %s: %w", runID, err)
		}
		l.events = append(l.events, page.GetEvents()...)
		if page.GetNextPageToken() == "" {
			return l, nil
		}
		req.PageToken = page.GetNextPageToken()
	}
}

// verify compares what the server holds now with every commit it
// acknowledged, and says what is wrong: an acknowledged run or event
// missing or changed, a gap, a run that did not end completed, a deletion
// undone, a driver's complaint.
func verify(ctx context.Context, cl *client.Client, runs []*driven) []string {
	var problems []string
	report := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	for _, d := range runs {
		d.mu.Lock()
		runID, started, seen, deleted, asked, errs := d.runID, d.started, d.seen, d.deleted, d.asked, d.errs
		d.mu.Unlock()
		for _, e := range errs {
			report("run %d: %s", d.index, e)
		}
		if runID == "" {
			report("run %d (request %s) was never started", d.index, d.requestID)
			continue
		}
		l, err := fetchLog(ctx, cl, runID)
		if status.Code(err) == codes.NotFound && asked {
			continue // deleted, as asked
		}
		if status.Code(err) == codes.NotFound {
			report("run %d (%s): StartRun acknowledged it, but the server does not know it: the acknowledged run is lost", d.index, runID)
			continue
		}
		if err != nil {
			report("run %d (%s): %v", d.index, runID, err)
			continue
		}
		if deleted {
			report("run %d (%s): DeleteRun was acknowledged, yet the run is back", d.index, runID)
		}
		for i, ev := range l.events {
			if ev.GetSequence() != uint64(i+1) || ev.GetRunId() != runID {
				report("run %d (%s): event %d of the log has run %s and sequence %d", d.index, runID, i+1, ev.GetRunId(), ev.GetSequence())
				break
			}
		}
		if got := uint64(len(l.events)); got != l.run.GetVersion() {
			report("run %d (%s): the log holds %d events but the run is at version %d", d.index, runID, got, l.run.GetVersion())
		}
		if l.run.GetStatus() != stCompleted {
			report("run %d (%s) is %s, not completed: reason %q, last error %q", d.index, runID, l.run.GetStatus(), l.run.GetStatusReason(), l.run.GetLastError())
		}
		for _, v := range started {
			if v > l.run.GetVersion() {
				report("run %d (%s): StartRun acknowledged version %d, but the run is at version %d: acknowledged events are lost", d.index, runID, v, l.run.GetVersion())
			}
		}
		lost := 0
		for _, ev := range seen {
			s := ev.GetSequence()
			if s == 0 || s > uint64(len(l.events)) || !proto.Equal(ev, l.events[s-1]) {
				if lost++; lost <= 3 {
					held := "nothing"
					if s > 0 && s <= uint64(len(l.events)) {
						held = payloadName(l.events[s-1])
					}
					report("run %d (%s): a watch handed over event %d (%s), but the store holds %s there: an acknowledged event is lost",
						d.index, runID, s, payloadName(ev), held)
				}
			}
		}
		if lost > 3 {
			report("run %d (%s): … %d acknowledged events lost in all", d.index, runID, lost)
		}
	}
	slices.Sort(problems)
	return problems
}

// payloadName is the name of an event's payload field.
func payloadName(ev *reinv1.Event) string {
	m := ev.ProtoReflect()
	od := m.Descriptor().Oneofs().ByName("payload")
	if od == nil {
		return "?"
	}
	if f := m.WhichOneof(od); f != nil {
		return string(f.Name())
	}
	return "none"
}

// mentionsLoss reports whether a problem is acknowledged data lost.
func mentionsLoss(problems []string) bool {
	for _, p := range problems {
		if strings.Contains(p, "lost") || strings.Contains(p, "gone") {
			return true
		}
	}
	return false
}

// errNeverCut is a generation's error when its runs ended before its cut
// point came.
var errNeverCut = errors.New("the cut point never came")
