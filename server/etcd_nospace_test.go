package server

// A node on an etcd store whose quota fills (etcd's NOSPACE alarm): writes
// reach callers as ResourceExhausted saying what frees etcd, reads still
// answer, /readyz is 503 naming the alarm and rein_store_no_space is 1,
// until an operator frees etcd.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/etcdtest"
	"github.com/reinhq/rein/internal/hostcheck"
	"github.com/reinhq/rein/internal/metrics"
	"github.com/reinhq/rein/internal/store"
	etcdstore "github.com/reinhq/rein/internal/store/etcd"
)

// noSpaceRemedy is what a caller is told about a full etcd.
var noSpaceRemedy = []string{"--quota-backend-bytes", "nothing was stored", "etcdctl compaction", "etcdctl defrag", "etcdctl alarm disarm"}

// TestNoSpaceStatus: a write the store refused for etcd's quota is
// ResourceExhausted, saying what frees etcd, with the RetryInfo of a full
// disk (freeing it takes a person). The twin: an unavailable etcd is
// Unavailable, not ResourceExhausted.
func TestNoSpaceStatus(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	err := toStatus(log, "StartRun", fmt.Errorf("create run r: %w: etcd at 127.0.0.1:2379 refused the write", store.ErrNoSpace))
	st := wantCode(t, err, codes.ResourceExhausted)
	for _, want := range noSpaceRemedy {
		if !strings.Contains(st.Message(), want) {
			t.Errorf("message %q does not say %q", st.Message(), want)
		}
	}
	if d, ok := retryDelay(err); !ok || d != diskFullRetry {
		t.Errorf("RetryInfo %v (present %v), want %v", d, ok, diskFullRetry)
	}

	err = toStatus(log, "StartRun", fmt.Errorf("create run r: %w", store.ErrUnavailable))
	wantCode(t, err, codes.Unavailable)
}

// spaceServer is a node with metrics on the etcd store st, reporting its
// space (rein_store_no_space) as rein serve --etcd does, its gRPC client
// over bufconn and its admin endpoints over HTTP.
func spaceServer(t *testing.T, st *etcdstore.Store) (*Node, reinv1.RunServiceClient, *httptest.Server) {
	t.Helper()
	m := metrics.New()
	m.TrackStoreSpace(st.SpaceAlarm)
	node, err := Open(context.Background(), Config{Store: st, Tools: fixtures(), Metrics: m, Resume: true})
	if err != nil {
		t.Fatal(err)
	}
	lis := bufconn.Listen(1 << 20)
	go func() { _ = node.GRPC.Serve(lis) }()
	cc, err := grpc.NewClient("passthrough:///test",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(node.AdminHandler(m, false, hostcheck.Rule{}))
	t.Cleanup(func() {
		hs.Close()
		_ = cc.Close()
		node.Close()
	})
	return node, reinv1.NewRunServiceClient(cc), hs
}

// TestEtcdNoSpace: with etcd's quota full, StartRun is ResourceExhausted
// saying what frees etcd (not Internal), a run stored before still reads,
// /readyz is 503 naming the NOSPACE alarm, and rein_store_no_space is 1.
// The twins: before the quota fills, and after an operator freed it
// (delete, compact, defragment, disarm), /readyz is 200, the gauge 0, and
// StartRun is served. The node wraps the store (the metrics' timing, the
// lifecycle's reads of archived runs): /readyz finds the etcd store's
// alarm through them.
func TestEtcdNoSpace(t *testing.T) {
	ctx := t.Context()
	c := etcdtest.StartWith(t, etcdtest.Options{Members: 1, QuotaBackendBytes: 4 << 20})
	cli := c.Client()
	st, err := etcdstore.Open(ctx, cli, "/rein/", etcdstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	node, client, hs := spaceServer(t, st)
	start := func(id string) (*reinv1.StartRunResponse, error) {
		return client.StartRun(ctx, &reinv1.StartRunRequest{RequestId: id, Contract: contract(nil, final("done"))})
	}
	noSpace := func() float64 {
		_, body := get(t, hs.URL+"/metrics")
		return sample(body, "rein_store_no_space")
	}
	wantReady := func(when string) {
		t.Helper()
		if code, body := get(t, hs.URL+"/readyz"); code != http.StatusOK {
			t.Fatalf("/readyz %s = %d %q, want 200", when, code, body)
		}
		if v := noSpace(); v != 0 {
			t.Fatalf("rein_store_no_space %s = %v, want 0", when, v)
		}
	}

	before, err := start("before")
	if err != nil {
		t.Fatalf("StartRun with room: %v", err)
	}
	id := before.GetRun().GetRunId()
	if err := node.Engine.Wait(ctx, id); err != nil { // its driver wrote its last step
		t.Fatal(err)
	}
	wantReady("with room")

	c.Fill(cli, "/filler/")
	_, err = start("while-full")
	s := wantCode(t, err, codes.ResourceExhausted)
	for _, want := range noSpaceRemedy {
		if !strings.Contains(s.Message(), want) {
			t.Errorf("StartRun with etcd full: %q does not say %q", s.Message(), want)
		}
	}
	if got, err := client.GetRun(ctx, &reinv1.GetRunRequest{RunId: id}); err != nil || got.GetRun().GetStatus() != reinv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Fatalf("GetRun with etcd full: %v, %v; want the completed run", got.GetRun().GetStatus(), err)
	}
	if code, body := get(t, hs.URL+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "NOSPACE alarm") {
		t.Fatalf("/readyz with etcd full = %d %q, want 503 naming the NOSPACE alarm", code, body)
	}
	if v := noSpace(); v != 1 {
		t.Fatalf("rein_store_no_space with etcd full = %v, want 1", v)
	}

	c.FreeSpace(cli, "/filler/")
	wantReady("after etcd was freed")
	if _, err := start("after"); err != nil {
		t.Fatalf("StartRun after etcd was freed: %v", err)
	}
}
