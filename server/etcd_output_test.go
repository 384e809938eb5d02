package server

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/etcdtest"
	"github.com/reinhq/rein/internal/model"
	etcdstore "github.com/reinhq/rein/internal/store/etcd"
)

// countedRelay is the etcd store's relay, counting the puts of output and
// the bytes of text they carry, and telling put of each.
type countedRelay struct {
	*etcdstore.Store
	puts   atomic.Int32
	bytes  atomic.Int64
	upTo   atomic.Int64 // the end of the text put so far
	putted chan struct{}
}

func (r *countedRelay) PutOutput(ctx context.Context, runID, writer string, seq uint64, o *reinv1.ModelOutput) error {
	err := r.Store.PutOutput(ctx, runID, writer, seq, o)
	if err == nil {
		r.puts.Add(1)
		r.bytes.Add(int64(len(o.GetText())))
		r.upTo.Store(int64(o.GetOffset()) + int64(len(o.GetText())))
		select {
		case r.putted <- struct{}{}:
		default:
		}
	}
	return err
}

// waitUpTo waits until the text put reaches n bytes.
func (r *countedRelay) waitUpTo(t *testing.T, ctx context.Context, n int) {
	t.Helper()
	for r.upTo.Load() < int64(n) {
		select {
		case <-r.putted:
		case <-ctx.Done():
			t.Fatalf("the relay has %d bytes of the text put, want %d", r.upTo.Load(), n)
		}
	}
}

// relayServer is a node named name on c's store under prefix, relaying
// model output through it, with the models by the name a contract gives
// (none: the contract's).
func relayServer(t testing.TB, c *etcdtest.Cluster, name string, models map[string]model.Model) (*tcpServer, *countedRelay) {
	t.Helper()
	st, err := etcdstore.Open(context.Background(), c.Client(), "/rein/", etcdstore.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	relay := &countedRelay{Store: st, putted: make(chan struct{}, 1)}
	cfg := Config{Store: st, Tools: fixtures(), Relay: relay, Owner: name, StreamModelCalls: true}
	if models != nil {
		cfg.Models = func(spec *reinv1.ModelSpec) (model.Model, error) { return models[spec.GetName()], nil }
	}
	return serveTCP(t, cfg), relay
}

// TestModelOutputOnAnotherServer: two servers share one etcd store; a
// watcher of the server that does not drive the run is sent the call's
// text through the store as it is written, all of it, ended. The twin: a
// run watched only where it is driven writes no output to the store.
func TestModelOutputOnAnotherServer(t *testing.T) {
	c := etcdtest.Start(t, 1)
	m := &writingModel{pieces: []string{"Let me ", "look ", "it up."}, gate: make(chan struct{})}
	quiet := &writingModel{pieces: []string{"quiet"}, gate: make(chan struct{})}
	close(quiet.gate)
	driver, relay := relayServer(t, c, "driver", map[string]model.Model{"gated": m, "quiet": quiet})
	other, _ := relayServer(t, c, "other", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := func(name string) string {
		c := contract(nil)
		c.Model.Name = name
		resp, err := driver.client.StartRun(ctx, &reinv1.StartRunRequest{RequestId: rand.Text(), Contract: c})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetRun().GetRunId()
	}

	// Watched only where it is driven: nothing is put in the store.
	w := watchOutput(t, ctx, driver, start("quiet"), 0, true)
	w.toEnd(t)
	if n := relay.puts.Load(); n != 0 {
		t.Fatalf("a run watched only where it is driven put its output in the store %d times", n)
	}

	runID := start("gated")
	far := watchOutput(t, ctx, other, runID, 0, true)
	far.until(t, func(*reinv1.WatchRunResponse) bool { return far.text == "Let me " })
	close(m.gate)
	far.toEnd(t)
	var done bool
	for _, msg := range far.msgs {
		done = done || msg.GetOutput().GetDone()
	}
	if far.text != "Let me look it up." || !done {
		t.Fatalf("the watcher on the other server was sent %q (done %v), want the whole text, ended", far.text, done)
	}
	if relay.puts.Load() == 0 {
		t.Fatal("the driving server put nothing in the store")
	}
}

// pacedModel writes its pieces one at a time, each once the test says
// next, then answers with them all.
type pacedModel struct {
	pieces []string
	next   chan struct{}
}

func (m *pacedModel) Next(ctx context.Context, req *model.Request) (*model.Reply, error) {
	if req.Output == nil {
		return nil, errors.New("the call does not stream")
	}
	for _, p := range m.pieces {
		req.Output(p)
		select {
		case <-m.next:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	final := &reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: strings.Join(m.pieces, "")}}}
	return &model.Reply{Decision: final, Usage: &reinv1.Usage{InputTokens: 1, OutputTokens: 1}}, nil
}

// outputKeys counts the relay's keys of the run's output in etcd.
func outputKeys(t *testing.T, c *etcdtest.Cluster, runID string) int64 {
	t.Helper()
	resp, err := c.Client().Get(context.Background(), "/rein/output/"+runID+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// TestRelayPutsEachByteOnce: a call that streams 8 pieces, each written
// once the relay put the one before, is put in the store as its text once:
// the bytes of text put are the call's length, not the sum of its text so
// far at each put. The watcher on another replica is sent the text whole,
// in order, each byte once (watched.until checks the offsets); one that
// joins late on a third replica is sent the text so far, joined from the
// pieces in etcd, then the rest; and the call's pieces are deleted from
// etcd when it returns.
func TestRelayPutsEachByteOnce(t *testing.T) {
	c := etcdtest.Start(t, 1)
	pieces := make([]string, 8)
	for i := range pieces {
		pieces[i] = strings.Repeat(string(rune('a'+i)), 1000)
	}
	whole := strings.Join(pieces, "")
	m := &pacedModel{pieces: pieces, next: make(chan struct{})}
	driver, relay := relayServer(t, c, "driver", map[string]model.Model{"paced": m})
	other, _ := relayServer(t, c, "other", nil)
	third, _ := relayServer(t, c, "third", nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ct := contract(nil)
	ct.Model.Name = "paced"
	resp, err := driver.client.StartRun(ctx, &reinv1.StartRunRequest{RequestId: rand.Text(), Contract: ct})
	if err != nil {
		t.Fatal(err)
	}
	runID := resp.GetRun().GetRunId()
	early := watchOutput(t, ctx, other, runID, 0, true)
	var late *watched
	for i := range pieces {
		relay.waitUpTo(t, ctx, (i+1)*1000)
		if i == 4 {
			if n := outputKeys(t, c, runID); n == 0 {
				t.Fatal("no output key in etcd while the call streams to another replica")
			}
			late = watchOutput(t, ctx, third, runID, 0, true)
			late.until(t, func(*reinv1.WatchRunResponse) bool { return late.text == strings.Join(pieces[:5], "") })
		}
		m.next <- struct{}{}
	}
	for name, w := range map[string]*watched{"early": early, "late": late} {
		w.toEnd(t)
		if w.text != whole {
			t.Errorf("the %s watcher on the other replica was sent %d bytes, want the %d of the call", name, len(w.text), len(whole))
		}
	}
	if got := relay.bytes.Load(); got != int64(len(whole)) {
		t.Errorf("the relay put %d bytes of text in %d puts for a call of %d: want each byte once", got, relay.puts.Load(), len(whole))
	}
	deadline := time.Now().Add(10 * time.Second)
	for outputKeys(t, c, runID) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d output keys of the run are left in etcd after its call returned", outputKeys(t, c, runID))
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// timedModel writes its pieces one every every, then answers with them
// all: a model streaming at a steady rate.
type timedModel struct {
	pieces []string
	every  time.Duration
}

func (m *timedModel) Next(ctx context.Context, req *model.Request) (*model.Reply, error) {
	if req.Output == nil {
		return nil, errors.New("the call does not stream")
	}
	tick := time.NewTicker(m.every)
	defer tick.Stop()
	for _, p := range m.pieces {
		req.Output(p)
		select {
		case <-tick.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	final := &reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: strings.Join(m.pieces, "")}}}
	return &model.Reply{Decision: final, Usage: &reinv1.Usage{InputTokens: 1, OutputTokens: 1}}, nil
}

// BenchmarkRelayBytes: what etcd is sent to keep (each put's key and
// value, as a watch of the relay's keys sees them) while a call streams
// 100 KB, 1 KB every 100 ms (10 s), to a watcher on another replica.
// Reported per call: etcd-bytes, and etcd-bytes per byte of output.
func BenchmarkRelayBytes(b *testing.B) {
	c := etcdtest.Start(b, 1)
	pieces := make([]string, 100)
	for i := range pieces {
		pieces[i] = strings.Repeat(string(rune('a'+i%26)), 1000)
	}
	m := &timedModel{pieces: pieces, every: 100 * time.Millisecond}
	driver, _ := relayServer(b, c, "driver", map[string]model.Model{"timed": m})
	other, _ := relayServer(b, c, "other", nil)
	ctx := context.Background()
	var put atomic.Int64
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	watching := make(chan struct{})
	go func() {
		w := c.Client().Watch(wctx, "/rein/output/", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
		for wr := range w {
			if wr.Created {
				close(watching)
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypePut {
					put.Add(int64(len(ev.Kv.Key) + len(ev.Kv.Value)))
				}
			}
		}
	}()
	<-watching
	ct := contract(nil)
	ct.Model.Name = "timed"
	b.ResetTimer()
	for range b.N {
		resp, err := driver.client.StartRun(ctx, &reinv1.StartRunRequest{RequestId: rand.Text(), Contract: ct})
		if err != nil {
			b.Fatal(err)
		}
		w := watchOutput(b, ctx, other, resp.GetRun().GetRunId(), 0, true)
		w.toEnd(b)
		if w.text != strings.Join(pieces, "") {
			b.Fatalf("the watcher was sent %d bytes, want 100,000", len(w.text))
		}
	}
	b.StopTimer()
	// The watch has every put of the calls once their runs' ends were
	// sent: their pieces were put before their replies committed.
	b.ReportMetric(float64(put.Load())/float64(b.N), "etcd-bytes/call")
	b.ReportMetric(float64(put.Load())/float64(b.N)/100_000, "etcd-bytes/output-byte")
}
