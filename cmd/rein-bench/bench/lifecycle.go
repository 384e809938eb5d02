package bench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"golang.org/x/sync/errgroup"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/archive"
	"github.com/reinhq/rein/internal/engine"
	"github.com/reinhq/rein/internal/export"
	"github.com/reinhq/rein/internal/lifecycle"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/tools"
	"github.com/reinhq/rein/server"
)

// Sizes of the lifecycle scenario at scale 1.
const (
	// lifecycleArchiveRuns is how many finished runs each round archives
	// (and the baseline puts).
	lifecycleArchiveRuns = 150
	// lifecycleToolCalls is each run's read steps; with the answer, a run
	// is 24 events.
	lifecycleToolCalls = 5
	// lifecycleLiveRuns are the runs left live for the reads' comparison.
	lifecycleLiveRuns = 20
	// lifecycleColdReads is how many archived runs each read RPC reads
	// with the archive's cache cold (one read each), at most.
	lifecycleColdReads = 100
	// lifecycleWarmReads is how many reads of live runs, and of archived
	// runs in the cache, each RPC makes.
	lifecycleWarmReads = 300
	// lifecycleSizeRounds and lifecycleSizeRuns shape the steady workload
	// whose store size is sampled: rounds of runs started and finished.
	lifecycleSizeRounds = 20
	lifecycleSizeRuns   = 25
	// lifecycleRetainRounds is the retention of the workload with a
	// lifecycle, in rounds (a round is an hour of the bench's clock).
	lifecycleRetainRounds = 4
	// lifecycleTarget is the archive throughput's target ratio to the
	// raw puts.
	lifecycleTarget = 0.7
)

// Lifecycle is what `rein-bench lifecycle` adds to Options.
type Lifecycle struct {
	// Archive is the blob store's URL (archive.Open: file:///DIR,
	// s3://BUCKET?endpoint=…&region=… with credentials from the
	// environment); "" means a directory in the bench's temporary one.
	// The bench deletes every object it wrote there.
	Archive string
	// SVG, when set, is a file to write the plot of the live store's size
	// to.
	SVG string
}

// LifecycleResult is the lifecycle scenario's measurement. Fields are
// added, never renamed.
type LifecycleResult struct {
	Scenario string `json:"scenario"`
	// Archive is the archive measured (its URL without the query); Temporary
	// says it was the bench's own directory.
	Archive   string `json:"archive"`
	Temporary bool   `json:"archive_temporary"`
	Rounds    int    `json:"rounds"`
	// Throughput is the keeper's archiving against raw puts.
	Throughput ArchiveThroughput `json:"archive_throughput"`
	// Reads are GetRun and ListEvents latencies through the gRPC server.
	Reads []ReadLatency `json:"reads"`
	// Size is the live store's size over a steady workload.
	Size SizeSeries `json:"live_store_size"`
	// SVG is the file the size plot was written to, if any.
	SVG string `json:"svg,omitempty"`
	// Seconds is the whole scenario's wall time.
	Seconds float64 `json:"seconds"`
}

// ArchiveThroughput is the keeper's archiving rate (Keeper.Sweep of runs
// that ended: read each run's log and blobs, write its export, read it back
// and check it, replace the run by its stub) against raw Archive.Puts of
// the same export bytes to the same archive. Figures are medians over the
// rounds; Ratio is the median of the rounds' ratios (the two sides of a
// round run back to back, in alternating order).
type ArchiveThroughput struct {
	Unit string `json:"unit"`
	// Runs is how many runs one round archives; Events, ExportBytes and
	// BlobBytes describe one run (means).
	Runs        int     `json:"runs"`
	Events      float64 `json:"events_per_run"`
	ExportBytes float64 `json:"export_bytes_per_run"`
	BlobBytes   float64 `json:"blob_bytes_per_run"`
	// ExportMs is the mean time the bench took, untimed, to make one
	// run's export as the keeper makes it (read its log and blobs,
	// encode) for the baseline: the keeper's sweep does the same work
	// within its time, so of its time a run beyond the put's, this is
	// the export and most of the rest the store's commit of the stub.
	ExportMs float64 `json:"export_ms_per_run"`
	Figure   float64 `json:"figure"`
	Baseline float64 `json:"baseline"`
	Ratio    float64 `json:"ratio"`
	Target   float64 `json:"target"`
	Met      bool    `json:"met"`
	// Figures, Baselines and Ratios are every round's, in order.
	Figures   []float64 `json:"figures"`
	Baselines []float64 `json:"baselines"`
	Ratios    []float64 `json:"ratios"`
}

// lifecycleTenant is the runs' tenant: the local admin's, the caller of a
// server without tokens, so that the reads see them.
func lifecycleTenant() string { return server.LocalPrincipal().Tenant }

// RunLifecycle measures the run lifecycle on the backend o names (its store
// must have a lifecycle, and be one file at the path it is opened at, as
// bolt's): the archiving's throughput against raw puts, the reads of an
// archived run against a live one through the gRPC server, and the live
// store's size over a steady workload with and without archiving and
// retention.
func RunLifecycle(ctx context.Context, o Options, l Lifecycle) (LifecycleResult, error) {
	t0 := time.Now()
	r := LifecycleResult{Scenario: "lifecycle", Rounds: o.rounds(), Temporary: l.Archive == "", SVG: l.SVG}
	be, err := o.backend(r.Scenario)
	if err != nil {
		return r, err
	}
	dir, err := tempDir(o, r.Scenario)
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	rawURL := l.Archive
	if rawURL == "" {
		abs, err := filepath.Abs(filepath.Join(dir, "archive"))
		if err != nil {
			return r, err
		}
		rawURL = (&url.URL{Scheme: "file", Path: filepath.ToSlash(abs)}).String()
	}
	arch, err := archive.Open(ctx, rawURL)
	if err != nil {
		return r, err
	}
	defer arch.Close()
	r.Archive = arch.Name()
	if err := arch.Check(ctx); err != nil {
		return r, err
	}
	// Every object written is deleted at the end, in an archive of the
	// operator's as in the bench's own.
	var written []string
	defer func() {
		dctx := context.WithoutCancel(ctx)
		for _, key := range written {
			_ = arch.Delete(dctx, key)
		}
	}()

	path := filepath.Join(dir, "archive.db")
	st, err := openLifecycleStore(be, path, false)
	if err != nil {
		return r, err
	}
	// archived are the runs the throughput rounds archived: the reads'
	// archived runs.
	var archived []string
	r.Throughput, archived, err = archiveThroughput(ctx, o, st, arch, &written)
	if err != nil {
		st.Close()
		return r, err
	}
	// The reads open a fresh archive, so that its cache starts cold; the
	// node takes the store over.
	readArch, err := archive.Open(ctx, rawURL)
	if err != nil {
		st.Close()
		return r, err
	}
	defer readArch.Close()
	if r.Reads, err = readLatencies(ctx, o, st, readArch, archived); err != nil {
		return r, err
	}
	if r.Size, err = sizeSeries(ctx, o, be, dir, arch); err != nil {
		return r, err
	}
	if l.SVG != "" {
		if err := os.WriteFile(l.SVG, sizeSVG(r.Size), 0o644); err != nil {
			return r, fmt.Errorf("write the plot: %w", err)
		}
	}
	r.Seconds = time.Since(t0).Seconds()
	return r, nil
}

// openLifecycleStore opens the backend's store at path and checks it has a
// lifecycle.
func openLifecycleStore(be Backend, path string, noSync bool) (lifecycle.Backend, error) {
	s, err := be.Open(path, noSync)
	if err != nil {
		return nil, err
	}
	b, ok := s.(lifecycle.Backend)
	if !ok {
		s.Close()
		return nil, fmt.Errorf("the %s backend's store has no lifecycle (store.Lifecycle)", be.Name)
	}
	return b, nil
}

// lifecycleFile is what the runs' read tool returns: a source file of about
// a kilobyte, so that each run's blobs (its model calls' new input) come to
// a few kilobytes.
func lifecycleFile() string {
	var b bytes.Buffer
	b.WriteString("package pkg\n\n// F does the thing the benchmark reads about.\nfunc F(x int) int {\n\treturn x * 2\n}\n")
	for i := 0; b.Len() < 1000; i++ {
		fmt.Fprintf(&b, "\n// G%d is one more function of a small file.\nfunc G%d() int { return %d }\n", i, i, i)
	}
	return b.String()
}

// lifecycleTools is the runs' read tool: it returns lifecycleFile.
func lifecycleTools() tools.Executor {
	return tools.NewFixtures(map[string][]tools.FixtureResult{"read_file": {{Output: structpb.NewStringValue(lifecycleFile())}}})
}

// lifecycleEngine is an engine on s with lifecycleTools; clock, when set,
// is its clock.
func lifecycleEngine(s store.Store, clock func() time.Time) *engine.Engine {
	return engine.New(engine.Config{Store: s, Tools: lifecycleTools(), Clock: clock})
}

// finishRuns starts n runs through e, each reading lifecycleToolCalls
// files then answering, and waits until every one completed; it returns
// their IDs.
func finishRuns(ctx context.Context, e *engine.Engine, prefix string, n int) ([]string, error) {
	ids := make([]string, n)
	for i := range ids {
		st, _, err := e.Start(ctx, engine.StartRequest{RequestID: fmt.Sprintf("%s-%d", prefix, i),
			Contract: stepsContract(lifecycleToolCalls, i+1), Principal: server.LocalPrincipal().ID, Tenant: lifecycleTenant()})
		if err != nil {
			return nil, err
		}
		ids[i] = st.RunID
	}
	for _, id := range ids {
		if err := e.Wait(ctx, id); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// pendingExport is a finished run's export, made as the keeper makes it,
// for the baseline to put.
type pendingExport struct {
	runID  string
	key    string // the baseline's key: beside the run's own object
	data   []byte
	events int
	blobs  int
}

// exportAsKeeper makes a run's export byte for byte as Keeper.Sweep does
// (the whole log, its blobs, exported at its end by "rein"), so that the
// baseline puts the same bytes; the rounds check it by the SHA-256 the
// keeper records.
func exportAsKeeper(ctx context.Context, s lifecycle.Backend, runID string) (pendingExport, error) {
	st, err := s.Load(ctx, runID)
	if err != nil {
		return pendingExport{}, err
	}
	if !runstate.Terminal(st.Status) {
		return pendingExport{}, fmt.Errorf("run %s is %s, want ended", runID, runstate.StatusName(st.Status))
	}
	var evs []*reinv1.Event
	for after := uint64(0); after < st.Version; {
		page, err := s.Events(ctx, runID, after, 1024)
		if err != nil {
			return pendingExport{}, err
		}
		if len(page) == 0 {
			return pendingExport{}, fmt.Errorf("run %s: its log ends at %d, before version %d", runID, after, st.Version)
		}
		evs = append(evs, page...)
		after = page[len(page)-1].GetSequence()
	}
	x, err := export.New(ctx, runID, evs, s)
	if err != nil {
		return pendingExport{}, err
	}
	x.ExportedAt = timestamppb.New(st.UpdatedAt)
	x.ExportedBy = "rein"
	data, err := export.Encode(x)
	if err != nil {
		return pendingExport{}, err
	}
	blobs := 0
	for _, b := range x.GetBlobs() {
		blobs += len(b)
	}
	return pendingExport{
		runID: runID, key: archive.Key(st.Tenant, st.UpdatedAt, runID+".raw"),
		data: data, events: len(evs), blobs: blobs,
	}, nil
}

// archiveThroughput runs the rounds of Keeper.Sweep against raw puts. Each
// round finishes a fresh set of runs on the same store (untimed), makes
// their exports for the baseline (untimed), then times the two sides, the
// keeper first in even rounds and the puts first in odd ones. It returns
// the runs archived.
func archiveThroughput(ctx context.Context, o Options, s lifecycle.Backend, arch *archive.Archive, written *[]string) (ArchiveThroughput, []string, error) {
	t := ArchiveThroughput{Unit: "runs/s", Runs: o.scaled(lifecycleArchiveRuns, 2), Target: lifecycleTarget}
	ls := lifecycle.NewStore(s, arch)
	e := lifecycleEngine(ls, nil)
	defer e.Close()
	k := &lifecycle.Keeper{Store: ls, Policy: func(string) lifecycle.Policy { return lifecycle.Policy{ArchiveOn: true} }}
	var archived []string
	var events, exportBytes, blobBytes, exportMs []float64
	for round := range o.rounds() {
		if err := ctx.Err(); err != nil {
			return t, nil, err
		}
		ids, err := finishRuns(ctx, e, fmt.Sprintf("archive-%d", round), t.Runs)
		if err != nil {
			return t, nil, err
		}
		xs := make([]pendingExport, len(ids))
		for i, id := range ids {
			t0 := time.Now()
			if xs[i], err = exportAsKeeper(ctx, s, id); err != nil {
				return t, nil, err
			}
			exportMs = append(exportMs, ms(time.Since(t0)))
			events = append(events, float64(xs[i].events))
			exportBytes = append(exportBytes, float64(len(xs[i].data)))
			blobBytes = append(blobBytes, float64(xs[i].blobs))
		}
		sweep := func() (measure, error) {
			t0 := time.Now()
			got, err := k.Sweep(ctx)
			m := measure{units: float64(got.Archived), elapsed: time.Since(t0)}
			if err == nil && (got.Archived != len(ids) || got.Failed != 0) {
				err = fmt.Errorf("the sweep archived %d runs with %d failures, want %d archived", got.Archived, got.Failed, len(ids))
			}
			return m, err
		}
		// The raw puts go as many at once as the keeper's (its Parallel),
		// so that the ratio is what the keeper adds to the same puts.
		raw := func() (measure, error) {
			now := time.Now()
			t0 := time.Now()
			g, gctx := errgroup.WithContext(ctx)
			g.SetLimit(lifecycle.Parallel)
			for _, x := range xs {
				g.Go(func() error {
					_, err := arch.Put(gctx, x.key, x.data, now)
					return err
				})
			}
			if err := g.Wait(); err != nil {
				return measure{}, err
			}
			for _, x := range xs {
				*written = append(*written, x.key)
			}
			return measure{units: float64(len(xs)), elapsed: time.Since(t0)}, nil
		}
		var f, b measure
		if round%2 == 0 {
			if f, err = sweep(); err == nil {
				b, err = raw()
			}
		} else {
			if b, err = raw(); err == nil {
				f, err = sweep()
			}
		}
		if err != nil {
			return t, nil, fmt.Errorf("archive throughput, round %d: %w", round+1, err)
		}
		// The baseline put the very bytes the keeper archived.
		for _, x := range xs {
			stub, err := s.Load(ctx, x.runID)
			if err != nil {
				return t, nil, err
			}
			if stub.Archive == nil {
				return t, nil, fmt.Errorf("run %s was not archived", x.runID)
			}
			*written = append(*written, stub.Archive.GetKey())
			if stub.Archive.GetSizeBytes() != uint64(len(x.data)) || stub.Archive.GetSha256() != sha256Hex(x.data) {
				return t, nil, fmt.Errorf("run %s: the keeper archived %d bytes (SHA-256 %s), the baseline's export of it is %d bytes (%s): the baseline no longer makes the keeper's export",
					x.runID, stub.Archive.GetSizeBytes(), stub.Archive.GetSha256(), len(x.data), sha256Hex(x.data))
			}
		}
		archived = append(archived, ids...)
		t.Figures = append(t.Figures, f.rate())
		t.Baselines = append(t.Baselines, b.rate())
		if b.rate() > 0 {
			t.Ratios = append(t.Ratios, f.rate()/b.rate())
		}
	}
	t.Figure, t.Baseline, t.Ratio = median(t.Figures), median(t.Baselines), median(t.Ratios)
	t.Met = t.Ratio >= t.Target
	t.Events, t.ExportBytes, t.BlobBytes, t.ExportMs = meanOf(events), meanOf(exportBytes), meanOf(blobBytes), meanOf(exportMs)
	return t, archived, nil
}

// median is the median of vs (the mean of the middle two for an even
// count), 0 for none.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// sha256Hex is data's SHA-256 in lower-case hex, as archive records it.
func sha256Hex(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}
