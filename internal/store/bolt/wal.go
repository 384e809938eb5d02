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
//	header  8 bytes "rein-wa2", 8 bytes the store's ID (meta/store-id)
//	record  4 bytes length of the body, 4 bytes CRC-32C of the body,
//	        body: 8 bytes the record's number, then what the commit wrote
//	        (writes.go)
//
// A log whose header starts "rein-wal" holds requests instead, as a rein
// before this one wrote them (walbatch.go): Open applies it once, with the
// code of that format, and makes the log anew.
//
// Records are numbered from 1 without a gap across checkpoints. Each
// checkpoint writes from just after the header again, over the records it
// made obsolete, so the file keeps its blocks and a sync writes no size. A
// reader takes the records after the header while each is whole (its
// checksum holds) and numbered one more than the last: the first torn or
// obsolete record ends the log. A record is written only once the one
// before it is synced, so a crash tears the last one at most: a bad record
// followed by a whole one numbered higher is damage (store.ErrDataLoss),
// never taken for the log's end. A file of at most a header's length
// without a whole header is no log (a crash as it was made). The log's
// format and what each failure does are in docs/storage.md.
const (
	walMagic = "rein-wa2"
	// walMagicRequests heads a log of requests (walbatch.go).
	walMagicRequests = "rein-wal"
	walHeaderLen     = 16
	walRecordHdr     = 8
	walNumberLen     = 8
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
	f      logDisk
	path   string
	noSync bool
	off    int64 // where the next record goes
	buf    []byte
}

// logDisk is what the log needs of its file: an *os.File (osLog), or, in
// tests, one that fails on cue.
type logDisk interface {
	WriteAt(b []byte, off int64) (int, error)
	Truncate(size int64) error
	Datasync() error
	Close() error
}

// osLog is the log's file on disk.
type osLog struct{ *os.File }

func (f osLog) Datasync() error { return fdatasync(f.File) }

// walRecord is one record as read back.
type walRecord struct {
	number uint64
	body   []byte // what the commit wrote (writes.go)
	// requests marks a record of a log of requests (walbatch.go).
	requests bool
}

// errFatal marks a failure after which the writer must stop (halt): a sync
// that failed, whose data may or may not be on disk, or a bbolt commit that
// failed, after which bbolt promises nothing of the transaction.
type errFatal struct{ err error }

func (e errFatal) Error() string { return e.err.Error() }
func (e errFatal) Unwrap() error { return e.err }

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
	l := &walFile{f: osLog{f}, path: path, noSync: noSync, off: walHeaderLen}
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
// numbered n, and syncs it. A write that fails (a full disk) is cut back,
// and that cut synced, so that no part of the record can be read back: the
// error is the write's, and the log is as it was. A sync that fails, the
// record's or the cut's, is an errFatal: whether the record is on disk is
// unknown, and the writer stops.
func (l *walFile) append(n uint64, b []byte) error {
	size := len(b)
	binary.BigEndian.PutUint32(b[0:4], uint32(size-walRecordHdr))
	binary.BigEndian.PutUint64(b[8:16], n)
	binary.BigEndian.PutUint32(b[4:8], crc32.Checksum(b[8:], walCRC))
	l.buf = b[:0] // its capacity, for the next record
	if _, err := l.f.WriteAt(b, l.off); err != nil {
		if terr := l.f.Truncate(l.off); terr != nil {
			return errFatal{fmt.Errorf("append record %d to the store's log %s: %w; cutting the failed record off failed too (%v)", n, l.path, diskFull(err), terr)}
		}
		if serr := l.sync(); serr != nil {
			return errFatal{fmt.Errorf("append record %d to the store's log %s: %w; syncing the cut of the failed record failed too (%v)", n, l.path, diskFull(err), serr)}
		}
		return fmt.Errorf("append record %d to the store's log %s: %w", n, l.path, diskFull(err))
	}
	if err := l.sync(); err != nil {
		return errFatal{fmt.Errorf("sync record %d of the store's log %s: %w", n, l.path, err)}
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
// not left in its blocks; a cut or its sync that fails is an errFatal.
func (l *walFile) restart(cut bool) error {
	l.off = walHeaderLen
	if !cut {
		return nil
	}
	if err := l.f.Truncate(walHeaderLen); err != nil {
		return errFatal{fmt.Errorf("cut the store's log %s: %w", l.path, err)}
	}
	if err := l.sync(); err != nil {
		return errFatal{fmt.Errorf("sync the cut of the store's log %s: %w", l.path, err)}
	}
	return nil
}

func (l *walFile) sync() error {
	if l.noSync {
		return nil
	}
	return l.f.Datasync()
}

func (l *walFile) close() error { return l.f.Close() }

// walLog is a log as read back: the store ID its header names (nil for no
// log) and its whole records in order, up to the first that is torn,
// obsolete or out of order.
type walLog struct {
	id   []byte
	recs []walRecord
	// torn is set when the file was there but held no whole header (at
	// most a header's length, torn or zeros: a crash while it was made),
	// which is no log: it cannot hold a record.
	torn bool
	// damage, when set, is the damage that ended the records early: after
	// the bad record, a whole one numbered higher follows, so the bad one
	// was not a torn last write (a record is written only once the one
	// before it is synced). It wraps store.ErrDataLoss.
	damage *walDamage
}

// walDamage is a damaged (or missing) record of the log: the one numbered
// number, the one after the last whole record, at offset, with the whole
// record numbered next found at or after it.
type walDamage struct {
	path   string
	number uint64
	offset int
	next   uint64
}

func (d *walDamage) Error() string {
	return fmt.Sprintf("%v: record %d of the store's log %s (at byte %d) is damaged, and a whole record numbered %d follows it: "+
		"it is not a write a crash cut short, and the records from %d on cannot be applied", store.ErrDataLoss, d.number, d.path, d.offset, d.next, d.number)
}

func (d *walDamage) Unwrap() error { return store.ErrDataLoss }

// readWAL reads the log at path: see walLog. A record numbered floor or
// less is obsolete (the file holds it: floor is the last record the file
// says it holds), so only a whole record numbered above floor and above
// the last whole one, after a bad one, is damage. A missing file is no log.
func readWAL(path string, floor uint64) (walLog, error) {
	data, err := readFileBounded(path)
	if errors.Is(err, os.ErrNotExist) {
		return walLog{}, nil
	}
	if err != nil {
		return walLog{}, fmt.Errorf("read the store's log %s: %w", path, err)
	}
	magic := ""
	if len(data) >= walHeaderLen {
		magic = string(data[:len(walMagic)])
	}
	if magic != walMagic && magic != walMagicRequests {
		if len(data) <= walHeaderLen {
			// Created (or cut), and the crash came before its header
			// was synced: nothing was ever logged in it.
			return walLog{torn: true}, nil
		}
		return walLog{}, fmt.Errorf("read the store's log %s: %w: it does not start with rein's log header; "+
			"move it away only if the store is meant to be without the commits it may hold", path, store.ErrDataLoss)
	}
	l := walLog{id: bytes.Clone(data[len(walMagic):walHeaderLen])}
	off := walHeaderLen
	for ; off+walRecordHdr+walNumberLen <= len(data); off += walRecordHdr + int(binary.BigEndian.Uint32(data[off:off+4])) {
		n, ok := recordAt(data, off)
		if !ok || (len(l.recs) > 0 && n != l.recs[len(l.recs)-1].number+1) {
			break
		}
		size := int(binary.BigEndian.Uint32(data[off : off+4]))
		l.recs = append(l.recs, walRecord{number: n, body: data[off+walRecordHdr+walNumberLen : off+walRecordHdr+size], requests: magic == walMagicRequests})
	}
	last := floor
	if len(l.recs) > 0 {
		last = max(last, l.recs[len(l.recs)-1].number)
	}
	if next := wholeAfter(data, off, last); next != 0 {
		l.damage = &walDamage{path: path, number: last + 1, offset: off, next: next}
	}
	return l, nil
}

// recordAt is the number of the record at off in data, if one is whole
// there (its length fits, its checksum holds).
func recordAt(data []byte, off int) (uint64, bool) {
	if off+walRecordHdr+walNumberLen > len(data) {
		return 0, false
	}
	size := int(binary.BigEndian.Uint32(data[off : off+4]))
	if size < walNumberLen || size > len(data)-off-walRecordHdr {
		return 0, false
	}
	body := data[off+walRecordHdr : off+walRecordHdr+size]
	if crc32.Checksum(body, walCRC) != binary.BigEndian.Uint32(data[off+4:off+8]) {
		return 0, false
	}
	return binary.BigEndian.Uint64(body[:walNumberLen]), true
}

// wholeAfter looks at every offset of data from off on for a whole record
// numbered above last, and returns its number, or 0 when there is none.
// A record's number is checked before its checksum: only a number in the
// range the rest of the log could hold (one more per record of at least
// walRecordHdr+walNumberLen+1 bytes) is checksummed, so the obsolete
// records past the end of a log (numbered at most last) and bytes that are
// no record cost one comparison each.
func wholeAfter(data []byte, off int, last uint64) uint64 {
	minRecord := walRecordHdr + walNumberLen + 1
	for ; off+walRecordHdr+walNumberLen <= len(data); off++ {
		n := binary.BigEndian.Uint64(data[off+walRecordHdr : off+walRecordHdr+walNumberLen])
		if n <= last || n-last > uint64(len(data)/minRecord)+1 {
			continue
		}
		if got, ok := recordAt(data, off); ok && got == n {
			return n
		}
	}
	return 0
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
