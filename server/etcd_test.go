package server

// A node on the etcd store, over an etcd member process (internal/etcdtest):
// the store's errors reach callers with their gRPC codes.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/etcdtest"
	"github.com/reinhq/rein/internal/store"
	etcdstore "github.com/reinhq/rein/internal/store/etcd"
)

// etcdServer is a node on an etcd store under its own prefix of c, served on
// 127.0.0.1:0 like newTCPServer's.
func etcdServer(t *testing.T, c *etcdtest.Cluster, prefix string, opts etcdstore.Options) *tcpServer {
	t.Helper()
	st, err := etcdstore.Open(context.Background(), c.Client(), prefix, opts)
	if err != nil {
		t.Fatal(err)
	}
	return serveTCP(t, Config{Store: st, Tools: fixtures(), Directory: testDirectory(t)})
}

// TestEtcdUnavailable: a node on etcd serves runs; with etcd gone, reads
// and new runs fail with Unavailable and a message naming etcd, within the
// store's timeout (the test waits far longer before it calls that a hang).
func TestEtcdUnavailable(t *testing.T) {
	c := etcdtest.Start(t, 1)
	s := etcdServer(t, c, "/rein/", etcdstore.Options{Timeout: 2 * time.Second})
	run := s.startAs(t, "a-operator", contract(nil, final("done")))
	if run.GetStatus() != reinv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Fatalf("run on etcd: %v, want completed", run.GetStatus())
	}

	c.Kill(0)
	calls := map[string]func(ctx context.Context) error{
		"GetRun": func(ctx context.Context) error {
			_, err := s.client.GetRun(ctx, &reinv1.GetRunRequest{RunId: run.GetRunId()}, as("a-viewer"))
			return err
		},
		"ListRuns": func(ctx context.Context) error {
			_, err := s.client.ListRuns(ctx, &reinv1.ListRunsRequest{}, as("a-viewer"))
			return err
		},
		"StartRun": func(ctx context.Context) error {
			_, err := s.client.StartRun(ctx, &reinv1.StartRunRequest{RequestId: "while-etcd-is-down", Contract: contract(nil, final("done"))}, as("a-operator"))
			return err
		},
	}
	for name, call := range calls {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		err := call(ctx)
		cancel()
		st := wantCode(t, err, codes.Unavailable)
		if !strings.Contains(st.Message(), "etcd") {
			t.Errorf("%s with etcd gone: %q does not name etcd", name, st.Message())
		}
	}
}

// TestBlobOverStoreMaximum: an import bringing a blob larger than the
// store takes is InvalidArgument saying so, and stores nothing. The twin:
// the same export goes into a store that takes the blob.
func TestBlobOverStoreMaximum(t *testing.T) {
	ctx := context.Background()
	_, x := sourceRun(t)
	largest := 0
	for _, b := range x.GetBlobs() {
		largest = max(largest, len(b))
	}
	c := etcdtest.Start(t, 1)

	small := etcdServer(t, c, "/small/", etcdstore.Options{MaxBlobBytes: largest - 1})
	_, err := small.client.ImportRun(ctx, &reinv1.ImportRunRequest{Export: x}, as("a-admin"))
	st := wantCode(t, err, codes.InvalidArgument)
	if !strings.Contains(st.Message(), fmt.Sprint(largest)) || !strings.Contains(st.Message(), "nothing was stored") {
		t.Errorf("message %q does not say how large the blob is and that nothing was stored", st.Message())
	}
	_, err = small.client.GetRun(ctx, &reinv1.GetRunRequest{RunId: x.GetEvents()[0].GetRunId()}, as("a-viewer"))
	wantCode(t, err, codes.NotFound)

	fits := etcdServer(t, c, "/fits/", etcdstore.Options{})
	if _, err := fits.client.ImportRun(ctx, &reinv1.ImportRunRequest{Export: x}, as("a-admin")); err != nil {
		t.Fatalf("ImportRun into a store that takes its blobs: %v", err)
	}

	// toStatus itself, on the error a store returns.
	err = toStatus(slog.New(slog.NewTextHandler(io.Discard, nil)), "ImportRun", fmt.Errorf("import: blob x is too large: %w", store.ErrInvalidBlob))
	wantCode(t, err, codes.InvalidArgument)
}
