// Package etcdflags is the command line's description of an etcd cluster:
// its endpoints, the key prefix rein lives under, TLS to its members and a
// request timeout, as rein serve --etcd and rein-bench --store etcd take
// them, and the client they dial.
package etcdflags

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	etcdstore "github.com/reinhq/rein/internal/store/etcd"
)

// Flags name an etcd cluster and the prefix a rein store lives under. The
// TLS flags are the client's (--tls-ca, --tls-cert, --tls-key) with an
// etcd- prefix.
type Flags struct {
	Endpoints string
	Prefix    string
	TLSCA     string
	TLSCert   string
	TLSKey    string
	Timeout   time.Duration
}

// Names are the flags Register adds but --etcd itself: each needs --etcd.
var Names = []string{"etcd-prefix", "etcd-tls-ca", "etcd-tls-cert", "etcd-tls-key", "etcd-timeout"}

// UsageError is a flag that is wrong: the command's usage error.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

func usage(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// Register adds --etcd and the flags of Names to fs.
func (f *Flags) Register(fs *pflag.FlagSet) {
	fs.StringVar(&f.Endpoints, "etcd", "", "keep the runs in the etcd cluster at these comma-separated endpoints (host:port) instead of the --db file")
	fs.StringVar(&f.Prefix, "etcd-prefix", "/rein/", "with --etcd, the key prefix rein's runs live under (it must end in /); servers sharing a prefix share their runs")
	fs.StringVar(&f.TLSCA, "etcd-tls-ca", "", "with --etcd, the CA that signs the etcd members' certificates (PEM); turns TLS to etcd on")
	fs.StringVar(&f.TLSCert, "etcd-tls-cert", "", "with --etcd, the client certificate rein shows etcd (PEM)")
	fs.StringVar(&f.TLSKey, "etcd-tls-key", "", "with --etcd, the key of --etcd-tls-cert (PEM)")
	fs.DurationVar(&f.Timeout, "etcd-timeout", etcdstore.DefaultTimeout, "with --etcd, how long one request to etcd may take before it fails as unavailable")
}

// Set reports whether --etcd was given.
func (f *Flags) Set() bool { return f.Endpoints != "" }

// Check refuses the flags of Names, and those of more, without --etcd, and
// TLS flags that do not fit. Its errors are UsageErrors.
func (f *Flags) Check(fs *pflag.FlagSet, more ...string) error {
	if !f.Set() {
		for _, name := range append(Names, more...) {
			if fs.Changed(name) {
				return usage("--%s needs --etcd ENDPOINTS", name)
			}
		}
		return nil
	}
	if (f.TLSCert == "") != (f.TLSKey == "") {
		return usage("--etcd-tls-cert and --etcd-tls-key go together: give both or neither")
	}
	if !strings.HasSuffix(f.Prefix, "/") {
		return usage("--etcd-prefix %q must end in /, for example /rein/", f.Prefix)
	}
	if f.Timeout <= 0 {
		return usage("--etcd-timeout must be positive")
	}
	return nil
}

// List is the endpoints, trimmed, without empty ones.
func (f *Flags) List() []string {
	var out []string
	for _, ep := range strings.Split(f.Endpoints, ",") {
		if ep = strings.TrimSpace(ep); ep != "" {
			out = append(out, ep)
		}
	}
	return out
}

// Client connects to the cluster, with dial added to the client's dial
// options (such as a stats handler that counts what it receives). etcd's
// client dials lazily; the first request (the store's open) tells whether
// the cluster answers. A flag that is wrong is a UsageError.
func (f *Flags) Client(dial ...grpc.DialOption) (*clientv3.Client, error) {
	cfg := clientv3.Config{
		Endpoints:   f.List(),
		DialTimeout: f.Timeout,
		// The client's own logs would be a second, differently formatted
		// stream on stderr; rein reports what fails through its errors.
		Logger: zap.NewNop(),
		// A member that stops answering is noticed and left for another.
		DialKeepAliveTime:    2 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
		DialOptions:          dial,
	}
	if len(cfg.Endpoints) == 0 {
		return nil, usage("--etcd %q names no endpoint: give host:port[,host:port…]", f.Endpoints)
	}
	if f.TLSCA != "" || f.TLSCert != "" {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if f.TLSCA != "" {
			pem, err := os.ReadFile(f.TLSCA)
			if err != nil {
				return nil, usage("--etcd-tls-ca: %v", err)
			}
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				return nil, usage("--etcd-tls-ca %s holds no PEM certificate", f.TLSCA)
			}
		}
		if f.TLSCert != "" {
			cert, err := tls.LoadX509KeyPair(f.TLSCert, f.TLSKey)
			if err != nil {
				return nil, usage("--etcd-tls-cert/--etcd-tls-key: %v", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		cfg.TLS = tc
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to etcd at %s: %w", f.Endpoints, err)
	}
	return cli, nil
}
