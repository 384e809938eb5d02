package assembly

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store/bolt"
)

// reopen fails the test unless the bbolt file at db opens: bbolt locks
// the file while a store has it, so a store left open fails here.
func reopen(t *testing.T, db string) {
	t.Helper()
	st, err := bolt.Open(db, bolt.Options{LockTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatalf("the store at %s is still held after the server let it go: %v", db, err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}

// A server started in memory answers over DialContext, and Close lets its
// store go.
func TestStartInMemory(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "dir", "rein.db")
	r, err := Start(context.Background(), Config{DB: db})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient("passthrough:///assembly", grpc.WithContextDialer(r.DialContext),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := reinv1.NewRunServiceClient(cc).GetServerInfo(context.Background(), &reinv1.GetServerInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetFormats() == nil {
		t.Error("GetServerInfo has no store formats: Start gave the node no Cluster")
	}
	_ = cc.Close()
	r.Close()
	reopen(t, db)
}

// A Start that fails releases what it opened: the store, whether the node
// took it over or not, and the ports it listened on; its error's Kind says
// whether the configuration or the moment is at fault.
func TestStartFailureReleases(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = taken.Close() })
	for _, tc := range []struct {
		name string
		cfg  func(db string) Config
		want Kind
	}{
		{"the gRPC port is taken, after the node opened", func(db string) Config {
			return Config{DB: db, Listen: taken.Addr().String(), AdminListen: "127.0.0.1:0"}
		}, Unavailable},
		{"the archive cannot open, before the node opened", func(db string) Config {
			return Config{DB: db, Lifecycle: Lifecycle{Archive: "nope://archive"}}
		}, Refused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := filepath.Join(t.TempDir(), "rein.db")
			r, err := Start(context.Background(), tc.cfg(db))
			if err == nil {
				r.Close()
				t.Fatal("Start succeeded")
			}
			if r != nil {
				t.Error("a failed Start returned a server")
			}
			var se *Error
			if !errors.As(err, &se) || KindOf(err) != tc.want {
				t.Errorf("Start: %v (kind %v), want kind %v", err, KindOf(err), tc.want)
			}
			reopen(t, db)
		})
	}
}
