package archive

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/export"
)

// Errors the archive returns, wrapped with the detail.
var (
	// ErrUnreachable: the archive did not take or give an object (down,
	// wrong credentials, full). Nothing was deleted; try again later.
	ErrUnreachable = errors.New("the archive is unreachable")
	// ErrMissing: no object under the key the stub names.
	ErrMissing = errors.New("the archived run's object is missing")
	// ErrMismatch: the object read is not the one archived (its SHA-256
	// differs from the stub's).
	ErrMismatch = errors.New("the archived run's object does not match its checksum")
)

// Archive is a blob store holding finished runs' exports.
type Archive struct {
	bucket *blob.Bucket
	name   string // the URL without its query, for errors and logs
	cache  *cache
	// dir is a file:// archive's directory: fileblob renames an object
	// into place without syncing it, so Put syncs the file and its
	// directories before it reports the object whole.
	dir string
}

// DefaultCacheBytes bounds the exports an Archive keeps in memory.
const DefaultCacheBytes = 64 << 20

// Open opens the archive at a gocloud.dev/blob URL: file:///DIR (created
// if missing) or s3://BUCKET?endpoint=…&region=… (credentials from the
// environment, as the AWS SDK reads them). It does not check the archive
// answers: Check does.
func Open(ctx context.Context, rawURL string) (*Archive, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("--archive %q: %w", rawURL, err)
	}
	name := u.Scheme + "://" + u.Host + u.Path
	var dir string
	switch u.Scheme {
	case "file":
		dir = filepath.FromSlash(u.Path)
		q := u.Query()
		for k, v := range map[string]string{"no_tmp_dir": "true", "dir_file_mode": "0700"} {
			if !q.Has(k) {
				q.Set(k, v)
			}
		}
		if !q.Has("create_dir") {
			q.Set("create_dir", "true")
		}
		// No attribute files beside each object: the export carries its
		// own checksum, and the stub the object's.
		if !q.Has("metadata") {
			q.Set("metadata", "skip")
		}
		u.RawQuery = q.Encode()
	case "s3", "gs", "azblob", "mem":
	default:
		return nil, fmt.Errorf("--archive %q: unknown scheme %q; use file:///DIR or s3://BUCKET?endpoint=…&region=…", rawURL, u.Scheme)
	}
	b, err := blob.OpenBucket(ctx, u.String())
	if err != nil {
		return nil, fmt.Errorf("open the archive %s: %w", name, err)
	}
	return &Archive{bucket: b, name: name, cache: newCache(DefaultCacheBytes), dir: dir}, nil
}

// Name is the archive's URL without its query (no credentials).
func (a *Archive) Name() string { return a.name }

// Close closes the archive.
func (a *Archive) Close() error { return a.bucket.Close() }

// Check writes, reads and deletes a small object, to learn at start that the
// archive answers and takes writes.
func (a *Archive) Check(ctx context.Context) error {
	key := ".rein-check"
	if err := a.bucket.WriteAll(ctx, key, []byte("rein"), nil); err != nil {
		return a.unreachable("write "+key, err)
	}
	if _, err := a.bucket.ReadAll(ctx, key); err != nil {
		return a.unreachable("read "+key, err)
	}
	if err := a.bucket.Delete(ctx, key); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
		return a.unreachable("delete "+key, err)
	}
	return nil
}

// Key is where a run's export is kept: its tenant (path-escaped; "_" when
// empty), the day it ended in UTC, and its ID.
func Key(tenant string, ended time.Time, runID string) string {
	t := url.PathEscape(tenant)
	if t == "" {
		t = "_"
	}
	return fmt.Sprintf("%s/%s/%s.rein", t, ended.UTC().Format("2006/01/02"), url.PathEscape(runID))
}

// Put writes a run's export under key, reads it back and checks its
// SHA-256: the record it returns names an object known to be whole.
func (a *Archive) Put(ctx context.Context, key string, data []byte, now time.Time) (*reinv1.RunArchive, error) {
	sum := sha256.Sum256(data)
	if err := a.bucket.WriteAll(ctx, key, data, &blob.WriterOptions{ContentType: "application/octet-stream"}); err != nil {
		return nil, a.unreachable("write "+key, err)
	}
	// Read back through the hash, not into memory: the object may be
	// large, and only its hash is compared.
	r, err := a.bucket.NewReader(ctx, key, nil)
	if err != nil {
		return nil, a.unreachable("read back "+key, err)
	}
	h := sha256.New()
	n, err := io.Copy(h, r)
	_ = r.Close()
	if err != nil {
		return nil, a.unreachable("read back "+key, err)
	}
	if err := a.sync(key); err != nil {
		return nil, a.unreachable("sync "+key, err)
	}
	if got := h.Sum(nil); !bytes.Equal(got, sum[:]) {
		return nil, fmt.Errorf("archive %s: %s read back as %d bytes with SHA-256 %x, not the %d bytes written: %w",
			a.name, key, n, got, len(data), ErrMismatch)
	}
	return &reinv1.RunArchive{
		Key: key, Sha256: hex.EncodeToString(sum[:]), SizeBytes: uint64(len(data)), ArchivedAt: timestamppb.New(now),
	}, nil
}

// sync makes a file:// archive's object durable: the file, then each
// directory from its own up to the archive's.
func (a *Archive) sync(key string) error {
	if a.dir == "" {
		return nil
	}
	path := filepath.Join(a.dir, filepath.FromSlash(key))
	for p := path; ; p = filepath.Dir(p) {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		err = f.Sync()
		_ = f.Close()
		if err != nil {
			return err
		}
		if p == filepath.Clean(a.dir) || p == filepath.Dir(p) {
			return nil
		}
	}
}

// Get reads the export a record names, checked against its SHA-256 and
// against the export format (export.Read), through a bounded cache.
func (a *Archive) Get(ctx context.Context, rec *reinv1.RunArchive) (*reinv1.RunExport, error) {
	if x := a.cache.get(rec.GetKey(), rec.GetSha256()); x != nil {
		return x, nil
	}
	data, err := a.bucket.ReadAll(ctx, rec.GetKey())
	if gcerrors.Code(err) == gcerrors.NotFound {
		return nil, fmt.Errorf("archive %s: %s: %w", a.name, rec.GetKey(), ErrMissing)
	}
	if err != nil {
		return nil, a.unreachable("read "+rec.GetKey(), err)
	}
	sum := sha256.Sum256(data)
	if hex.EncodeToString(sum[:]) != rec.GetSha256() {
		return nil, fmt.Errorf("archive %s: %s has SHA-256 %x, the stub says %s: %w", a.name, rec.GetKey(), sum, rec.GetSha256(), ErrMismatch)
	}
	x, err := export.Read(bytes.NewReader(data), a.name+"/"+rec.GetKey())
	if err != nil {
		return nil, err
	}
	a.cache.put(rec.GetKey(), rec.GetSha256(), x, len(data))
	return x, nil
}

// Delete removes the object under key and forgets it; a missing object is
// no error (a deletion retried).
func (a *Archive) Delete(ctx context.Context, key string) error {
	a.cache.drop(key)
	if err := a.bucket.Delete(ctx, key); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
		return a.unreachable("delete "+key, err)
	}
	return nil
}

// Exists reports whether an object is stored under key.
func (a *Archive) Exists(ctx context.Context, key string) (bool, error) {
	ok, err := a.bucket.Exists(ctx, key)
	if err != nil {
		return false, a.unreachable("look up "+key, err)
	}
	return ok, nil
}

// unreachable wraps a blob store's error as ErrUnreachable, naming the
// archive and saying what to check.
func (a *Archive) unreachable(what string, err error) error {
	hint := "check that it is up and has room"
	msg := err.Error()
	switch {
	case gcerrors.Code(err) == gcerrors.PermissionDenied, credentialsRefused(msg):
		hint = "check its credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY for s3://)"
	case gcerrors.Code(err) == gcerrors.NotFound, strings.Contains(msg, "NoSuchBucket"):
		hint = "check that its bucket exists"
	}
	if i := strings.Index(msg, "\n"); i >= 0 {
		msg = msg[:i]
	}
	return fmt.Errorf("archive %s: %s: %s: %w; %s", a.name, what, msg, ErrUnreachable, hint)
}

// credentialsRefused reports whether an S3 error says the credentials were
// refused (S3 answers a wrong secret with SignatureDoesNotMatch, which the
// blob library does not map to PermissionDenied).
func credentialsRefused(msg string) bool {
	for _, code := range []string{"SignatureDoesNotMatch", "InvalidAccessKeyId", "AccessDenied", "XAdminUserNotFound", "Forbidden"} {
		if strings.Contains(msg, code) {
			return true
		}
	}
	return false
}
