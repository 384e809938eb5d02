package server

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/codes"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/storeformat"
)

// stubCluster is a Cluster whose Finalize fails with err.
type stubCluster struct {
	*storeformat.Single
	err error
}

func (c stubCluster) Finalize(ctx context.Context) (storeformat.Format, storeformat.Format, error) {
	if c.err != nil {
		return 0, 0, c.err
	}
	return c.Single.Finalize(ctx)
}

// TestClusterService: with a Cluster, GetClusterStatus and GetServerInfo
// report its formats, only to an admin; a finalization the cluster cannot
// make is FailedPrecondition. The twin: a server without a Cluster answers
// Unimplemented and reports no formats.
func TestClusterService(t *testing.T) {
	gate := storeformat.NewGate(storeformat.This(), storeformat.Current, nil)
	single := storeformat.NewSingle("rein test", gate, func() int { return 3 })
	s := newTCPServer(t, Config{Directory: testDirectory(t), Cluster: stubCluster{Single: single,
		err: errors.Join(storeformat.ErrNotFinalizable, errors.New("replica x is not believed"))}})
	cl := reinv1.NewClusterServiceClient(s.conn)
	ctx := context.Background()
	st, err := cl.GetClusterStatus(ctx, &reinv1.GetClusterStatusRequest{}, as("a-admin"))
	if err != nil {
		t.Fatal(err)
	}
	if st.GetBackend() != "bbolt" || st.GetActiveFormat() != int32(storeformat.Current) || len(st.GetReplicas()) != 1 ||
		st.GetReplicas()[0].GetRunsDriven() != 3 || !st.GetReplicas()[0].GetSelf() || st.GetReplicas()[0].GetFormats().GetWrites().GetMax() != int32(storeformat.Current) {
		t.Fatalf("status: %v", st)
	}
	if _, err := cl.GetClusterStatus(ctx, &reinv1.GetClusterStatusRequest{}, as("a-operator")); codeOf(err) != codes.PermissionDenied {
		t.Fatalf("status as an operator: %v", err)
	}
	if _, err := cl.FinalizeCluster(ctx, &reinv1.FinalizeClusterRequest{}, as("a-admin")); codeOf(err) != codes.FailedPrecondition {
		t.Fatalf("a finalization the cluster cannot make: %v", err)
	}
	info, err := s.client.GetServerInfo(ctx, &reinv1.GetServerInfoRequest{}, as("a-viewer"))
	if err != nil || info.GetFormats().GetActive() != int32(storeformat.Current) || info.GetFormats().GetBuild().GetReads().GetMin() != int32(storeformat.Oldest) {
		t.Fatalf("GetServerInfo: %v %v", info, err)
	}

	bare := newTCPServer(t, Config{})
	if _, err := reinv1.NewClusterServiceClient(bare.conn).GetClusterStatus(ctx, &reinv1.GetClusterStatusRequest{}); codeOf(err) != codes.Unimplemented {
		t.Fatalf("status without a Cluster: %v", err)
	}
	if info, err := bare.client.GetServerInfo(ctx, &reinv1.GetServerInfoRequest{}); err != nil || info.GetFormats() != nil {
		t.Fatalf("GetServerInfo without a Cluster: %v %v", info, err)
	}
}
