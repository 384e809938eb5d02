package bench

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/archive"
	"github.com/reinhq/rein/internal/lifecycle"
	"github.com/reinhq/rein/server"
)

// Kinds of run the reads compare, as ReadLatency.Run names them.
const (
	readLive         = "live"
	readArchivedCold = "archived_cold"
	readArchivedWarm = "archived_warm"
)

// readKinds are the kinds of run as the text names them.
var readKinds = map[string]string{
	readLive:         "live",
	readArchivedCold: "archived, cold cache",
	readArchivedWarm: "archived, warm cache",
}

// ReadLatency is one read RPC's latency, client to client through the gRPC
// server on loopback TCP, on one kind of run (Run): a finished run still in
// the live store ("live"), an archived run
// read for the first time since the server opened its archive (its
// cache cold: the object is fetched, checked and decoded; a file://
// archive's file may still be in the OS page cache; "archived_cold"), or
// an archived run read before (its export in the archive's cache;
// "archived_warm").
type ReadLatency struct {
	RPC     string  `json:"rpc"`
	Run     string  `json:"run"`
	Samples int     `json:"samples"`
	P50Ms   float64 `json:"p50_ms"`
	P99Ms   float64 `json:"p99_ms"`
}

// readLatencies serves s (whose archived runs are archived) with arch
// through a server.Node, finishes lifecycleLiveRuns live runs through its
// engine, and times GetRun and ListEvents on each kind of run, the kinds
// interleaved call by call. The node takes s over and closes it.
func readLatencies(ctx context.Context, o Options, s lifecycle.Backend, arch *archive.Archive, archived []string) ([]ReadLatency, error) {
	// No Policy: nothing is swept while the reads run, so the live runs
	// stay live.
	node, err := server.Open(ctx, server.Config{Store: s, Archive: arch, Tools: lifecycleTools()})
	if err != nil {
		return nil, err
	}
	defer node.Close()
	live, err := finishRuns(ctx, node.Engine, "live", o.scaled(lifecycleLiveRuns, 1))
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	served := make(chan error, 1)
	go func() { served <- node.GRPC.Serve(lis) }()
	defer func() {
		node.Close()
		<-served
	}()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	c := reinv1.NewRunServiceClient(cc)

	// Each RPC reads archived runs of its own cold, so that one's read
	// does not warm the other's.
	cold := min(o.scaled(lifecycleColdReads, 1), len(archived)/2)
	if cold < 1 {
		return nil, fmt.Errorf("reads: %d archived runs, want at least 2", len(archived))
	}
	rpcs := []struct {
		name string
		call func(ctx context.Context, runID string, archived bool) error
		cold []string
	}{
		{"GetRun", func(ctx context.Context, id string, archived bool) error { return getRun(ctx, c, id, archived) }, archived[:cold]},
		{"ListEvents", func(ctx context.Context, id string, archived bool) error { return listEvents(ctx, c, id) }, archived[cold : 2*cold]},
	}
	// The connection and the server's code paths warm up first, on live
	// runs only.
	for i := range 20 {
		for _, rpc := range rpcs {
			if err := rpc.call(ctx, live[i%len(live)], false); err != nil {
				return nil, err
			}
		}
	}
	samples := make(map[string]map[string][]float64, len(rpcs))
	timed := func(rpc, kind, id string, call func(context.Context, string, bool) error) error {
		t0 := time.Now()
		if err := call(ctx, id, kind != readLive); err != nil {
			return fmt.Errorf("%s of a run %s (%s): %w", rpc, kind, id, err)
		}
		samples[rpc][kind] = append(samples[rpc][kind], ms(time.Since(t0)))
		return nil
	}
	warm := max(o.scaled(lifecycleWarmReads, 2), cold)
	for _, rpc := range rpcs {
		samples[rpc.name] = map[string][]float64{}
	}
	for i := range warm {
		for _, rpc := range rpcs {
			if err := timed(rpc.name, readLive, live[i%len(live)], rpc.call); err != nil {
				return nil, err
			}
			if i < cold {
				if err := timed(rpc.name, readArchivedCold, rpc.cold[i], rpc.call); err != nil {
					return nil, err
				}
			}
			if i > 0 { // a run read cold before, now in the cache
				if err := timed(rpc.name, readArchivedWarm, rpc.cold[(i-1)%cold], rpc.call); err != nil {
					return nil, err
				}
			}
		}
	}
	var out []ReadLatency
	for _, rpc := range rpcs {
		for _, kind := range []string{readLive, readArchivedCold, readArchivedWarm} {
			vs := samples[rpc.name][kind]
			out = append(out, ReadLatency{RPC: rpc.name, Run: kind, Samples: len(vs), P50Ms: percentile(vs, 0.5), P99Ms: percentile(vs, 0.99)})
		}
	}
	return out, nil
}

// getRun reads a run and checks it ended, and is archived when archived.
func getRun(ctx context.Context, c reinv1.RunServiceClient, runID string, archived bool) error {
	resp, err := c.GetRun(ctx, &reinv1.GetRunRequest{RunId: runID})
	if err != nil {
		return err
	}
	run := resp.GetRun()
	if run.GetStatus() != reinv1.RunStatus_RUN_STATUS_COMPLETED || (run.GetArchive() != nil) != archived || run.GetResult().GetText() == "" {
		return fmt.Errorf("run %s read as %s, archived %v, answer %q", runID, run.GetStatus(), run.GetArchive() != nil, run.GetResult().GetText())
	}
	return nil
}

// listEvents reads a run's events (one page holds them all) and checks
// they are its whole log.
func listEvents(ctx context.Context, c reinv1.RunServiceClient, runID string) error {
	resp, err := c.ListEvents(ctx, &reinv1.ListEventsRequest{RunId: runID})
	if err != nil {
		return err
	}
	evs := resp.GetEvents()
	if len(evs) == 0 || resp.GetNextPageToken() != "" || evs[len(evs)-1].GetStatusChanged() == nil {
		return fmt.Errorf("run %s listed %d events, more after: %v", runID, len(evs), resp.GetNextPageToken() != "")
	}
	return nil
}
