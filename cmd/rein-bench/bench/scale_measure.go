package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/server"
)

// cpuTickMs is one tick of the CPU times /proc/PID/stat counts in (USER_HZ,
// 100 a second on Linux).
const cpuTickMs = 10.0

// scaleSample is what each replica of a group had spent at a time: its
// process's CPU, and from its /metrics the bytes its etcd client received
// and the steps it took. cpuResMs is the coarsest resolution of the CPU
// figures.
type scaleSample struct {
	at                      time.Time
	cpuMs, etcdBytes, steps []float64
	cpuResMs                float64
	// noEtcdBytes: the rein binary has no rein_etcd_received_bytes_total.
	noEtcdBytes bool
}

// scaleDelta is what each replica spent between two samples.
type scaleDelta struct {
	seconds                 float64
	cpuMs, etcdBytes, steps []float64
	cpuResMs                float64
}

func diff(a, b scaleSample) scaleDelta {
	d := scaleDelta{seconds: b.at.Sub(a.at).Seconds(), cpuResMs: max(a.cpuResMs, b.cpuResMs)}
	for i := range a.cpuMs {
		// A thread that exited took its run time along (procCPUMs): never
		// less than nothing.
		d.cpuMs = append(d.cpuMs, max(0, b.cpuMs[i]-a.cpuMs[i]))
		d.etcdBytes = append(d.etcdBytes, b.etcdBytes[i]-a.etcdBytes[i])
		d.steps = append(d.steps, b.steps[i]-a.steps[i])
	}
	return d
}

// sample reads every replica's /metrics, then its CPU: each interval
// between two samples holds one scrape of each.
func (g *replicaGroup) sample(ctx context.Context) (scaleSample, error) {
	s := scaleSample{at: time.Now()}
	for i, rep := range g.reps {
		m, err := scrapeMetrics(ctx, rep.admin, "rein_steps_total", "rein_etcd_received_bytes_total")
		var missing *missingMetric
		if errors.As(err, &missing) && missing.name == "rein_etcd_received_bytes_total" {
			// A rein from before the metric (a baseline build): its etcd
			// bytes are not measured, and read as none.
			s.noEtcdBytes = true
			m, err = scrapeMetrics(ctx, rep.admin, "rein_steps_total")
		}
		if err != nil {
			return s, g.replicaErr(i, err)
		}
		cpu, res, err := procCPUMs(rep.cmd.Process.Pid)
		if err != nil {
			return s, g.replicaErr(i, err)
		}
		s.cpuMs = append(s.cpuMs, cpu)
		s.cpuResMs = max(s.cpuResMs, res)
		s.steps = append(s.steps, m["rein_steps_total"])
		s.etcdBytes = append(s.etcdBytes, m["rein_etcd_received_bytes_total"])
	}
	return s, nil
}

// scrapeMetrics reads the unlabelled samples names from the Prometheus
// text at http://admin/metrics; a name missing is an error.
func scrapeMetrics(ctx context.Context, admin string, names ...string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	url := "http://" + admin + "/metrics"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || strings.HasPrefix(f[0], "#") {
			continue
		}
		for _, name := range names {
			if f[0] == name {
				v, err := strconv.ParseFloat(f[1], 64)
				if err != nil {
					return nil, fmt.Errorf("scrape %s: %s: %w", url, name, err)
				}
				out[name] = v
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	for _, name := range names {
		if _, ok := out[name]; !ok {
			return nil, &missingMetric{url: url, name: name}
		}
	}
	return out, nil
}

// missingMetric is scrapeMetrics' error when a name is not on the page.
type missingMetric struct{ url, name string }

func (e *missingMetric) Error() string {
	return fmt.Sprintf("%s has no %s: is the rein binary older than it?", e.url, e.name)
}

// procCPUMs is the CPU time (in ms) process pid used so far, and its
// resolution: the sum of its threads' run time in nanoseconds
// (/proc/PID/task/TID/schedstat), else its user and system time in ticks
// of 10 ms (/proc/PID/stat). A tick is too coarse for a ratio near 1 over
// the seconds of a phase: an idle replica spends a few ms a second. A
// thread that exits takes its run time from the sum; Go's runtime keeps
// its threads.
func procCPUMs(pid int) (ms, resMs float64, err error) {
	if ms, ok := schedstatMs(pid); ok {
		return ms, 1e-6, nil
	}
	ms, err = procStatMs(pid)
	return ms, cpuTickMs, err
}

// schedstatMs is the sum of pid's threads' run time, in ms, and whether
// every thread's could be read.
func schedstatMs(pid int) (float64, bool) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return 0, false
	}
	var ns float64
	for _, t := range tasks {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if errors.Is(err, os.ErrNotExist) {
			continue // it exited since the listing
		}
		f := strings.Fields(string(data))
		if err != nil || len(f) < 1 {
			return 0, false
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, false
		}
		ns += v
	}
	return ns / 1e6, ns > 0
}

// procStatMs is pid's user and system time in ms, from /proc/PID/stat.
func procStatMs(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("read the replica's CPU (the scale scenario needs Linux's /proc): %w", err)
	}
	// The command's name, in parentheses, may hold spaces: the fields
	// counted from 3 (the state) follow its last ')'.
	end := strings.LastIndexByte(string(data), ')')
	f := strings.Fields(string(data[end+1:]))
	if end < 0 || len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat has no CPU times: %q", pid, data)
	}
	var ticks float64
	for _, s := range f[11:13] { // utime, stime: fields 14 and 15
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += v
	}
	return ticks * cpuTickMs, nil
}

// fillFinished stores runs completed runs in st, scaleFillers at once,
// for at most budget, and returns how many it stored:
// each a run_started, a model call (model_requested and model_returned,
// ~300 bytes each) and its completion, as the recovery scenario's finished
// runs. Each is imported whole (Store.Import, one transaction): a run
// created running and completed by a second append would be, in between,
// a running run no server holds, which the replicas take over and drive.
func fillFinished(ctx context.Context, st store.Store, runs int, budget time.Duration) (int, error) {
	stop := time.Now().Add(budget)
	var stored atomic.Int64
	base := benchTime().AsTime()
	contract := benchContract() // read-only, shared: the store marshals it
	tmpl := []*reinv1.Event{
		stepEvent("run_f00000000", 2, benchTime(), true),
		stepEvent("run_f00000000", 3, benchTime(), true),
		{Sequence: 4, Actor: "harness", Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{
			From: reinv1.RunStatus_RUN_STATUS_RUNNING, To: reinv1.RunStatus_RUN_STATUS_COMPLETED, Reason: "final_answer",
		}}},
	}
	err := inParallel(ctx, runs, scaleFillers, func(ctx context.Context, i int) error {
		if time.Now().After(stop) {
			return nil // past the budget: the rest are skipped
		}
		id := fmt.Sprintf("run_f%08d", i)
		at := timestamppb.New(base.Add(time.Duration(i) * time.Second))
		started := &reinv1.Event{
			RunId: id, Sequence: 1, RecordedAt: at, Actor: "principal:bench",
			Payload: &reinv1.Event_RunStarted{RunStarted: &reinv1.RunStarted{
				Contract: contract, Principal: server.LocalPrincipal().ID, Tenant: server.LocalPrincipal().Tenant,
			}},
		}
		// Fresh events per run: a store may keep what it was given.
		evs := []*reinv1.Event{started}
		for _, ev := range tmpl {
			ev = proto.CloneOf(ev)
			ev.RunId, ev.RecordedAt = id, at
			evs = append(evs, ev)
		}
		if _, err := st.Import(ctx, evs, nil); err != nil {
			return fmt.Errorf("finished run %s: %w", id, err)
		}
		stored.Add(1)
		return nil
	})
	return int(stored.Load()), err
}
