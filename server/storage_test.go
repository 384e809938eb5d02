package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
)

// storageClient is a node on st and a StorageService client of it over
// bufconn.
func storageClient(t *testing.T, st store.Store) reinv1.StorageServiceClient {
	t.Helper()
	node, err := Open(context.Background(), Config{Store: st, Tools: fixtures()})
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
	t.Cleanup(func() {
		_ = cc.Close()
		node.Close()
	})
	return reinv1.NewStorageServiceClient(cc)
}

// backupOf reads a whole Backup stream: its bytes and the size its last
// message gave, or the stream's error.
func backupOf(t *testing.T, c reinv1.StorageServiceClient) ([]byte, int64, error) {
	t.Helper()
	stream, err := c.Backup(context.Background(), &reinv1.BackupRequest{})
	if err != nil {
		return nil, 0, err
	}
	var buf bytes.Buffer
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return buf.Bytes(), -1, nil
		}
		if err != nil {
			return nil, 0, err
		}
		if len(resp.GetChunk()) > backupChunk {
			t.Fatalf("a chunk of %d bytes, want at most %d", len(resp.GetChunk()), backupChunk)
		}
		if len(resp.GetChunk()) == 0 {
			if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
				t.Fatalf("the stream goes on after its size: %v", err)
			}
			return buf.Bytes(), resp.GetSize(), nil
		}
		buf.Write(resp.GetChunk())
	}
}

// opaqueStore is a store that hides every method store.Store does not
// name, Backup among them, as the etcd store has none.
type opaqueStore struct{ store.Store }

// TestBackupStreamsTheFile: Backup streams the bbolt store's file in
// chunks of at most 1 MiB, ending with its size. The twin: a store with no
// backup of its own (etcd) is FailedPrecondition, naming etcdctl.
func TestBackupStreamsTheFile(t *testing.T) {
	data, size, err := backupOf(t, storageClient(t, tempBolt(t)))
	if err != nil {
		t.Fatal(err)
	}
	if size != int64(len(data)) || size == 0 {
		t.Fatalf("the stream carried %d bytes and says %d", len(data), size)
	}

	_, _, err = backupOf(t, storageClient(t, opaqueStore{tempBolt(t)}))
	if status.Code(err) != codes.FailedPrecondition || !bytes.Contains([]byte(status.Convert(err).Message()), []byte("etcdctl snapshot save")) {
		t.Fatalf("Backup of a store with no backup: %v, want FailedPrecondition naming etcdctl snapshot save", err)
	}
}
