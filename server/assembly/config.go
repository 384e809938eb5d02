// Package assembly builds a rein server from one Config: its store (a bbolt
// file, or an etcd cluster it shares as one replica), the archive and the
// lifecycle keeper, admission, the model-rate limits, the node (engine,
// watch hub, schedules, webhook sender, the gRPC services) and its faces
// (gRPC on a TCP listener or in memory, the operators' HTTP port, the HTTP
// face). rein serve and the embedded server of every CLI command start
// through Start, so a setting reaches both or neither
// (docs/architecture.md, "How the pieces meet": one assembly).
//
// Start opens in one order and undoes in the reverse one: a step that fails
// releases everything opened before it, and Running.Shutdown or Close
// releases it all once the node has stopped.
package assembly

import (
	"log/slog"
	"net"
	"time"

	"github.com/reinhq/rein/internal/etcdflags"
	"github.com/reinhq/rein/internal/hostcheck"
	"github.com/reinhq/rein/internal/ratelimit"
	"github.com/reinhq/rein/internal/tenants"
	"github.com/reinhq/rein/server"
)

// Config is everything a server is, as Start assembles it.
type Config struct {
	// Node configures the node (server.Open). Start fills in what it opens
	// itself: Store, Cluster, Archive, Policy, PolicySoonest, SweepEvery,
	// Rates, Admission, Traces (with OTel), and with Etcd the replica's
	// fields (Replica, Owner, MaxDriven, Commits, Leased, Relay) and the
	// webhook sender's lead (Webhooks.Lead, Follow, NeedFormat).
	Node server.Config

	// DB is the bbolt file the runs are in, created with its directory
	// when it is not there; unused with Etcd.
	DB string
	// ReadOnly opens DB read-only, for a command that only reads: it
	// never writes a byte, and the node refuses every write.
	ReadOnly bool
	// Etcd, when set, keeps the runs in an etcd cluster that other
	// servers share: this server is one replica of them.
	Etcd *Etcd
	// PublicURL is the console's address as people reach it; a webhook
	// about a paused run links to the run there.
	PublicURL string

	// MaxRunning caps the runs of all tenants running at once; 0 means no
	// cap.
	MaxRunning int
	// ModelLimits are the model-rate limits every run (and every replica)
	// shares, by "provider/model" (ratelimit.ParseModelLimit).
	ModelLimits map[string]ratelimit.ModelLimit
	// Tenants holds the per-tenant settings in force; nil means none.
	// With a file (Tenants.Path), its admission and rates apply, and its
	// lifecycle over Lifecycle's.
	Tenants *tenants.Holder
	// Lifecycle is where the runs that ended are archived, and when they
	// are archived and deleted.
	Lifecycle Lifecycle
	// OTel exports the runs' traces over OTLP, as the standard OTEL_*
	// environment configures it (telemetry.Setup).
	OTel bool

	// Listen is the TCP address the gRPC services are served on; "" serves
	// them in memory only, for this process (Running.DialContext).
	Listen string
	// AdminListen, when set, serves the operators' HTTP (/metrics,
	// /healthz, /readyz, and /debug/pprof with Pprof) on this address,
	// under AdminSite's Host and Origin rule. Node.Metrics should be set.
	AdminListen string
	AdminSite   hostcheck.Rule
	Pprof       bool
	// HTTPListen, when set, is listened on before the store opens, and
	// HTTP serves it once the node is open, until the stop it returns is
	// called (the web console and the faces over HTTP).
	HTTPListen string
	HTTP       func(lis net.Listener, node *server.Node, cfg server.Config) (stop func(), err error)
}

// Etcd is a server's place among the replicas sharing an etcd cluster.
type Etcd struct {
	// Cluster is the cluster's endpoints, key prefix, TLS and timeout.
	Cluster etcdflags.Flags
	// CompactEvery is how often the server compacts etcd's history; 0
	// never (etcd compacts it itself).
	CompactEvery time.Duration
	// LeaseTTL is the TTL of the server's lease: how soon after it stops
	// answering the other servers take its runs (whole seconds).
	LeaseTTL time.Duration
	// FinalizeAfter is how long every live server must write a newer
	// store format before this one finalizes it (replica.Config).
	FinalizeAfter time.Duration
	// MaxRuns caps the runs this server drives at once; 0 means no cap.
	MaxRuns int
	// Name is this server's name in the runs' owner keys and its logs;
	// "" means its host name and process ID.
	Name string
}

// Lifecycle is the runs' lifetime after they end.
type Lifecycle struct {
	// Archive is the URL of the blob store (archive.Open) that runs are
	// archived to and archived runs are read from; "" means none.
	Archive string
	// Sweep archives and deletes the runs that ended, every Every, by the
	// policy below over each tenant's (Config.Tenants); false sweeps
	// nothing (a command's embedded server).
	Sweep bool
	// ArchiveAfter, when ArchiveOn, is how long after it ends a run is
	// archived; Retain, when RetainOn, how long until it is deleted.
	ArchiveAfter time.Duration
	ArchiveOn    bool
	Retain       time.Duration
	RetainOn     bool
	Every        time.Duration
}

// logger is cfg's logger, or one that discards.
func (cfg *Config) logger() *slog.Logger {
	if cfg.Node.Logger != nil {
		return cfg.Node.Logger
	}
	return slog.New(slog.DiscardHandler)
}
