package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/engine"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/tools"
	"github.com/reinhq/rein/internal/webhook"
)

// webhookSubs is how many subscriptions the webhooks scenario's figure
// has, each on every event.
const webhookSubs = 3

// Webhooks measures what webhook subscriptions cost the step loop:
// steps-runs' runs through the engine on a store whose every event is
// chosen by webhookSubs subscriptions, so each append puts three outbox
// deliveries per event in its transaction while the sender (on the same
// store and process) delivers them to a local receiver and removes them;
// against the same runs on the same kind of store with no subscription.
// The ratio is the step rate kept; the target is 0.9.
//
// Extra reports the deliveries the receiver took during the figure's
// rounds, those still queued as its runs ended, and each side's CPU time
// per step (the process's: the sender's and the receiver's in the
// figure's).
func Webhooks(ctx context.Context, o Options) (Result, error) {
	runs := o.Runs
	if runs <= 0 {
		runs = stepsRunsDefault
	}
	r := Result{Scenario: "webhooks", Unit: "steps/s", Target: 0.9, Runs: runs, Extra: map[string]float64{}}
	be, err := o.backend(r.Scenario)
	if err != nil {
		return r, err
	}
	if be.OpenOutbox == nil {
		return r, fmt.Errorf("bench webhooks: the %s backend keeps no webhooks; run it on --store bolt", be.Name)
	}
	contracts := stepsContracts(o.scaled(stepsRunsToolCalls, 1), runs)
	fixtures := tools.NewFixtures(map[string][]tools.FixtureResult{
		"read_file": {{Output: structpb.NewStringValue(fixtureText())}},
	})
	dir, err := tempDir(o, r.Scenario)
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	var taken atomic.Int64
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		taken.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer recv.Close()
	var queued, delivered, cpu, baseCPU []float64
	figure := func(round int) (measure, error) {
		before, cpu0 := taken.Load(), cpuTime()
		m, left, err := webhookRound(ctx, be, filepath.Join(dir, fmt.Sprintf("figure-%d.db", round)), contracts, fixtures, recv.URL, webhookSubs, &r.Events)
		cpu = append(cpu, (cpuTime()-cpu0).Seconds()*1e6/max(m.units, 1))
		delivered = append(delivered, float64(taken.Load()-before))
		queued = append(queued, float64(left))
		return m, err
	}
	baseline := func(round int) (measure, error) {
		cpu0 := cpuTime()
		m, _, err := webhookRound(ctx, be, filepath.Join(dir, fmt.Sprintf("baseline-%d.db", round)), contracts, fixtures, recv.URL, 0, &r.Events)
		baseCPU = append(baseCPU, (cpuTime()-cpu0).Seconds()*1e6/max(m.units, 1))
		return m, err
	}
	if err := alternateOrder(ctx, &r, o.rounds(), true, figure, baseline); err != nil {
		return r, err
	}
	r.Extra["subscriptions"] = webhookSubs
	r.Extra["delivered_during_run"] = meanOf(delivered)
	r.Extra["queued_at_end"] = meanOf(queued)
	r.Extra["cpu_us_per_step"] = meanOf(cpu)
	r.Extra["baseline_cpu_us_per_step"] = meanOf(baseCPU)
	return r, nil
}

// webhookRound runs a run of each of contracts through an engine on a
// fresh store with subs subscriptions on every event kind and a sender
// delivering to url, timing the first Start to the last run's end. It
// returns how many deliveries were still queued then, and sets *events to
// the events the runs made.
func webhookRound(ctx context.Context, be Backend, path string, contracts []*reinv1.TaskContract, fx tools.Executor, url string, subs int, events *int) (measure, int, error) {
	var m measure
	defer os.Remove(path)
	s, err := be.OpenOutbox(path, (&webhook.Matcher{}).Outbox())
	if err != nil {
		return m, 0, err
	}
	defer s.Close()
	hooks, ok := s.(store.Webhooks)
	if !ok {
		return m, 0, fmt.Errorf("bench webhooks: the %s store keeps no webhooks", be.Name)
	}
	var kinds []string
	oneof := (&reinv1.Event{}).ProtoReflect().Descriptor().Oneofs().ByName("payload")
	for i := range oneof.Fields().Len() {
		kinds = append(kinds, string(oneof.Fields().Get(i).Name()))
	}
	for i := range subs {
		w := &reinv1.Webhook{Name: fmt.Sprintf("bench-%d", i), Tenant: "default", Url: url, EventKinds: kinds,
			Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}}
		if err := hooks.CreateWebhook(ctx, w); err != nil {
			return m, 0, err
		}
	}
	sender := webhook.NewSender(webhook.Config{Store: hooks, Client: webhook.NewClient(true, webhook.Timeouts{})})
	sctx, stop := context.WithCancel(ctx)
	sent := make(chan struct{})
	go func() { defer close(sent); sender.Run(sctx) }()
	defer func() { stop(); <-sent }()
	e := engine.New(engine.Config{Store: s, Tools: fx, Workers: len(contracts),
		Published: func(runstate.State, []*reinv1.Event) { sender.Wake() }})
	defer e.Close()
	t0 := time.Now()
	ids := make([]string, len(contracts))
	for i := range ids {
		st, _, err := e.Start(ctx, engine.StartRequest{RequestID: fmt.Sprintf("bench-%d", i), Contract: contracts[i], Principal: "bench", Tenant: "default"})
		if err != nil {
			return m, 0, err
		}
		ids[i] = st.RunID
	}
	for _, id := range ids {
		if err := e.Wait(ctx, id); err != nil {
			return m, 0, err
		}
	}
	m.elapsed = time.Since(t0)
	n := 0
	for _, id := range ids {
		st, err := s.Load(ctx, id)
		if err != nil {
			return m, 0, err
		}
		if st.Status != reinv1.RunStatus_RUN_STATUS_COMPLETED {
			return m, 0, fmt.Errorf("run %s ended %s (%s)", id, runstate.StatusName(st.Status), st.LastError)
		}
		m.units += float64(st.Steps)
		n += int(st.Version)
	}
	*events = n
	left := 0
	for i := range subs {
		ds, err := hooks.Deliveries(ctx, "default", fmt.Sprintf("bench-%d", i), 1<<20)
		if err != nil {
			return m, 0, err
		}
		left += len(ds)
	}
	return m, left, nil
}
