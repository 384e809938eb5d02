package server

import (
	"context"
	"log/slog"
	"sync"
	"time"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/step"
)

// OutputRelay carries the text of model calls in flight between the
// servers that share a store (internal/store/etcd's Relay): a watcher
// connected to one replica sees the output of a run another drives. The
// driving server writes a run's call to the relay only while another
// replica wants it, so a run nobody watches from elsewhere costs no write.
type OutputRelay interface {
	// WantOutput records that the replica named replica has watchers of
	// the run's output, until the func it returns is called.
	WantOutput(ctx context.Context, runID, replica string) (func(), error)
	// OutputWanted says whether a replica other than replica wants it.
	OutputWanted(ctx context.Context, runID, replica string) (bool, error)
	// PutOutput puts a piece of the run's call in flight on the server
	// named writer: the call's text from o.Offset, the bytes new since the
	// piece before; seq numbers the call's pieces from 1. DeleteOutput
	// says the call o names returned, and takes its pieces back.
	PutOutput(ctx context.Context, runID, writer string, seq uint64, o *reinv1.ModelOutput) error
	DeleteOutput(ctx context.Context, runID, writer string, o *reinv1.ModelOutput) error
	// FollowOutput calls fn with the pieces of each writer's call of the
	// run, in order, as the relay holds them now and as they are put (nil:
	// the writer's call ended), until ctx ends.
	FollowOutput(ctx context.Context, runID string, fn func(writer string, o *reinv1.ModelOutput))
}

const (
	// relayEvery is how often the driving server writes what a call's
	// text grew by to the relay while another replica wants it, and
	// relayLook how often it looks whether one does.
	relayEvery = 500 * time.Millisecond
	relayLook  = time.Second
	// maxRelayText bounds the text of one call written to the relay (a
	// request to etcd is at most 1.5 MiB by default): past it, the other
	// replicas' watchers are told it was truncated.
	maxRelayText = 512 << 10
	// relayEndWait bounds how long a call's end waits for its last text
	// to reach the relay, before the step commits the call's reply.
	relayEndWait = 2 * time.Second
)

// relayOutput is the step.Output of a replica: the hub, and the relay for
// the calls another replica wants.
type relayOutput struct {
	hub   *Hub
	relay OutputRelay
	name  string
	log   *slog.Logger

	mu    sync.Mutex
	calls map[string]*relayCall
}

// relayCall is a call being written to the relay: end takes its last
// state, finished is closed once that was written.
type relayCall struct {
	end      chan *reinv1.ModelOutput
	finished chan struct{}
}

var _ step.Output = (*relayOutput)(nil)

func newRelayOutput(hub *Hub, relay OutputRelay, name string, log *slog.Logger) *relayOutput {
	return &relayOutput{hub: hub, relay: relay, name: name, log: log, calls: map[string]*relayCall{}}
}

// Streams: a run's call streams while it has a watcher of its output
// here, or another replica wants it.
func (r *relayOutput) Streams(runID string) bool {
	if r.hub.Streams(runID) {
		return true
	}
	ok, err := r.relay.OutputWanted(context.Background(), runID, r.name)
	return ok && err == nil
}

func (r *relayOutput) Begin(runID string, call step.OutputCall) {
	r.hub.Begin(runID, call)
	rc := &relayCall{end: make(chan *reinv1.ModelOutput, 1), finished: make(chan struct{})}
	r.mu.Lock()
	r.calls[runID] = rc
	r.mu.Unlock()
	go r.write(runID, rc)
}

func (r *relayOutput) Write(runID, text string) { r.hub.Write(runID, text) }

// End hands the call's last state to its writer and waits (a little) for
// it to reach the relay, so that a watcher elsewhere has the whole text
// about when the call's reply is committed.
func (r *relayOutput) End(runID string) {
	r.mu.Lock()
	rc := r.calls[runID]
	delete(r.calls, runID)
	r.mu.Unlock()
	if rc != nil {
		last := r.hub.snapshot(runID)
		if last != nil {
			last.Done = true
		}
		rc.end <- last
		t := time.NewTimer(relayEndWait)
		select {
		case <-rc.finished:
		case <-t.C:
		}
		t.Stop()
	}
	r.hub.End(runID)
}

// write writes the call's text to the relay while another replica wants
// it: every relayEvery what it grew by, and its end. Each piece starts
// where the last one put ended, so that what the relay holds of a call is
// its text once, however long the call streams.
func (r *relayOutput) write(runID string, rc *relayCall) {
	defer close(rc.finished)
	ctx := context.Background()
	wanted := func() bool {
		ok, err := r.relay.OutputWanted(ctx, runID, r.name)
		return ok && err == nil
	}
	want, looked := wanted(), time.Now()
	var (
		sent      = 0     // bytes of the text put
		seq       uint64  // the last piece's number
		truncated = false // as the last piece said
		call      *reinv1.ModelOutput
	)
	put := func(o *reinv1.ModelOutput) {
		piece := &reinv1.ModelOutput{Requested: o.GetRequested(), Step: o.GetStep(), Attempt: o.GetAttempt(), Resumed: o.GetResumed(),
			Offset: uint64(sent), Text: o.GetText()[sent:], Done: o.GetDone(), Truncated: o.GetTruncated()}
		if err := r.relay.PutOutput(ctx, runID, r.name, seq+1, piece); err != nil {
			// It may have been stored: the next is put under the same
			// number, from the same offset, and replaces it.
			r.log.Debug("model output not relayed", "run_id", runID, "err", err)
			return
		}
		seq, sent, truncated, call = seq+1, len(o.GetText()), o.GetTruncated(), o
	}
	tick := time.NewTicker(relayEvery)
	defer tick.Stop()
	for {
		select {
		case last := <-rc.end:
			// Ended: its last text, if someone elsewhere wants it (not
			// looked for again: a call's end waits on no read).
			if last != nil && want && (call == nil || sameCall(call, last)) {
				put(last)
			}
			if call != nil {
				_ = r.relay.DeleteOutput(ctx, runID, r.name, call)
			}
			return
		case <-tick.C:
			if time.Since(looked) >= relayLook {
				want, looked = wanted(), time.Now()
			}
			if !want {
				continue
			}
			o := r.hub.snapshot(runID)
			if o == nil || call != nil && !sameCall(call, o) {
				continue
			}
			if call == nil || len(o.GetText()) > sent || o.GetTruncated() != truncated {
				put(o)
			}
		}
	}
}

// sameCall reports whether a and b are the same call's.
func sameCall(a, b *reinv1.ModelOutput) bool {
	return a.GetRequested() == b.GetRequested() && a.GetAttempt() == b.GetAttempt() && a.GetResumed() == b.GetResumed()
}

// relayFollows follows, for the runs this replica's watchers want the
// output of, what the relay holds, into the hub: one follow per run,
// shared by its watchers. No lock is held while the relay is asked.
type relayFollows struct {
	hub   *Hub
	relay OutputRelay
	name  string
	log   *slog.Logger

	mu   sync.Mutex
	runs map[string]*relayFollow
}

type relayFollow struct {
	watchers int
	stop     context.CancelFunc
}

// relayWantTimeout bounds the write that says a replica wants a run's
// output, and relayWantEvery is how often it is written again.
const (
	relayWantTimeout = 5 * time.Second
	relayWantEvery   = 10 * time.Second
)

// want says again that this replica wants the run's output, then takes
// back what said it before (prev), and returns what takes this back; if
// the relay cannot be told, prev stays.
func (f *relayFollows) want(ctx context.Context, runID string, prev func()) func() {
	wctx, cancel := context.WithTimeout(ctx, relayWantTimeout)
	defer cancel()
	unwant, err := f.relay.WantOutput(wctx, runID, f.name)
	if err != nil {
		if ctx.Err() == nil {
			f.log.Warn("watchers here may not see the model output of the run if another server drives it", "run_id", runID, "err", err)
		}
		return prev
	}
	prev()
	return unwant
}

func newRelayFollows(hub *Hub, relay OutputRelay, name string, log *slog.Logger) *relayFollows {
	return &relayFollows{hub: hub, relay: relay, name: name, log: log, runs: map[string]*relayFollow{}}
}

// join follows the run's output for a watcher until the func it returns
// is called. A relay that cannot be told costs the watcher the output of
// runs driven elsewhere, never its events.
func (f *relayFollows) join(runID string) func() {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl := f.runs[runID]
	if fl == nil {
		ctx, cancel := context.WithCancel(context.Background())
		fl = &relayFollow{stop: cancel}
		f.runs[runID] = fl
		go f.follow(ctx, runID)
	}
	fl.watchers++
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if fl.watchers--; fl.watchers == 0 {
			delete(f.runs, runID)
			fl.stop()
		}
	}
}

// follow says this replica wants the run's output, and takes what other
// servers write of it into the hub until ctx ends; then it takes the want
// back and, unless a new follow of the run began, ends the call it
// followed.
func (f *relayFollows) follow(ctx context.Context, runID string) {
	followed := make(chan struct{})
	go func() {
		defer close(followed)
		f.relay.FollowOutput(ctx, runID, func(writer string, o *reinv1.ModelOutput) {
			if writer != f.name { // this server's own writes: its hub has the call
				f.hub.relayed(runID, writer, o)
			}
		})
	}()
	// The want is put again now and then: its key ends with this server's
	// lease, and a server that lost its lease is granted a new one.
	unwant := f.want(ctx, runID, func() {})
	tick := time.NewTicker(relayWantEvery)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case <-tick.C:
			unwant = f.want(ctx, runID, unwant)
		case <-ctx.Done():
			done = true
		}
	}
	<-followed
	unwant()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.runs[runID] == nil {
		f.hub.relayed(runID, "", nil)
	}
}
