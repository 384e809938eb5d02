package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// watchBaseline serves the broadcaster with a plain grpc.Server on loopback
// TCP and drives the same streams.
func watchBaseline(ctx context.Context, be Backend, p watchPlan, path string) (watchRound, error) {
	defer os.Remove(path)
	st, err := be.Open(path, false)
	if err != nil {
		return watchRound{}, err
	}
	defer st.Close()
	for _, id := range p.ids {
		if _, _, err := st.Create(ctx, watchRunStarted(id)); err != nil {
			return watchRound{}, err
		}
	}
	b := newBroadcaster(p)
	side, stop, err := serveBroadcaster(b)
	if err != nil {
		return watchRound{}, err
	}
	defer stop()
	side.commit = func(ctx context.Context, run int, ev *reinv1.Event) (time.Time, error) {
		// The same durable append as the figure's writers make, then a
		// plain in-memory publish.
		if _, err := st.Append(ctx, p.ids[run], ev.GetSequence()-1, []*reinv1.Event{ev}); err != nil {
			return time.Time{}, err
		}
		t := time.Now()
		b.publish(run, ev)
		return t, nil
	}
	return driveWatch(ctx, p, side)
}

// serveBroadcaster serves b with a plain grpc.Server, no interceptors, on
// loopback TCP. The side it returns has no commit yet.
func serveBroadcaster(b *broadcaster) (watchSide, func(), error) {
	srv := grpc.NewServer(grpc.MaxConcurrentStreams(4096))
	reinv1.RegisterRunServiceServer(srv, b)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return watchSide{}, nil, err
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	stop := func() {
		srv.Stop()
		<-served
	}
	return watchSide{addr: lis.Addr().String()}, stop, nil
}

// broadcaster is the baseline's RunService: WatchRun streams a run's events
// from an in-memory log, each published event sent to every stream of its
// run through the stream's buffered channel.
type broadcaster struct {
	reinv1.UnimplementedRunServiceServer
	index map[string]int
	runs  []*broadcastRun
	// capacity is a stream's channel's: a whole run, so publish never
	// blocks.
	capacity int
}

type broadcastRun struct {
	mu   sync.Mutex
	log  []*reinv1.WatchRunResponse
	subs map[chan *reinv1.WatchRunResponse]struct{}
}

func newBroadcaster(p watchPlan) *broadcaster {
	b := &broadcaster{index: map[string]int{}, runs: make([]*broadcastRun, p.runs), capacity: int(p.last())}
	for i, id := range p.ids {
		b.index[id] = i
		// The log starts at sequence 1, like the figure's runs.
		b.runs[i] = &broadcastRun{
			log:  []*reinv1.WatchRunResponse{{Event: watchRunStarted(id)}},
			subs: map[chan *reinv1.WatchRunResponse]struct{}{},
		}
	}
	return b
}

// publish appends ev to its run's log and hands it to every stream of the
// run.
func (b *broadcaster) publish(run int, ev *reinv1.Event) {
	r := b.runs[run]
	m := &reinv1.WatchRunResponse{Event: ev}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, m)
	for c := range r.subs {
		c <- m
	}
}

func (b *broadcaster) WatchRun(req *reinv1.WatchRunRequest, stream grpc.ServerStreamingServer[reinv1.WatchRunResponse]) error {
	i, ok := b.index[req.GetRunId()]
	if !ok {
		return fmt.Errorf("no run %q", req.GetRunId())
	}
	r := b.runs[i]
	c := make(chan *reinv1.WatchRunResponse, b.capacity)
	r.mu.Lock()
	for _, m := range r.log {
		if m.GetEvent().GetSequence() > req.GetAfterSequence() {
			c <- m
		}
	}
	r.subs[c] = struct{}{}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.subs, c)
		r.mu.Unlock()
	}()
	ctx := stream.Context()
	for {
		select {
		case m := <-c:
			if err := stream.Send(m); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
