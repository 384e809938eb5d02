package server

import (
	"context"
	"log/slog"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/storeformat"
)

// Cluster is what ClusterService needs of the servers sharing the store:
// replica.Replica on etcd, storeformat.Single on bbolt.
type Cluster interface {
	// Status is the store's formats and live servers.
	Status(ctx context.Context) (storeformat.Status, error)
	// Finalize makes the format every live server writes active now.
	Finalize(ctx context.Context) (from, to storeformat.Format, err error)
	// Gate is the store's active format as this server's features see it.
	Gate() *storeformat.Gate
}

// clusterService serves ClusterService (proto/rein/v1/cluster_service.proto).
type clusterService struct {
	reinv1.UnsafeClusterServiceServer
	cluster Cluster
	log     *slog.Logger
}

var _ reinv1.ClusterServiceServer = (*clusterService)(nil)

// GetClusterStatus lists the live servers and the store's formats.
func (s *clusterService) GetClusterStatus(ctx context.Context, _ *reinv1.GetClusterStatusRequest) (*reinv1.GetClusterStatusResponse, error) {
	st, err := s.cluster.Status(ctx)
	if err != nil {
		return nil, toStatus(s.log, "GetClusterStatus", err)
	}
	resp := &reinv1.GetClusterStatusResponse{
		Backend: st.Backend, ActiveFormat: int32(st.Active), Finalized: st.Finalized, TargetFormat: int32(st.Target),
		FinalizationPending: st.Pending, Blocked: st.Blocked, FeaturesOff: st.Off,
	}
	if !st.PendingSince.IsZero() {
		resp.PendingSince = timestamppb.New(st.PendingSince)
	}
	if st.FinalizeAfter > 0 {
		resp.FinalizeAfter = durationpb.New(st.FinalizeAfter)
	}
	for _, r := range st.Replicas {
		cr := &reinv1.ClusterReplica{
			Name: r.Name, Build: r.Build, Card: r.Card, Legacy: r.Legacy, Formats: formatsProto(r.Formats),
			Error: r.Err, RunsDriven: r.RunsDriven, Self: r.Self,
		}
		if !r.Leased.IsZero() {
			cr.Leased = timestamppb.New(r.Leased)
		}
		resp.Replicas = append(resp.Replicas, cr)
	}
	return resp, nil
}

// FinalizeCluster finalizes the pending format now.
func (s *clusterService) FinalizeCluster(ctx context.Context, _ *reinv1.FinalizeClusterRequest) (*reinv1.FinalizeClusterResponse, error) {
	from, to, err := s.cluster.Finalize(ctx)
	if err != nil {
		return nil, toStatus(s.log, "FinalizeCluster", err)
	}
	return &reinv1.FinalizeClusterResponse{FromFormat: int32(from), ToFormat: int32(to)}, nil
}

// unclustered answers ClusterService on a server given no Cluster (an
// embedded server of a command that reads a file).
type unclustered struct {
	reinv1.UnsafeClusterServiceServer
}

func (unclustered) GetClusterStatus(context.Context, *reinv1.GetClusterStatusRequest) (*reinv1.GetClusterStatusResponse, error) {
	return nil, errNoCluster
}

func (unclustered) FinalizeCluster(context.Context, *reinv1.FinalizeClusterRequest) (*reinv1.FinalizeClusterResponse, error) {
	return nil, errNoCluster
}

// errNoCluster is unclustered's answer.
var errNoCluster = status.Error(codes.Unimplemented, "this server reports no store format (an embedded server of a command): ask a rein serve with --server")

func formatsProto(b storeformat.Build) *reinv1.StoreFormats {
	return &reinv1.StoreFormats{
		Reads:  &reinv1.FormatRange{Min: int32(b.Reads.Min), Max: int32(b.Reads.Max)},
		Writes: &reinv1.FormatRange{Min: int32(b.Writes.Min), Max: int32(b.Writes.Max)},
	}
}

// serverFormats is what GetServerInfo says of the store formats; nil
// without a Cluster.
func serverFormats(c Cluster) *reinv1.ServerFormats {
	if c == nil {
		return nil
	}
	g := c.Gate()
	return &reinv1.ServerFormats{Build: formatsProto(g.Build()), Active: int32(g.Active()), FeaturesOff: g.Off()}
}
