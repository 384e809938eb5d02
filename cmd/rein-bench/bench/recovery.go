package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/server"
)

// Sizes and targets of the recovery scenario at scale 1.
const (
	// recoveryRuns is how many runs the store holds; one in
	// recoveryRunningEvery is running (the server must resume it), the rest
	// completed.
	recoveryRuns         = 10_000
	recoveryRunningEvery = 10
	// recoverySteps is how many model_requested/model_returned pairs each
	// run holds after its run_started: with a completed run's status_changed,
	// about 100 events a run, about 1,000,000 in all.
	recoverySteps = 49
	// recoveryServingTarget bounds the time from process start to a health
	// check answering SERVING on the full store.
	recoveryServingTarget = 2 * time.Second
	// recoveryRSSTargetMiB bounds the server's peak resident memory (VmHWM)
	// over the recovery, to every running run resumed and ended.
	recoveryRSSTargetMiB = 256
	// recoveryAnonTargetMiB bounds the server's own memory (RssAnon, its
	// heap, stacks and runtime; the store's mapped file pages apart, since
	// those are page cache), at its highest over the recovery.
	recoveryAnonTargetMiB = 64
	// recoveryTimeout bounds one side of a round: start, serving, every
	// running run ended.
	recoveryTimeout = 5 * time.Minute
	// recoveryStopTimeout bounds a server's graceful stop after SIGTERM.
	recoveryStopTimeout = 30 * time.Second
	// recoveryBuilders is how many goroutines build the store: their
	// creates and appends share commits through the store's group commit.
	recoveryBuilders = 64
)

// Recovery measures a restart: how long a `rein serve` process takes, from
// its start, to serve on a store of recoveryRuns runs (one in
// recoveryRunningEvery running, about 1,000,000 events), and to resume and
// end every running run; and how much memory it holds doing it.
//
// The store is built once, untimed, through the store (without fsync), and
// synced to disk. Each figure round serves a fresh copy of it (copied and
// synced, untimed, since the round changes it: the running runs end) in a
// separate process of the rein binary (this process when it is rein, else
// one built with `go build` from the module), so that the times include
// the process's start and the memory is the server's alone. The store file
// is in the OS's page cache, as it is after a process restart (not after a
// reboot). A running run's contract has a scripted model whose every reply is
// a final answer: resumed, it makes one model call and completes.
//
// The figure is 1 / the seconds from the process's start to the first
// health check answering SERVING, in starts/s; Extra's all_resumed_seconds
// is the time until a ListRuns of running runs comes back empty (then,
// untimed, the round checks that every run of the store is completed), and
// serving_log_seconds the time to the "rein serving" log line. The
// baseline is the same binary's start to SERVING on a new, empty store:
// the cost of a process and a gRPC server with nothing to recover. Ratio is
// baseline seconds / figure seconds (at most about 1).
//
// There is no ratio target (Target is 0); the targets are absolute: serving
// in at most recoveryServingTarget (the best round) and a peak resident
// memory (VmHWM, the worst round) of at most recoveryRSSTargetMiB, and of
// the process's own memory (RssAnon, sampled at serving, at each poll of the
// runs and at the end; the worst round's highest sample) of at most
// recoveryAnonTargetMiB. Met is all three; a round fails unless every
// running run was resumed and completed. Resident memory counts the store's
// pages bbolt maps (RssFile, rss_file_mib; with the file cached, the kernel
// maps the cached pages around each page touched): page cache, not the
// process's; Extra's rss_anon_mib is the process's own memory at the end,
// rss_anon_peak_mib its highest sample.
func Recovery(ctx context.Context, o Options) (Result, error) {
	r := Result{Scenario: "recovery", Unit: "starts/s", Extra: map[string]float64{}}
	be, err := o.backend(r.Scenario)
	if err != nil {
		return r, err
	}
	runs := o.scaled(recoveryRuns, recoveryRunningEvery)
	plan := recoveryPlan{runs: runs, steps: recoverySteps, every: recoveryRunningEvery}
	r.Runs, r.Events = runs, plan.events()
	r.Extra["runs"] = float64(runs)
	r.Extra["running_runs"] = float64(plan.running())
	r.Extra["events"] = float64(plan.events())
	r.Extra["serving_target_seconds"] = recoveryServingTarget.Seconds()
	r.Extra["rss_target_mib"] = recoveryRSSTargetMiB
	r.Extra["rss_anon_target_mib"] = recoveryAnonTargetMiB

	dir, err := tempDir(o, "recovery")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)

	bin, built, err := reinBinary(ctx, o.Rein, dir)
	if err != nil {
		return r, err
	}
	if built {
		r.Extra["built_binary"] = 1
	}

	src := filepath.Join(dir, "store.db")
	t0 := time.Now()
	if err := buildRecoveryStore(ctx, be, src, plan); err != nil {
		return r, fmt.Errorf("recovery: build the store: %w", err)
	}
	r.Extra["build_seconds"] = time.Since(t0).Seconds()
	if info, err := os.Stat(src); err == nil {
		r.Extra["store_mib"] = float64(info.Size()) / (1 << 20)
	}

	var figs, bases []recoveryRound
	figure := func(round int) (measure, error) {
		db := filepath.Join(dir, fmt.Sprintf("figure-%d.db", round))
		defer os.Remove(db)
		if err := copyFileSynced(src, db); err != nil {
			return measure{}, err
		}
		rr, err := recoveryStart(ctx, bin, db, plan.runs)
		if err != nil {
			return measure{}, err
		}
		figs = append(figs, rr)
		return measure{units: 1, elapsed: rr.serving}, nil
	}
	baseline := func(round int) (measure, error) {
		db := filepath.Join(dir, fmt.Sprintf("baseline-%d.db", round))
		defer os.Remove(db)
		rr, err := recoveryStart(ctx, bin, db, 0)
		if err != nil {
			return measure{}, err
		}
		bases = append(bases, rr)
		return measure{units: 1, elapsed: rr.serving}, nil
	}
	if err := alternate(ctx, &r, o.rounds(), figure, baseline); err != nil {
		return r, err
	}

	x := r.Extra
	x["serving_seconds"] = r.Seconds
	x["baseline_serving_seconds"] = r.BaselineSeconds
	for i, f := range figs {
		worstOf(x, "serving_seconds_worst", f.serving.Seconds())
		lowestOf(x, "serving_log_seconds", f.logged.Seconds())
		lowestOf(x, "all_resumed_seconds", f.resumed.Seconds())
		worstOf(x, "all_resumed_seconds_worst", f.resumed.Seconds())
		worstOf(x, "rss_serving_mib", f.rssServing)
		worstOf(x, "rss_mib", f.rss)
		worstOf(x, "rss_peak_mib", f.peak)
		worstOf(x, "rss_anon_mib", f.anon)
		worstOf(x, "rss_anon_peak_mib", f.anonPeak)
		worstOf(x, "rss_file_mib", f.file)
		b := bases[i]
		worstOf(x, "baseline_serving_seconds_worst", b.serving.Seconds())
		lowestOf(x, "baseline_serving_log_seconds", b.logged.Seconds())
		worstOf(x, "baseline_rss_mib", b.rss)
	}
	r.Met = r.Seconds > 0 && r.Seconds <= recoveryServingTarget.Seconds() &&
		x["rss_peak_mib"] > 0 && x["rss_peak_mib"] <= recoveryRSSTargetMiB &&
		x["rss_anon_peak_mib"] > 0 && x["rss_anon_peak_mib"] <= recoveryAnonTargetMiB
	return r, nil
}

// worstOf keeps the largest value seen under key; lowestOf the smallest.
func worstOf(extra map[string]float64, key string, v float64) { bestOf(extra, key, v) }

func lowestOf(extra map[string]float64, key string, v float64) {
	if old, ok := extra[key]; !ok || v < old {
		extra[key] = v
	}
}

// recoveryPlan is the recovery store's shape: runs runs of steps
// model_requested/model_returned pairs after their run_started; run i
// (from 0) is running when i mod every is every-1, otherwise completed with
// a status_changed.
type recoveryPlan struct {
	runs, steps, every int
}

func (p recoveryPlan) isRunning(i int) bool { return i%p.every == p.every-1 }

func (p recoveryPlan) running() int { return p.runs / p.every }

// events is the store's event count.
func (p recoveryPlan) events() int {
	return p.runs*(1+2*p.steps) + p.runs - p.running()
}

func recoveryRunID(i int) string { return fmt.Sprintf("run_%08d", i+1) }

// recoveryContract is the contract of a running run: a scripted model with
// one more reply than the run has steps, each a final answer, so the
// resumed run's next model call ends it.
func recoveryContract(steps int) *reinv1.TaskContract {
	c := benchContract()
	reply := &reinv1.ScriptedReply{
		Reply: &reinv1.ScriptedReply_Decision{Decision: &reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{
			FinalAnswer: &reinv1.FinalAnswer{Text: "done"},
		}}},
		Usage: &reinv1.Usage{InputTokens: 1200, OutputTokens: 10},
	}
	for range steps + 1 {
		c.Model.Script = append(c.Model.Script, reply)
	}
	return c
}

// buildRecoveryStore creates p's store at path through the backend's store
// without fsync (recoveryBuilders goroutines, so that their writes share commits),
// closes it and syncs the file once. Run i is created at benchTime + i
// seconds, so IDs and creation times sort alike; every run is the local
// principal's, whom a server without tokens serves (ListRuns shows a
// caller its tenant's runs only).
func buildRecoveryStore(ctx context.Context, be Backend, path string, p recoveryPlan) error {
	s, err := be.Open(path, true)
	if err != nil {
		return err
	}
	defer s.Close()
	// Read-only messages shared by every run: the store marshals them.
	done, running := benchContract(), recoveryContract(p.steps)
	base := benchTime().AsTime()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, recoveryBuilders)
	for w := range recoveryBuilders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// One template of the step events per builder, its run ID and
			// time set per run (IDs have one length, so the padding holds).
			tmpl := make([]*reinv1.Event, 0, 2*p.steps+1)
			for seq := uint64(2); seq < uint64(2+2*p.steps); seq++ {
				tmpl = append(tmpl, stepEvent(recoveryRunID(0), seq, benchTime(), true))
			}
			end := &reinv1.Event{Sequence: uint64(2 + 2*p.steps), Actor: "harness", Payload: &reinv1.Event_StatusChanged{
				StatusChanged: &reinv1.StatusChanged{
					From: reinv1.RunStatus_RUN_STATUS_RUNNING, To: reinv1.RunStatus_RUN_STATUS_COMPLETED, Reason: "final_answer",
				},
			}}
			for i := w; i < p.runs; i += recoveryBuilders {
				if ctx.Err() != nil {
					return
				}
				id := recoveryRunID(i)
				at := timestamppb.New(base.Add(time.Duration(i) * time.Second))
				contract := done
				if p.isRunning(i) {
					contract = running
				}
				started := &reinv1.Event{
					RunId: id, Sequence: 1, RecordedAt: at, Actor: "principal:bench",
					Payload: &reinv1.Event_RunStarted{RunStarted: &reinv1.RunStarted{
						Contract: contract, Principal: server.LocalPrincipal().ID, Tenant: server.LocalPrincipal().Tenant,
					}},
				}
				if _, _, err := s.Create(ctx, started); err != nil {
					errc <- fmt.Errorf("create %s: %w", id, err)
					cancel()
					return
				}
				evs := tmpl
				if !p.isRunning(i) {
					evs = append(tmpl, end)
				}
				for _, ev := range evs {
					ev.RunId, ev.RecordedAt = id, at
				}
				if _, err := s.Append(ctx, id, 1, evs); err != nil {
					errc <- fmt.Errorf("append to %s: %w", id, err)
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.Close(); err != nil {
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// copyFileSynced copies src to a new file dst and syncs it, so that the
// server's first fsync does not also write the copy out.
func copyFileSynced(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy the store: %w", err)
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return fmt.Errorf("sync the store's copy: %w", err)
	}
	return out.Close()
}

// reinBinary is the rein binary to start: given, or else one built into
// dir from the module (tests; it needs the go tool and the module's
// source).
func reinBinary(ctx context.Context, given, dir string) (path string, built bool, err error) {
	if given != "" {
		return given, false, nil
	}
	bin := filepath.Join(dir, "rein")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/reinhq/rein/cmd/rein")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", false, fmt.Errorf("recovery: no rein binary was given (rein-bench --rein PATH), and building one failed "+
			"(give --rein, or run from inside rein's module with the go tool): %w\n%s", err, out)
	}
	return bin, true, nil
}
