package bolt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/reinhq/rein/internal/store"
)

// The log is the file beside the store (WALPath) that makes a commit durable
// with one fdatasync: the writer puts a batch in its open bbolt
// transaction, appends the batch to the log, syncs the log, and answers.
// The bbolt transaction is committed (a checkpoint: bbolt's two syncs) only
// now and then, with the number of the last record it holds, after which
// the log is written again from its start. At Open, the records after the
// number the file holds are applied again (recover.go).
//
//	header  8 bytes "rein-wal", 8 bytes the store's ID (meta/store-id)
//	record  4 bytes length of the body, 4 bytes CRC-32C of the body,
//	        body: 8 bytes the record's number, then the batch (walbatch.go)
//
// Records are numbered from 1 without a gap across checkpoints. Each
// checkpoint writes from just after the header again, over the records it
// made obsolete, so the file keeps its blocks and a sync writes no size. A
// reader takes the records after the header while each is whole (its
// checksum holds) and numbered one more than the last: the first torn or
// obsolete record ends the log.
const (
	walMagic     = "rein-wal"
	walHeaderLen = 16
	walRecordHdr = 8
	walNumberLen = 8
	// walMaxRead is as much of the log as is read: the writer never takes
	// it past checkpointBytes (a batch that would is checkpointed instead),
	// so what lies beyond (a file grown by something else) holds no
	// record, and is not read into memory.
	walMaxRead = walHeaderLen + checkpointBytes
)

// walCRC is the records' checksum, CRC-32C as the seals'.
var walCRC = crc32.MakeTable(crc32.Castagnoli)

// WALPath is the log of the store at path.
func WALPath(path string) string { return path + "-wal" }

// Size is the bytes the store at path takes on disk: its file and its log.
func Size(path string) (int64, error) {
	info, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	size := info.Size()
	if wal, err := os.Stat(WALPath(path)); err == nil {
		size += wal.Size()
	}
	return size, nil
}

// walFile is the open log, written by the writer goroutine only.
type walFile struct {
	f      *os.File
	path   string
	noSync bool
	off    int64 // where the next record goes
	buf    []byte
}

// walRecord is one record as read back.
type walRecord struct {
	number uint64
	body   []byte // the batch
}

// createWAL makes a new log for the store with the given ID, synced with its
// directory, replacing any file at path.
func createWAL(path string, id []byte, noSync bool) (*walFile, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create the store's log %s: %w", path, err)
	}
	hdr := append([]byte(walMagic), id...)
	if _, err := f.WriteAt(hdr, 0); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("create the store's log %s: %w", path, diskFull(err))
	}
	l := &walFile{f: f, path: path, noSync: noSync, off: walHeaderLen}
	if err := l.sync(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("create the store's log %s: %w", path, diskFull(err))
	}
	if !noSync {
		if err := syncDir(filepath.Dir(path)); err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("create the store's log %s: %w", path, err)
		}
	}
	return l, nil
}

// record is a buffer for the next record: room for its header, to which
// the caller appends its body.
func (l *walFile) record() []byte {
	if cap(l.buf) < walRecordHdr+walNumberLen {
		l.buf = make([]byte, 0, 64<<10)
	}
	return l.buf[:walRecordHdr+walNumberLen]
}

// append writes b, a record() with its body appended, as the record
// numbered n, and syncs it. On an error the log is cut back to where it
// was, so that no part of the record stays to be read back; the error is
// the write's.
func (l *walFile) append(n uint64, b []byte) error {
	size := len(b)
	binary.BigEndian.PutUint32(b[0:4], uint32(size-walRecordHdr))
	binary.BigEndian.PutUint64(b[8:16], n)
	binary.BigEndian.PutUint32(b[4:8], crc32.Checksum(b[8:], walCRC))
	l.buf = b[:0] // its capacity, for the next record
	_, err := l.f.WriteAt(b, l.off)
	if err == nil {
		err = l.sync()
	}
	if err != nil {
		// Whether the failed record is on disk is unknown: cut the file
		// back before it, so that it cannot be read back as acknowledged.
		if terr := l.f.Truncate(l.off); terr != nil {
			return fmt.Errorf("append to the store's log %s: %w; cutting the failed record off failed too (%v)", l.path, diskFull(err), terr)
		}
		_ = l.sync()
		return fmt.Errorf("append to the store's log %s: %w", l.path, diskFull(err))
	}
	if cap(l.buf) > 1<<20 {
		l.buf = nil // one large batch does not keep its buffer
	}
	l.off += int64(size)
	return nil
}

// restart has the next record written just after the header, over the
// records a checkpoint made obsolete. With cut, the file is cut to its
// header too, so that what those records held (an erased run's events) is
// not left in its blocks.
func (l *walFile) restart(cut bool) error {
	l.off = walHeaderLen
	if !cut {
		return nil
	}
	if err := l.f.Truncate(walHeaderLen); err != nil {
		return fmt.Errorf("cut the store's log %s: %w", l.path, err)
	}
	return l.sync()
}

func (l *walFile) sync() error {
	if l.noSync {
		return nil
	}
	return fdatasync(l.f)
}

func (l *walFile) close() error { return l.f.Close() }

// readWAL reads the log at path: the store ID its header names and its
// records, in order, up to the first that is torn, obsolete or out of
// order. A missing file is no ID and no record.
func readWAL(path string) (id []byte, recs []walRecord, err error) {
	data, err := readFileBounded(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read the store's log %s: %w", path, err)
	}
	if len(data) < walHeaderLen || string(data[:len(walMagic)]) != walMagic {
		if len(data) == 0 {
			return nil, nil, nil // created, and the crash came before its header
		}
		return nil, nil, fmt.Errorf("read the store's log %s: %w: it does not start with rein's log header; "+
			"move it away only if the store is meant to be without the commits it may hold", path, store.ErrDataLoss)
	}
	id = bytes.Clone(data[len(walMagic):walHeaderLen])
	for off := walHeaderLen; off+walRecordHdr+walNumberLen <= len(data); {
		size := int(binary.BigEndian.Uint32(data[off : off+4]))
		if size < walNumberLen || off+walRecordHdr+size > len(data) {
			break
		}
		body := data[off+walRecordHdr : off+walRecordHdr+size]
		if crc32.Checksum(body, walCRC) != binary.BigEndian.Uint32(data[off+4:off+8]) {
			break
		}
		n := binary.BigEndian.Uint64(body[:walNumberLen])
		if len(recs) > 0 && n != recs[len(recs)-1].number+1 {
			break
		}
		recs = append(recs, walRecord{number: n, body: body[walNumberLen:]})
		off += walRecordHdr + size
	}
	return id, recs, nil
}

// readFileBounded reads a regular file, up to walMaxRead bytes; anything
// else at the path (a FIFO, a directory) is refused without blocking on it.
func readFileBounded(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: it is not a regular file (%s)", store.ErrDataLoss, info.Mode().Type())
	}
	return io.ReadAll(io.LimitReader(f, walMaxRead))
}

// diskFull marks ENOSPC as store.ErrDiskFull.
func diskFull(err error) error {
	if errors.Is(err, syscall.ENOSPC) && !errors.Is(err, store.ErrDiskFull) {
		return fmt.Errorf("%w: %w", store.ErrDiskFull, err)
	}
	return err
}
