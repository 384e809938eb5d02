package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store/bolt"
)

func newBackupCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use: "backup OUT",
		Example: `  rein backup --server localhost:7233 /backups/rein-$(date +%F).db
  rein backup --db /var/lib/rein/rein.db /backups/rein.db`,
		Short: "Write one consistent copy of the store to OUT, with its SHA-256 beside it, while the server serves",
		Long: `Write one consistent copy of the store to the file OUT while rein serves:
the store's write-ahead log is first moved into its file (a checkpoint), then
the file is copied as one read transaction sees it, while runs go on
committing. The copy holds every commit acknowledged before the backup began
and needs no log beside it: rein restore puts it back, and rein serve --db
OUT opens it as it is.

With --server, the server writes the copy (it needs the admin role; a server
on etcd refuses: use etcdctl snapshot save). Without, the --db file is backed
up, which no process may hold (a rein serve on it is refused, exit 5: back it
up through that server with --server).

The copy is written to OUT.tmp, fsynced, renamed to OUT, and the directory
fsynced; its SHA-256 goes to OUT.sha256 (in sha256sum's format) and is
printed. A backup that fails leaves no OUT.tmp and does not touch an OUT
from before. Exit 0 when OUT was written, 1 when it could not be (its
directory missing, say), 3 when there is no --db file, 4 when the caller is
not an admin, 5 when the store is held or the server unavailable.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			out := args[0]
			var fill func(context.Context, io.Writer) (int64, error)
			if e.server != "" {
				cn, err := connect(cmd.Context(), &e.target, e.stderr, nil)
				if err != nil {
					return err
				}
				defer cn.close()
				fill = func(ctx context.Context, w io.Writer) (int64, error) { return backupFrom(ctx, cn.Storage, w) }
			} else {
				fill = func(ctx context.Context, w io.Writer) (int64, error) { return bolt.BackupFile(ctx, e.db, w) }
			}
			n, sum, err := writeBackup(cmd.Context(), out, fill)
			switch {
			case errors.Is(err, os.ErrNotExist) && e.server == "" && !errors.Is(err, errOut):
				return &exitErr{code: exitNotFound, err: fmt.Errorf("no rein store at %s: pass --db, or --server to back up a server's", e.db)}
			case errors.Is(err, bolt.ErrInUse):
				return &exitErr{code: exitUnavailable, err: err}
			case err != nil:
				if _, ok := status.FromError(err); ok {
					return err
				}
				return &exitErr{code: exitError, err: err}
			}
			if e.json {
				return writeJSON(e.stdout, backupReport{Out: out, Bytes: n, SHA256: sum}, false)
			}
			fmt.Fprintf(e.stdout, "backed up %s (%d bytes) to %s\nsha256 %s (in %s)\n", humanBytes(n), n, out, sum, out+".sha256")
			return nil
		},
	}
	e.commandTimeoutFlag(cmd)
	return cmd
}

// backupReport is rein backup's JSON. Fields are added, never renamed or
// removed.
type backupReport struct {
	Out    string `json:"out"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// errOut marks a failure to write OUT (as opposed to reading the store).
var errOut = errors.New("the backup could not be written")

// writeBackup writes what fill writes to out atomically: to out.tmp,
// fsynced, renamed, the directory fsynced; then its SHA-256 to out.sha256
// the same way. It returns the size and the checksum in hex. On failure it
// leaves no out.tmp and out as it was.
func writeBackup(ctx context.Context, out string, fill func(context.Context, io.Writer) (int64, error)) (int64, string, error) {
	sum := sha256.New()
	var n int64
	err := writeSynced(out, func(w io.Writer) error {
		var err error
		n, err = fill(ctx, io.MultiWriter(w, sum))
		return err
	})
	if err != nil {
		return 0, "", err
	}
	hexSum := hex.EncodeToString(sum.Sum(nil))
	line := hexSum + "  " + filepath.Base(out) + "\n"
	if err := writeSynced(out+".sha256", func(w io.Writer) error { _, err := io.WriteString(w, line); return err }); err != nil {
		return 0, "", err
	}
	return n, hexSum, nil
}

// writeSynced writes path through path.tmp: written by fill, fsynced,
// renamed over path, and the directory fsynced.
func writeSynced(path string, fill func(io.Writer) error) (err error) {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: write %s: its directory %s does not exist; create it first: %w", errOut, tmp, filepath.Dir(path), err)
		}
		return fmt.Errorf("%w: write %s: %w", errOut, tmp, err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	bw := bufio.NewWriterSize(f, 1<<20)
	if err := fill(bw); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("%w: write %s: %w", errOut, tmp, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("%w: sync %s: %w", errOut, tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("%w: close %s: %w", errOut, tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("%w: rename %s to %s: %w", errOut, tmp, path, err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		err = d.Sync()
		_ = d.Close()
		if err != nil {
			return fmt.Errorf("%w: sync the directory of %s: %w", errOut, path, err)
		}
	}
	return nil
}

// backupFrom writes the server's backup stream to w and returns its size,
// checked against the size the stream ends with.
func backupFrom(ctx context.Context, storage reinv1.StorageServiceClient, w io.Writer) (int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := storage.Backup(ctx, &reinv1.BackupRequest{})
	if err != nil {
		return 0, err
	}
	var n int64
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return n, status.Error(codes.DataLoss, "the server's backup stream ended before its last message: the backup is incomplete; run rein backup again")
		}
		if err != nil {
			return n, err
		}
		if len(resp.GetChunk()) == 0 {
			if resp.GetSize() != n {
				return n, status.Errorf(codes.DataLoss, "the server's backup stream carried %d bytes but says the file has %d: the backup is incomplete; run rein backup again", n, resp.GetSize())
			}
			return n, nil
		}
		k, err := w.Write(resp.GetChunk())
		n += int64(k)
		if err != nil {
			return n, fmt.Errorf("%w: %w", errOut, err)
		}
	}
}

func newRestoreCmd(e *env) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use: "restore BACKUP",
		Example: `  rein restore /backups/rein.db --db /var/lib/rein/rein.db
  rein restore /backups/rein.db --db /var/lib/rein/rein.db --force`,
		Short: "Put a backup back as the --db store: checksum and consistency verified, written atomically",
		Long: `Make the --db file the store a backup (rein backup) holds, with no server
running on it:

  1. the backup's SHA-256 must match BACKUP.sha256, written beside it;
  2. it is copied beside --db (FILE.restore-*) and fsynced, and the copy is
     checked whole as rein check does, bbolt's consistency check among it;
  3. it is renamed over --db and the directory fsynced.

A --db file that exists, or a log beside it (FILE-wal), is refused unless
--force; with --force it is replaced, and its log moved aside to
FILE-wal.replaced-TIME so that the restored file does not take the old
store's records for its own. Whatever fails leaves --db as it was.

Exit 0 when restored, 1 when the backup does not match its checksum or
fails its check, or --db exists without --force, 3 when there is no backup
(or no checksum beside it), 5 when another process holds --db.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if e.server != "" {
				return usageError("rein restore writes a --db file itself, not a --server's: run it where the file is, with the server stopped")
			}
			backup := args[0]
			if err := verifyChecksum(backup); err != nil {
				return err
			}
			if err := os.MkdirAll(filepath.Dir(e.db), 0o700); err != nil {
				return &exitErr{code: exitError, err: fmt.Errorf("create the directory for --db %s: %w", e.db, err)}
			}
			err := bolt.Restore(backup, e.db, bolt.RestoreOptions{Force: force})
			switch {
			case errors.Is(err, os.ErrNotExist):
				return &exitErr{code: exitNotFound, err: err}
			case errors.Is(err, bolt.ErrInUse):
				return &exitErr{code: exitUnavailable, err: err}
			case err != nil:
				return &exitErr{code: exitError, err: err}
			}
			fmt.Fprintf(e.stdout, "restored %s to %s\n", backup, e.db)
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "replace the --db store if there is one (it is lost)")
	return cmd
}

// verifyChecksum checks the backup against the SHA-256 in BACKUP.sha256.
func verifyChecksum(backup string) error {
	sumPath := backup + ".sha256"
	text, err := os.ReadFile(sumPath)
	if errors.Is(err, os.ErrNotExist) {
		if _, berr := os.Stat(backup); berr != nil {
			return &exitErr{code: exitNotFound, err: fmt.Errorf("no backup at %s", backup)}
		}
		return &exitErr{code: exitNotFound, err: fmt.Errorf("no checksum beside the backup: %s is missing; put the .sha256 file rein backup wrote with it back beside it", sumPath)}
	}
	if err != nil {
		return &exitErr{code: exitError, err: fmt.Errorf("read the backup's checksum: %w", err)}
	}
	fields := strings.Fields(string(text))
	if len(fields) == 0 || len(fields[0]) != 2*sha256.Size {
		return &exitErr{code: exitError, err: fmt.Errorf("%s does not hold a SHA-256 (want the hex digest, then the file's name, as sha256sum writes)", sumPath)}
	}
	f, err := os.Open(backup)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return &exitErr{code: exitNotFound, err: fmt.Errorf("no backup at %s", backup)}
		}
		return &exitErr{code: exitError, err: err}
	}
	defer f.Close()
	var h hash.Hash = sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return &exitErr{code: exitError, err: fmt.Errorf("read the backup %s: %w", backup, err)}
	}
	if got := hex.EncodeToString(h.Sum(nil)); !strings.EqualFold(got, fields[0]) {
		return &exitErr{code: exitError, err: fmt.Errorf("the backup %s does not match its checksum (its SHA-256 is %s, %s says %s): it was damaged or changed since it was written; it was not restored, restore another backup",
			backup, got, sumPath, fields[0])}
	}
	return nil
}
