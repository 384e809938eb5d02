package failover_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/etcdtest"
	"github.com/reinhq/rein/internal/webhook"
)

const hookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// arrival is one request the receiver took.
type arrival struct {
	id, typ, run string
	seq          uint64
	body         string
}

// hookReceiver records every request, checks its signature, and, once
// armed, holds the next one until released: the sender that made it is
// killed while it waits for the answer.
type hookReceiver struct {
	mu       sync.Mutex
	arrivals []arrival
	bad      []string

	armed   atomic.Bool
	held    chan arrival
	release chan struct{}
}

func (h *hookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	id := r.Header.Get("webhook-id")
	ts, _ := strconv.ParseInt(r.Header.Get("webhook-timestamp"), 10, 64)
	var p webhook.Payload
	err := json.Unmarshal(body, &p)
	want, _ := webhook.Sign([]string{hookSecret}, id, ts, body)
	a := arrival{id: id, typ: p.Type, run: p.Data.RunID, seq: p.Data.Sequence, body: string(body)}
	h.mu.Lock()
	if err != nil || want != r.Header.Get("webhook-signature") {
		h.bad = append(h.bad, fmt.Sprintf("%s: signature %q, want %q (%v)", id, r.Header.Get("webhook-signature"), want, err))
	}
	h.arrivals = append(h.arrivals, a)
	h.mu.Unlock()
	if h.armed.CompareAndSwap(true, false) {
		h.held <- a
		<-h.release
	}
}

func (h *hookReceiver) taken() ([]arrival, []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]arrival(nil), h.arrivals...), append([]string(nil), h.bad...)
}

// leaderOf is the replica that sends the webhooks: the value of the
// oldest key of the election.
func leaderOf(ctx context.Context, cli *clientv3.Client) (string, error) {
	resp, err := cli.Get(ctx, prefix+"leader/webhook-sender/", clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1))
	if err != nil || len(resp.Kvs) == 0 {
		return "", fmt.Errorf("no replica leads the webhook senders (%v)", err)
	}
	return string(resp.Kvs[0].Value), nil
}

// statusDeliveries is the id and type of each status change in the run's
// log: what a subscription to every status change must deliver, in order.
func statusDeliveries(ctx context.Context, cl reinv1.RunServiceClient, name, runID string) ([][2]string, error) {
	var out [][2]string
	after := uint64(0)
	for {
		resp, err := cl.ListEvents(ctx, &reinv1.ListEventsRequest{RunId: runID, AfterSequence: after, PageSize: 500})
		if err != nil {
			return nil, err
		}
		for _, ev := range resp.GetEvents() {
			after = ev.GetSequence()
			to := ev.GetStatusChanged().GetTo()
			if ev.GetRunStarted() != nil {
				to = reinv1.RunStatus_RUN_STATUS_RUNNING
			}
			if to != reinv1.RunStatus_RUN_STATUS_UNSPECIFIED {
				out = append(out, [2]string{webhook.DeliveryID(name, runID, ev.GetSequence()), "run." + webhook.StatusName(to)})
			}
		}
		if len(resp.GetEvents()) == 0 {
			return out, nil
		}
	}
}

// TestWebhooksGoOnWhenTheSenderDies: two replicas on one etcd prefix, a
// subscription to every status change, runs that pause for approval and
// complete; the replica that sends the webhooks is killed with SIGKILL
// while the receiver holds one of its deliveries. Pass: every committed
// status change is delivered at least once (the one cut included, by the
// other replica), nothing that was never committed, in order per run,
// each id with one body and a valid signature; the outbox ends empty.
func TestWebhooksGoOnWhenTheSenderDies(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cluster := etcdtest.Start(t, 1)
	cli := cluster.Client()
	recv := &hookReceiver{held: make(chan arrival, 1), release: make(chan struct{})}
	srv := httptest.NewServer(recv)
	defer srv.Close()
	released := sync.OnceFunc(func() { close(recv.release) })
	defer released() // before srv.Close, which waits for the handler

	g := newGroup(t, cluster.Endpoints(), ttl)
	g.extra = []string{"--webhook-allow-private"}
	reps := map[string]*replica{}
	var addrs []string
	for _, name := range []string{"replica-a", "replica-b"} {
		r := g.replica(t, name)
		r.start(t)
		reps[name] = r
		addrs = append(addrs, r.addr)
	}
	cl := dial(t, addrs...)

	// Webhooks wait for format 7: finalize it (a new prefix may be in it
	// already), then subscribe once the replica asked has learned it.
	_, _ = cl.Cluster.FinalizeCluster(ctx, &reinv1.FinalizeClusterRequest{})
	if err := retry(ctx, func(ctx context.Context) error {
		_, err := cl.Webhooks.CreateWebhook(ctx, &reinv1.CreateWebhookRequest{Webhook: &reinv1.Webhook{
			Name: "oncall", Url: srv.URL, Secrets: []string{hookSecret},
		}})
		if status.Code(err) == codes.FailedPrecondition {
			return status.Error(codes.Unavailable, err.Error()) // not finalized yet here: again
		}
		return err
	}); err != nil {
		t.Fatalf("CreateWebhook: %v", err)
	}
	sender, err := leaderOf(ctx, cli)
	if err != nil {
		t.Fatal(err)
	}

	// The runs, and the kill of the sender while it waits on a delivery.
	recv.armed.Store(true)
	const n = 12
	runIDs := make([]string, n)
	errs := make([]error, n)
	var drivers sync.WaitGroup
	for i := range n {
		drivers.Go(func() { runIDs[i], errs[i] = drive(ctx, cl, i, 100) })
	}
	var cut arrival
	select {
	case cut = <-recv.held:
	case <-ctx.Done():
		t.Fatal("no delivery came to hold")
	}
	reps[sender].kill(t)
	killed := time.Now()
	released()
	drivers.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("run %d (%s): %v", i, runIDs[i], err)
		}
	}
	// Every delivery is taken: the outbox empties.
	for {
		resp, err := cli.Get(ctx, prefix+"outbox/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if resp.Count == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d deliveries still in the outbox %v after the kill", resp.Count, time.Since(killed))
		case <-time.After(50 * time.Millisecond):
		}
	}
	took := time.Since(killed)
	if now, err := leaderOf(ctx, cli); err != nil || now == sender {
		t.Fatalf("the sender after the kill: %q, %v; want the other replica", now, err)
	}

	// The histories against what the receiver took.
	got, bad := recv.taken()
	if len(bad) > 0 {
		t.Fatalf("%d deliveries with a bad signature: %v", len(bad), bad)
	}
	byID := map[string]arrival{}
	count := map[string]int{}
	firstAt := map[string]int{}
	for i, a := range got {
		if prev, ok := byID[a.id]; ok && prev.body != a.body {
			t.Fatalf("delivery %s was sent with two bodies:\n%s\n%s", a.id, prev.body, a.body)
		}
		if _, ok := byID[a.id]; !ok {
			firstAt[a.id] = i
		}
		byID[a.id] = a
		count[a.id]++
	}
	committed := map[string]bool{}
	for _, runID := range runIDs {
		want, err := statusDeliveries(ctx, cl.Runs, "oncall", runID)
		if err != nil {
			t.Fatal(err)
		}
		last := -1
		for _, w := range want {
			committed[w[0]] = true
			a, ok := byID[w[0]]
			if !ok {
				t.Fatalf("run %s: the committed change %s (%s) was never delivered", runID, w[0], w[1])
			}
			if a.typ != w[1] || a.run != runID {
				t.Fatalf("delivery %s is %s of run %s, want %s of %s", w[0], a.typ, a.run, w[1], runID)
			}
			if firstAt[w[0]] < last {
				t.Fatalf("run %s: %s arrived before the change committed ahead of it", runID, w[0])
			}
			last = firstAt[w[0]]
		}
	}
	repeats := 0
	for id, c := range count {
		if !committed[id] {
			t.Fatalf("delivery %s names no committed status change", id)
		}
		repeats += c - 1
	}
	if count[cut.id] < 2 {
		t.Fatalf("the delivery cut by the kill (%s) arrived %d times; want it sent again by the other replica", cut.id, count[cut.id])
	}
	t.Logf("%d runs, %d status changes delivered in %d requests (%d repeats); the sender %s killed holding %s, the outbox empty %v later",
		n, len(committed), len(got), repeats, sender, cut.id, took.Round(time.Millisecond))
}
