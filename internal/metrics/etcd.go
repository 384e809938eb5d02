package metrics

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"
)

// etcd: a server whose runs live in an etcd cluster (rein serve --etcd)
// counts what its etcd client receives, so that an operator sees what the
// other servers' work costs this one (docs/operating.md, "Metrics").

// EtcdDialOptions are the dial options of the server's etcd client
// (clientv3.Config.DialOptions) that count the bytes of every gRPC message
// it receives (rein_etcd_received_bytes_total): replies, watch events,
// lease keep-alives. A nil Metrics gives none, and counts nothing. Each
// call gives a handler on the same counter.
func (m *Metrics) EtcdDialOptions() []grpc.DialOption {
	if m == nil {
		return nil
	}
	return []grpc.DialOption{grpc.WithStatsHandler(&etcdReceived{bytes: m.etcdReceivedCounter()})}
}

// etcdReceivedCounter is rein_etcd_received_bytes_total, registered on the
// first call.
func (m *Metrics) etcdReceivedCounter() prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "rein_etcd_received_bytes_total",
		Help: "Bytes of the gRPC messages this server's etcd client received (payload and gRPC framing): replies, watch events, lease keep-alives."})
	if err := m.Registry.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			panic(err) // the same name with another shape: a programming error
		}
		return are.ExistingCollector.(prometheus.Counter)
	}
	return c
}

// etcdReceived is a gRPC client's stats.Handler that adds the wire length
// of each message received to bytes.
type etcdReceived struct {
	bytes prometheus.Counter
}

var _ stats.Handler = (*etcdReceived)(nil)

func (h *etcdReceived) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

func (h *etcdReceived) HandleRPC(_ context.Context, s stats.RPCStats) {
	if in, ok := s.(*stats.InPayload); ok {
		h.bytes.Add(float64(in.WireLength))
	}
}

func (h *etcdReceived) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}

func (h *etcdReceived) HandleConn(context.Context, stats.ConnStats) {}
