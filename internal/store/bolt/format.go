package bolt

import (
	"context"
	"fmt"
	"strconv"

	bbolt "go.etcd.io/bbolt"

	"github.com/reinhq/rein/internal/storeformat"
)

// The store format (internal/storeformat) a file was last written with:
// meta/store_format, in decimal. A file without it was written by a build
// from before store formats, in storeformat.Base. (meta/format is the
// file's own layout, rein-store-N, which Open and check read apart.)
//
// Open refuses a file whose format the build cannot read or write, the
// error wrapping storeformat.ErrIncompatible, before it writes a byte; a
// read-only open refuses it too. A writable open of a file in an older
// format than the newest its build writes records the newer one, in the
// transaction that initialises the file: a bbolt file has one server, so
// its format is final as soon as that server writes it (docs/upgrading.md,
// "Rolling upgrade on bbolt"). Opening a file in the format the build
// writes writes nothing.
var keyStoreFormat = []byte("store_format")

// buildOf is the build opts give, or this binary's.
func buildOf(opts Options) storeformat.Build {
	if opts.Formats == (storeformat.Build{}) {
		return storeformat.This()
	}
	return opts.Formats
}

// fileFormat is the store format the file records: Base when it records
// none (or is new). A value that is not a number is refused.
func fileFormat(tx *rtx, path string) (storeformat.Format, error) {
	meta := tx.Bucket(bucketMeta)
	if meta == nil {
		return storeformat.Base, nil
	}
	v := meta.Get(keyStoreFormat)
	if v == nil {
		return storeformat.Base, nil
	}
	n, err := strconv.Atoi(string(v))
	if err != nil || n < int(storeformat.Oldest) {
		return 0, fmt.Errorf("open store %s: its meta/store_format holds %q, not a store format number; it was left unchanged: restore the file from a backup", path, v)
	}
	return storeformat.Format(n), nil
}

// checkStoreFormat refuses a file the build cannot serve, and reports
// whether a writable open must record the build's newest format.
func checkStoreFormat(tx *bbolt.Tx, path string, b storeformat.Build) (mark bool, err error) {
	if tx.Bucket(bucketMeta) == nil {
		return true, nil // a new file: in the build's newest format from its first commit
	}
	f, err := fileFormat(readTx(tx), path)
	if err != nil {
		return false, err
	}
	if err := b.Serves(f, "the file "+path); err != nil {
		return false, fmt.Errorf("open store %s: %w; the file was left unchanged", path, err)
	}
	return f < b.Writes.Max, nil
}

// layoutFormat is the first store format whose files are marked
// formatV4: the builds from before store formats check only meta/format,
// so that mark is what makes them refuse a file they cannot read (its
// log's records, webhooks, tool digests).
const layoutFormat storeformat.Format = 7

// markStoreFormat records the build's newest format in the file, and from
// layoutFormat on marks its layout formatV4.
func markStoreFormat(tx *bbolt.Tx, b storeformat.Build) error {
	meta, err := tx.CreateBucketIfNotExists(bucketMeta)
	if err != nil {
		return err
	}
	if b.Writes.Max >= layoutFormat {
		if err := meta.Put(keyFormat, formatV4); err != nil {
			return err
		}
	}
	return meta.Put(keyStoreFormat, []byte(strconv.Itoa(int(b.Writes.Max))))
}

// StoreFormat is the store format the file records (rein check, rein
// cluster status).
func (s *Store) StoreFormat() (storeformat.Format, error) {
	var f storeformat.Format
	err := s.view(context.Background(), "read the store format", func(tx *rtx) (err error) {
		f, err = fileFormat(tx, s.path)
		return err
	})
	return f, err
}

// ReadStoreFormat is the store format the file at path records, read
// read-only whatever it is (rein check).
func ReadStoreFormat(path string, opts Options) (storeformat.Format, error) {
	if opts.LockTimeout == 0 {
		opts.LockTimeout = defaultLockTimeout
	}
	db, err := openForCheck(path, opts, false)
	if err != nil {
		return 0, openError(path, err)
	}
	defer db.Close()
	var f storeformat.Format
	err = guard("read the store format of "+path, func() error {
		return db.View(func(tx *bbolt.Tx) (err error) {
			f, err = fileFormat(readTx(tx), path)
			return err
		})
	})
	return f, err
}
