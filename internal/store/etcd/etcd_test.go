package etcd

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/store/storetest"
)

// The package's tests share one embedded etcd (shared), each under a key
// prefix of its own; the tests that stop etcd start one of their own.
var shared *clientv3.Client

// The test etcd takes requests up to 8 MiB, so that the conformance suite's
// 3 MiB blob fits one Txn; --max-txn-ops stays at its default, so that Txns
// over it are nested.
const testRequestBytes = 8 << 20

// testOptions are the store's options against the test etcd: a generous
// timeout for a loaded 2-core machine under -race.
var testOptions = Options{Timeout: 30 * time.Second, MaxRequestBytes: testRequestBytes, MaxBlobBytes: 4 << 20}

func TestMain(m *testing.M) {
	os.Exit(runWithEtcd(m))
}

func runWithEtcd(m *testing.M) int {
	dir, err := os.MkdirTemp("", "rein-etcd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	e, err := startEtcd(dir, freeURL(), freeURL(), false)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer e.Close()
	cli, err := newClient(e)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cli.Close()
	shared = cli
	return m.Run()
}

// startEtcd starts a one-member etcd in dir on the client and peer URLs
// given, its logs silenced, and waits (30s at most) until it serves. Unless
// durable, it skips fsync: the tests stop etcd cleanly, so nothing needs the
// disk, and the benchmarks that measure durability ask for it.
func startEtcd(dir string, client, peer url.URL, durable bool) (*embed.Etcd, error) {
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.Name = "test"
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.MaxRequestBytes = testRequestBytes
	cfg.UnsafeNoFsync = !durable
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("start the test etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("start the test etcd: %w", err)
	case <-time.After(30 * time.Second):
		e.Close()
		return nil, fmt.Errorf("start the test etcd: not ready within 30s")
	}
}

// freeURL is an http URL on 127.0.0.1 with a port free a moment ago.
func freeURL() url.URL {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return url.URL{Scheme: "http", Host: l.Addr().String()}
}

func newClient(e *embed.Etcd) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:          []string{e.Config().AdvertiseClientUrls[0].String()},
		DialTimeout:        5 * time.Second,
		Logger:             zap.NewNop(),
		MaxCallSendMsgSize: testRequestBytes + 1<<20,
	})
}

// prefixOf is the key prefix of the store in a test's dir.
func prefixOf(dir string) string { return "/t" + dir + "/" }

func openShared(t testing.TB, prefix string) *Store {
	t.Helper()
	s, err := Open(context.Background(), shared, prefix, testOptions)
	if err != nil {
		t.Fatalf("Open(%s): %v", prefix, err)
	}
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, dir string) store.Store {
		return openShared(t, prefixOf(dir))
	})
}
