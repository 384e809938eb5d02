package etcd

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/reinhq/rein/internal/store"
)

// TestErrorsOfAnUnavailableCluster maps the errors an etcd client returns
// as they reach the store (through clientv3.ContextError, which turns the
// server's own errors into rpctypes.EtcdError): every way of "the cluster
// cannot answer now" is ErrUnavailable naming etcd; a refusal that retrying
// cannot fix, and the caller's own cancellation, are not.
func TestErrorsOfAnUnavailableCluster(t *testing.T) {
	s := openShared(t, prefixOf(t.TempDir()))
	defer s.Close()
	live := context.Background()
	unavailable := []error{
		rpctypes.ErrGRPCNoLeader,
		rpctypes.ErrGRPCLeaderChanged,
		rpctypes.ErrGRPCStopped,
		rpctypes.ErrGRPCTimeout, // a quorum lost: the server's own request timeout
		rpctypes.ErrGRPCTimeoutDueToLeaderFail,
		rpctypes.ErrGRPCTimeoutDueToConnectionLost,
		rpctypes.ErrGRPCUnhealthy,
		status.Error(codes.Unavailable, "connection refused"),
		status.Error(codes.DeadlineExceeded, "context deadline exceeded"),
		context.DeadlineExceeded,
	}
	for _, sent := range unavailable {
		err := s.etcdErr(live, "append to run r", clientv3.ContextError(live, sent))
		if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "etcd at ") {
			t.Errorf("%v: got %v; want ErrUnavailable naming etcd", sent, err)
		}
	}

	for _, sent := range []error{rpctypes.ErrGRPCRequestTooLarge, rpctypes.ErrGRPCTooManyOps, rpctypes.ErrGRPCPermissionDenied} {
		err := s.etcdErr(live, "append to run r", clientv3.ContextError(live, sent))
		if errors.Is(err, store.ErrUnavailable) {
			t.Errorf("%v: got %v; want an error that is not ErrUnavailable (retrying cannot fix it)", sent, err)
		}
	}

	cancelled, cancel := context.WithCancel(live)
	cancel()
	err := s.etcdErr(cancelled, "append to run r", clientv3.ContextError(cancelled, status.Error(codes.Canceled, "context canceled")))
	if !errors.Is(err, context.Canceled) || errors.Is(err, store.ErrUnavailable) {
		t.Errorf("the caller's cancellation: got %v; want context.Canceled, not ErrUnavailable", err)
	}
}
