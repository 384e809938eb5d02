package server

import (
	"context"
	"io"
	"log/slog"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// backuper is a store that writes a consistent copy of itself while it
// serves (the bbolt store: internal/store/bolt/backup.go).
type backuper interface {
	Backup(ctx context.Context, w io.Writer) (int64, error)
}

// backupChunk is the most a BackupResponse carries.
const backupChunk = 1 << 20

// storageService serves rein.v1.StorageService: the operator's calls on the
// store as a whole.
type storageService struct {
	reinv1.UnsafeStorageServiceServer
	// backups is the store's backup, or nil when it has none (etcd).
	backups backuper
	log     *slog.Logger
}

var _ reinv1.StorageServiceServer = (*storageService)(nil)

// Backup streams a consistent copy of the store's file in chunks.
func (s *storageService) Backup(_ *reinv1.BackupRequest, stream reinv1.StorageService_BackupServer) error {
	if s.backups == nil {
		return status.Error(codes.FailedPrecondition, "this server keeps its runs in etcd, which rein does not back up: "+
			"take a snapshot with etcd's own `etcdctl snapshot save FILE` (docs/storage.md)")
	}
	w := &chunkWriter{stream: stream, buf: make([]byte, 0, backupChunk)}
	n, err := s.backups.Backup(stream.Context(), w)
	if err == nil {
		err = w.flush()
	}
	if err == nil {
		err = stream.Send(&reinv1.BackupResponse{Size: n})
	}
	return toStatus(s.log, "Backup", err)
}

// chunkWriter sends what is written to it as BackupResponses of
// backupChunk bytes.
type chunkWriter struct {
	stream reinv1.StorageService_BackupServer
	buf    []byte
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := min(len(p), backupChunk-len(w.buf))
		w.buf = append(w.buf, p[:k]...)
		p = p[k:]
		if len(w.buf) == backupChunk {
			if err := w.flush(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

func (w *chunkWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	err := w.stream.Send(&reinv1.BackupResponse{Chunk: w.buf})
	// A sent message must not change (a stats handler may read it late):
	// the next chunk goes in a buffer of its own.
	w.buf = make([]byte, 0, backupChunk)
	return err
}
