package server

import (
	"context"
	"crypto/rand"
	"sync/atomic"
	"testing"
	"time"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/etcdtest"
	"github.com/reinhq/rein/internal/model"
	etcdstore "github.com/reinhq/rein/internal/store/etcd"
)

// countedRelay is the etcd store's relay, counting the puts of output.
type countedRelay struct {
	*etcdstore.Store
	puts atomic.Int32
}

func (r *countedRelay) PutOutput(ctx context.Context, runID, writer string, o *reinv1.ModelOutput) error {
	r.puts.Add(1)
	return r.Store.PutOutput(ctx, runID, writer, o)
}

// relayServer is a node named name on c's store under prefix, relaying
// model output through it, with the models by the name a contract gives
// (none: the contract's).
func relayServer(t *testing.T, c *etcdtest.Cluster, name string, models map[string]model.Model) (*tcpServer, *countedRelay) {
	t.Helper()
	st, err := etcdstore.Open(context.Background(), c.Client(), "/rein/", etcdstore.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	relay := &countedRelay{Store: st}
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
