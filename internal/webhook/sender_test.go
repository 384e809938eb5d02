package webhook

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store/bolt"
)

// clock is a test's clock: real time plus an offset the test moves.
type clock struct{ off atomic.Int64 }

func (c *clock) now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *clock) advance(d time.Duration) { c.off.Add(int64(d)) }

// hits is what a receiver took: the ids, in order.
type hits struct {
	mu  sync.Mutex
	ids []string
}

func (h *hits) add(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ids = append(h.ids, id)
	return len(h.ids)
}

func (h *hits) all() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.ids...)
}

// eventually reads cond on a tick until it holds, and fails the test if
// 10s pass first. What the tests wait on (the outbox in the store, what
// the receiver took) gives no signal when it changes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("%s: not within 10s", what)
		}
	}
}

func senderStore(t *testing.T, url string) *bolt.Store {
	t.Helper()
	st, err := bolt.Open(filepath.Join(t.TempDir(), "rein.db"), bolt.Options{Outbox: (&Matcher{}).Outbox()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.CreateWebhook(context.Background(), &reinv1.Webhook{Name: "a", Tenant: "t", Url: url, Secrets: []string{specSecret}}); err != nil {
		t.Fatal(err)
	}
	return st
}

func startRun(t *testing.T, st *bolt.Store, id string) {
	t.Helper()
	ev := &reinv1.Event{RunId: id, Sequence: 1, RecordedAt: timestamppb.Now(), Actor: "harness",
		Payload: &reinv1.Event_RunStarted{RunStarted: &reinv1.RunStarted{Contract: &reinv1.TaskContract{Goal: "g"}, Tenant: "t", RequestId: id}}}
	if _, _, err := st.Create(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
}

// TestSenderRetriesWithTheSameID: a receiver that fails twice gets the
// delivery a third time with the same id, and Retry-After holds it back.
func TestSenderRetriesWithTheSameID(t *testing.T) {
	h := &hits{}
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.add(r.Header.Get("webhook-id")) <= 2 {
			w.Header().Set("retry-after", "120")
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer recv.Close()
	st := senderStore(t, recv.URL)
	c := &clock{}
	s := NewSender(Config{Store: st, Client: NewClient(true, Timeouts{}), Poll: 5 * time.Millisecond, Clock: c.now})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	startRun(t, st, "r1")
	// The receiver answers before the sender stores the outcome: wait for
	// the store, so the clock moves after the attempt was recorded.
	eventually(t, "a first attempt, recorded", func() bool {
		ds, _ := st.Deliveries(ctx, "t", "a", 10)
		return len(h.all()) == 1 && len(ds) == 1 && ds[0].GetAttempts() == 1
	})
	ds, _ := st.Deliveries(ctx, "t", "a", 10)
	if len(ds) != 1 || ds[0].GetAttempts() != 1 || ds[0].GetLastStatusCode() != 503 ||
		ds[0].GetNextAttemptAt().AsTime().Sub(ds[0].GetLastAttemptAt().AsTime()) < 120*time.Second {
		t.Fatalf("after a 503 with Retry-After 120: %v", ds)
	}
	for want := 2; want <= 3; want++ {
		eventually(t, "the last attempt recorded", func() bool {
			ds, _ := st.Deliveries(ctx, "t", "a", 10)
			return len(ds) == 1 && int(ds[0].GetAttempts()) == want-1
		})
		c.advance(3 * time.Minute)
		s.Wake()
		eventually(t, "the next attempt", func() bool { return len(h.all()) == want })
	}
	eventually(t, "the outbox emptied", func() bool { ds, _ := st.Deliveries(ctx, "t", "a", 10); return len(ds) == 0 })
	ids := h.all()
	if ids[0] != "msg_a_r1_1" || ids[1] != ids[0] || ids[2] != ids[0] {
		t.Fatalf("ids of the attempts = %v, want msg_a_r1_1 each time", ids)
	}
}

// TestSenderGivesUpAndPauses: a delivery failing for longer than RetryFor
// fails, its subscription is paused with the reason, and nothing more is
// sent until it is resumed.
func TestSenderGivesUpAndPauses(t *testing.T) {
	h := &hits{}
	var fail atomic.Bool
	fail.Store(true)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.add(r.Header.Get("webhook-id"))
		if fail.Load() {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	defer recv.Close()
	st := senderStore(t, recv.URL)
	c := &clock{}
	s := NewSender(Config{Store: st, Client: NewClient(true, Timeouts{}), Poll: 5 * time.Millisecond, Clock: c.now, RetryFor: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	startRun(t, st, "r1")
	startRun(t, st, "r2")
	eventually(t, "first attempts, recorded", func() bool {
		ds, _ := st.Deliveries(ctx, "t", "a", 10)
		return len(ds) == 2 && ds[0].GetAttempts() == 1 && ds[1].GetAttempts() == 1
	})
	c.advance(2 * time.Hour)
	s.Wake()
	paused := func() bool {
		ws, _ := st.ListWebhooks(ctx, "t")
		return len(ws) == 1 && ws[0].GetPaused()
	}
	eventually(t, "the subscription paused", paused)
	ws, _ := st.ListWebhooks(ctx, "t")
	ds, _ := st.Deliveries(ctx, "t", "a", 10)
	failed := 0
	for _, d := range ds {
		if d.GetState() == reinv1.WebhookDeliveryState_WEBHOOK_DELIVERY_STATE_FAILED {
			failed++
		}
	}
	if failed == 0 || ws[0].GetPausedReason() == "" {
		t.Fatalf("after giving up: %v, reason %q", ds, ws[0].GetPausedReason())
	}
	n := len(h.all())
	c.advance(10 * time.Hour)
	s.Wake()
	startRun(t, st, "r3") // stored while paused, sent after
	if err := s.scan(ctx); err != nil {
		t.Fatal(err)
	}
	if len(h.all()) != n {
		t.Fatalf("a paused subscription was sent %v", h.all()[n:])
	}
}

// TestSenderKeepsEachRunsOrder: a run's deliveries, sent in batches and
// one of them failed once, reach the receiver in the order of its events,
// the failed one retried before any after it.
func TestSenderKeepsEachRunsOrder(t *testing.T) {
	h := &hits{}
	var failed atomic.Bool
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("webhook-id")
		if id == "msg_a_r1_5" && failed.CompareAndSwap(false, true) {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		h.add(id)
	}))
	defer recv.Close()
	st := senderStore(t, recv.URL)
	c := &clock{}
	s := NewSender(Config{Store: st, Client: NewClient(true, Timeouts{}), Poll: 5 * time.Millisecond, Clock: c.now})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	if _, err := st.UpdateWebhook(ctx, "t", "a", func(w *reinv1.Webhook) error { w.EventKinds = []string{"run_steered"}; return nil }); err != nil {
		t.Fatal(err)
	}
	startRun(t, st, "r1")
	const n = 40
	for seq := uint64(2); seq <= n; seq++ {
		ev := &reinv1.Event{RunId: "r1", Sequence: seq, RecordedAt: timestamppb.Now(), Actor: "principal:p",
			Payload: &reinv1.Event_RunSteered{RunSteered: &reinv1.RunSteered{Text: "go on", RequestId: fmt.Sprint("s", seq)}}}
		if _, err := st.Append(ctx, "r1", seq-1, []*reinv1.Event{ev}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the failure", failed.Load)
	c.advance(time.Minute)
	s.Wake()
	eventually(t, "the outbox emptied", func() bool { ds, _ := st.Deliveries(ctx, "t", "a", 100); return len(ds) == 0 })
	var prev uint64
	seen := map[string]bool{}
	for _, id := range h.all() {
		if seen[id] {
			continue
		}
		seen[id] = true
		var seq uint64
		if _, err := fmt.Sscanf(id, "msg_a_r1_%d", &seq); err != nil || seq <= prev {
			t.Fatalf("ids in the order taken: %v; %s after sequence %d", h.all(), id, prev)
		}
		prev = seq
	}
}
