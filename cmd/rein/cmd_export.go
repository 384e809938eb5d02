package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/export"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/store/bolt"
)

// importPage is how many events one Append of `rein import` carries.
const importPage = 1000

type exportOptions struct {
	out string
}

func newExportCmd(e *env) *cobra.Command {
	var o exportOptions
	cmd := &cobra.Command{
		Use:   "export RUN_ID",
		Short: "Write a run's events to an export file (stdout, or -o FILE)",
		Long: `Write every event of a run to one file that rein inspect FILE, rein events FILE
and rein import FILE read: the line "rein-export 1", the run as protobuf, its SHA-256.
Without -o the file goes to stdout; with -o it is written atomically, mode 0600.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			cn, err := reader(ctx, e)
			if err != nil {
				return err
			}
			defer cn.close()
			evs, err := allEvents(ctx, cn.runs, args[0], 0)
			if err != nil {
				return err
			}
			blobs := cn.blobs
			if blobs == nil {
				blobs = &serverBlobs{runs: cn.runs, runID: args[0], refs: export.BlobRefs(evs)}
			}
			x, err := export.New(ctx, args[0], evs, blobs)
			if err != nil {
				return err
			}
			x.ExportedAt = timestamppb.New(time.Now())
			x.ExportedBy = "rein " + buildVersion()
			if o.out == "" {
				w := bufio.NewWriter(e.stdout)
				if err := export.Write(w, x); err != nil {
					return err
				}
				return w.Flush()
			}
			if err := writeAtomic(o.out, x); err != nil {
				return err
			}
			fmt.Fprintf(e.stderr, "rein: exported run %s (%d events) to %s\n", args[0], len(evs), o.out)
			return nil
		},
	}
	cmd.Flags().StringVarP(&o.out, "output", "o", "", "write the file here instead of stdout (replaced atomically, mode 0600)")
	return cmd
}

// writeAtomic writes x to path through a temporary file in the same
// directory, synced, then renamed over path: a reader sees the old file or
// the whole new one, never part of it.
func writeAtomic(path string, x *reinv1.RunExport) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return &exitErr{code: exitError, err: fmt.Errorf("write %s: %w", path, err)}
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
			err = &exitErr{code: exitError, err: fmt.Errorf("write %s: %w", path, err)}
		}
	}()
	if err := f.Chmod(0o600); err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	if err := export.Write(w, x); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// buildVersion is the rein module's version, "(devel)" in a build from a
// working tree.
func buildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

func newImportCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "import FILE",
		Short: "Load a run from an export file into the --db store",
		Long: `Load the run an export file holds (written by rein export) into the embedded
server's store, --db, and print its summary. The file is checked whole before the store
is opened. A run that is already in the store is refused, and nothing changes.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if e.server != "" {
				return usageError("import works on a --db file, not on a --server: run it where the server's database is, with the server stopped")
			}
			x, err := readExportFile(args[0])
			if err != nil {
				return err
			}
			st, err := importRun(cmd.Context(), e.db, x)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stderr, "rein: imported run %s (%d events) into %s\n", x.GetRunId(), len(x.GetEvents()), e.db)
			return writeJSON(e.stdout, summarize(st.Proto(true)), !e.json)
		},
	}
}

// importRun stores the run of x in the bbolt store at db: Create with its
// run_started event, then Append the rest a page at a time, each page with
// the blobs its events are the first to reference. A run already in the
// store is refused before anything is written.
func importRun(ctx context.Context, db string, x *reinv1.RunExport) (runstate.State, error) {
	if err := os.MkdirAll(filepath.Dir(db), 0o700); err != nil {
		return runstate.State{}, &exitErr{code: exitError, err: fmt.Errorf("create the directory for --db %s: %w", db, err)}
	}
	s, err := bolt.Open(db, bolt.Options{})
	if err != nil {
		return runstate.State{}, &exitErr{code: exitUnavailable, err: err}
	}
	defer s.Close()
	runID := x.GetRunId()
	exists := func() error {
		return &exitErr{code: exitError, err: fmt.Errorf("run %s is already in %s; nothing was imported (inspect it with rein inspect %s, or import into another --db)", runID, db, runID)}
	}
	if _, err := s.Load(ctx, runID); err == nil {
		return runstate.State{}, exists()
	} else if !errors.Is(err, store.ErrNotFound) {
		return runstate.State{}, err
	}
	evs := x.GetEvents()
	st, created, err := s.Create(ctx, evs[0])
	switch {
	case errors.Is(err, store.ErrConflict):
		return runstate.State{}, exists()
	case err != nil:
		return runstate.State{}, err
	case !created:
		return runstate.State{}, &exitErr{code: exitError, err: fmt.Errorf("run %s has request ID %q, which run %s in %s already has; nothing was imported",
			runID, st.RequestID, st.RunID, db)}
	}
	sent := map[string]bool{}
	for rest := evs[1:]; len(rest) > 0; {
		page := rest[:min(len(rest), importPage)]
		blobs := map[string][]byte{}
		for _, hash := range export.BlobRefs(page) {
			if !sent[hash] {
				sent[hash] = true
				blobs[hash] = x.GetBlobs()[hash] // Read checked that x carries it
			}
		}
		if err := s.Append(ctx, runID, page[0].GetSequence()-1, page, store.WithBlobs(blobs)); err != nil {
			return runstate.State{}, fmt.Errorf("import run %s: append events %d to %d: %w; the store holds the run up to event %d",
				runID, page[0].GetSequence(), page[len(page)-1].GetSequence(), err, page[0].GetSequence()-1)
		}
		rest = rest[len(page):]
	}
	return s.Load(ctx, runID)
}

// isExportFile says whether a read command's argument names a file rather
// than a run: an existing regular file.
func isExportFile(arg string) bool {
	info, err := os.Stat(arg)
	return err == nil && info.Mode().IsRegular()
}

// readExportFile reads and checks an export file; a file that cannot be read
// or is not a whole export is a usage error (exit 2) that names it.
func readExportFile(path string) (*reinv1.RunExport, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, usageError("read export file: %v", err)
	}
	defer f.Close()
	x, err := export.Read(f, path)
	if err != nil {
		return nil, usageError("%v", err)
	}
	return x, nil
}

// fileEvents is the events of an export file with sequence > after.
func fileEvents(path string, after uint64) ([]*reinv1.Event, error) {
	x, err := readExportFile(path)
	if err != nil {
		return nil, err
	}
	evs := x.GetEvents()
	for len(evs) > 0 && evs[0].GetSequence() <= after {
		evs = evs[1:]
	}
	return evs, nil
}

// serverBlobs reads a run's blobs from a rein server through GetBlobs, as
// many a call as the server sends, asking for the ones it left out.
type serverBlobs struct {
	runs  reinv1.RunServiceClient
	runID string
	// refs are every blob the run references, fetched on the first Blob.
	refs []string
	got  map[string][]byte
}

func (b *serverBlobs) Blob(ctx context.Context, hash string) ([]byte, error) {
	if b.got == nil {
		b.got = map[string][]byte{}
		for left := b.refs; len(left) > 0; {
			resp, err := b.runs.GetBlobs(ctx, &reinv1.GetBlobsRequest{RunId: b.runID, Hashes: left[:min(len(left), 1000)]})
			if err != nil {
				return nil, err
			}
			if len(resp.GetBlobs()) == 0 {
				return nil, fmt.Errorf("the server sent none of run %s's %d remaining blobs", b.runID, len(left))
			}
			maps.Copy(b.got, resp.GetBlobs())
			var rest []string
			for _, h := range left {
				if _, ok := b.got[h]; !ok {
					rest = append(rest, h)
				}
			}
			left = rest
		}
	}
	blob, ok := b.got[hash]
	if !ok {
		return nil, fmt.Errorf("%w: %s", store.ErrNoBlob, hash)
	}
	return blob, nil
}
