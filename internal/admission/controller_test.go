package admission_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/admission"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/store/mem"
)

// countedStore counts the runs a store lists and loads.
type countedStore struct {
	store.Store
	listed, loaded atomic.Int64
}

func (c *countedStore) List(ctx context.Context, f store.Filter) (store.Page, error) {
	p, err := c.Store.List(ctx, f)
	c.listed.Add(int64(len(p.Runs)))
	return p, err
}

func (c *countedStore) Load(ctx context.Context, runID string) (runstate.State, error) {
	c.loaded.Add(1)
	return c.Store.Load(ctx, runID)
}

var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

var errNotQueued = errors.New("not queued")

// starter commits what the engine's Admit and ExpireQueued do, and
// records the runs it started, in order.
type starter struct {
	s       store.Store
	mu      sync.Mutex
	started []string
}

func (f *starter) commit(ctx context.Context, runID string, to reinv1.RunStatus, payload *reinv1.Event) (runstate.State, error) {
	st, err := f.s.Load(ctx, runID)
	if err != nil {
		return st, err
	}
	if st.Status != reinv1.RunStatus_RUN_STATUS_QUEUED {
		return st, fmt.Errorf("run %s: %w", runID, errNotQueued)
	}
	payload.RunId, payload.Sequence = runID, st.Version+1
	change := &reinv1.Event{RunId: runID, Sequence: st.Version + 2, Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{
		From: reinv1.RunStatus_RUN_STATUS_QUEUED, To: to, Reason: "test",
	}}}
	return f.s.Append(ctx, runID, st.Version, []*reinv1.Event{payload, change})
}

func (f *starter) Admit(ctx context.Context, runID, by string) (runstate.State, error) {
	st, err := f.commit(ctx, runID, reinv1.RunStatus_RUN_STATUS_RUNNING, &reinv1.Event{Payload: &reinv1.Event_RunAdmitted{RunAdmitted: &reinv1.RunAdmitted{By: by}}})
	if err == nil {
		f.mu.Lock()
		f.started = append(f.started, runID)
		f.mu.Unlock()
	}
	return st, err
}

func (f *starter) ExpireQueued(ctx context.Context, runID string) (runstate.State, error) {
	return f.commit(ctx, runID, reinv1.RunStatus_RUN_STATUS_BUDGET_EXHAUSTED, &reinv1.Event{Payload: &reinv1.Event_BudgetReached{BudgetReached: &reinv1.BudgetReached{Limit: "deadline"}}})
}

func (f *starter) took() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.started
	f.started = nil
	return out
}

// queueHarness is a store, the starter, and controllers on them.
type queueHarness struct {
	t       testing.TB
	s       *countedStore
	start   *starter
	now     time.Time
	max     map[string]int
	created int
}

func newQueueHarness(t testing.TB) *queueHarness {
	return newQueueHarnessOn(t, mem.New())
}

func newQueueHarnessOn(t testing.TB, st store.Store) *queueHarness {
	s := &countedStore{Store: st}
	return &queueHarness{t: t, s: s, start: &starter{s: s.Store}, now: t0, max: map[string]int{}}
}

// controller is a Controller on the harness's store: a server, and each
// one made another replica.
func (h *queueHarness) controller(maxRunning int) *admission.Controller {
	return admission.New(admission.Config{Store: h.s, Starter: h.start, Gone: func(err error) bool { return errors.Is(err, errNotQueued) },
		Tenant: func(tenant string) (int, float64) { return h.max[tenant], 1 }, MaxRunning: maxRunning, Owner: "test",
		Clock: func() time.Time { return h.now }})
}

// queue creates a queued root run of tenant, submitted now, with a
// deadline when it is not zero.
func (h *queueHarness) queue(id, tenant string, priority int32, deadline time.Time) {
	h.t.Helper()
	h.created++
	h.queueWith(id, tenant, priority, deadline, h.created)
}

// queueAt creates a queued root run of acme, the nth submitted.
func (h *queueHarness) queueAt(id string, n int) {
	h.queueWith(id, "acme", 0, time.Time{}, n)
}

func (h *queueHarness) queueWith(id, tenant string, priority int32, deadline time.Time, n int) {
	rs := &reinv1.RunStarted{Contract: &reinv1.TaskContract{Goal: "g", Priority: priority}, Tenant: tenant, RequestId: id, Queued: true}
	if !deadline.IsZero() {
		rs.Deadline = timestamppb.New(deadline)
	}
	ev := &reinv1.Event{RunId: id, Sequence: 1, RecordedAt: timestamppb.New(t0.Add(time.Duration(n) * time.Millisecond)),
		Payload: &reinv1.Event_RunStarted{RunStarted: rs}}
	if _, _, err := h.s.Create(context.Background(), ev); err != nil {
		h.t.Fatal(err)
	}
}

// change moves a run from its status to to.
func (h *queueHarness) change(id string, to reinv1.RunStatus) {
	h.t.Helper()
	ctx := context.Background()
	st, err := h.s.Store.Load(ctx, id)
	if err != nil {
		h.t.Fatal(err)
	}
	ev := &reinv1.Event{RunId: id, Sequence: st.Version + 1, Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{
		From: st.Status, To: to, Reason: "test",
	}}}
	if _, err := h.s.Append(ctx, id, st.Version, []*reinv1.Event{ev}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *queueHarness) pass(c *admission.Controller) []string {
	h.t.Helper()
	if _, err := c.Pass(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	return h.start.took()
}

// TestPassReadsWhatChanged: with 2,000 runs queued, a pass after the first
// lists no run and loads none it knows: it reads the status changes since
// the last pass. Before, each pass listed every queued and running run.
func TestPassReadsWhatChanged(t *testing.T) {
	h := newQueueHarness(t)
	const n = 2000
	for i := range n {
		h.queue(fmt.Sprintf("run-%04d", i), "acme", 0, time.Time{})
	}
	c := h.controller(4)
	if got := h.pass(c); len(got) != 4 {
		t.Fatalf("first pass started %v, want 4 runs", got)
	}
	h.s.listed.Store(0)
	h.s.loaded.Store(0)
	if got := h.pass(c); len(got) != 0 {
		t.Fatalf("a pass with no slot free started %v", got)
	}
	h.change("run-0001", reinv1.RunStatus_RUN_STATUS_COMPLETED)
	if got := h.pass(c); !slices.Equal(got, []string{"run-0004"}) {
		t.Fatalf("a pass after a slot freed started %v, want run-0004", got)
	}
	// The starter loads each run it starts; the Controller none.
	if listed, loaded := h.s.listed.Load(), h.s.loaded.Load(); listed != 0 || loaded != 0 {
		t.Fatalf("two passes over %d queued runs listed %d runs and loaded %d, want none", n, listed, loaded)
	}
}

// TestPassOrderKept: the queues kept between passes start the runs in the
// order a pass reading the store would: by priority then arrival within a
// tenant, a tenant's limit held, a run cancelled while queued never
// started, a run whose deadline passed in the queue ended, not started;
// and a second controller on the store (another replica, or this one
// restarted) starts where the first left off, each counting the other's
// starts against the limit.
func TestPassOrderKept(t *testing.T) {
	h := newQueueHarness(t)
	h.max["globex"] = 1
	for i := range 6 {
		h.queue(fmt.Sprintf("a-%d", i), "acme", 0, time.Time{})
	}
	h.queue("g-0", "globex", 0, time.Time{})
	h.queue("g-1", "globex", 0, time.Time{})
	one, two := h.controller(3), h.controller(3)
	if got := h.pass(one); !slices.Equal(got, []string{"a-0", "g-0", "a-1"}) {
		t.Fatalf("first pass started %v", got)
	}
	// Queued after the first pass: a high priority run goes first; a
	// cancelled one never starts; one whose deadline passes is ended.
	h.queue("a-urgent", "acme", 9, time.Time{})
	h.queue("a-late", "acme", 8, h.now.Add(time.Second))
	h.change("a-2", reinv1.RunStatus_RUN_STATUS_CANCELLED)
	h.now = h.now.Add(time.Minute)
	h.change("a-0", reinv1.RunStatus_RUN_STATUS_COMPLETED)
	if got := h.pass(two); !slices.Equal(got, []string{"a-urgent"}) {
		t.Fatalf("the other controller's pass started %v, want a-urgent", got)
	}
	if st, err := h.s.Store.Load(context.Background(), "a-late"); err != nil || st.Status != reinv1.RunStatus_RUN_STATUS_BUDGET_EXHAUSTED {
		t.Fatalf("the run whose deadline passed in the queue is %v (%v), want budget_exhausted", runstate.StatusName(st.Status), err)
	}
	// The first controller counts the other's start: no slot is free.
	if got := h.pass(one); len(got) != 0 {
		t.Fatalf("a pass with every slot taken elsewhere started %v", got)
	}
	// globex's one slot frees: its next run goes, before acme's (fewer
	// running), and acme's next is a-3, not the cancelled a-2.
	h.change("g-0", reinv1.RunStatus_RUN_STATUS_COMPLETED)
	h.change("a-1", reinv1.RunStatus_RUN_STATUS_COMPLETED)
	if got := h.pass(one); !slices.Equal(got, []string{"g-1", "a-3"}) {
		t.Fatalf("started %v, want g-1 then a-3", got)
	}
	for _, id := range []string{"a-urgent", "a-3", "g-1"} {
		h.change(id, reinv1.RunStatus_RUN_STATUS_COMPLETED)
	}
	var rest []string
	for range 3 {
		rest = append(rest, h.pass(two)...)
		rest = append(rest, h.pass(one)...)
	}
	if !slices.Equal(rest, []string{"a-4", "a-5"}) {
		t.Fatalf("the rest started %v, want a-4 and a-5 (a-2 was cancelled)", rest)
	}
	// Read anew from the store, and kept: two running, none queued.
	fresh := h.controller(3)
	if got := h.pass(fresh); len(got) != 0 {
		t.Fatalf("a controller reading the store anew started %v, want none queued", got)
	}
	h.queue("a-6", "acme", 0, time.Time{})
	h.queue("a-7", "acme", 0, time.Time{})
	if got := h.pass(fresh); !slices.Equal(got, []string{"a-6"}) {
		t.Fatalf("read anew, 2 of 3 slots taken: started %v, want a-6", got)
	}
	h.change("a-4", reinv1.RunStatus_RUN_STATUS_COMPLETED)
	if got := h.pass(one); !slices.Equal(got, []string{"a-7"}) {
		t.Fatalf("kept, a slot freed: started %v, want a-7", got)
	}
}
