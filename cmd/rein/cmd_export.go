package main

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/export"
)

type exportOptions struct {
	out  string
	tree bool
}

func newExportCmd(e *env) *cobra.Command {
	var o exportOptions
	cmd := &cobra.Command{
		Use: "export RUN_ID",
		Example: `  rein export run_01M8… -o run.rein
  rein export run_01M8… --server rein.internal:7233 > run.rein`,
		Short: "Write a run's events to an export file (stdout, or -o FILE)",
		Long: `Write every event of a run to one file that rein inspect FILE, rein events FILE
and rein import FILE read: the line "rein-export 1", the run as protobuf, its SHA-256.
Without -o the file goes to stdout; with -o it is written atomically, mode 0600.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			x, err := storedExport(cmd.Context(), e, args[0])
			if o.tree && err == nil {
				x, _, err = treeExport(cmd.Context(), e, args[0])
			}
			if err != nil {
				return err
			}
			evs := x.GetEvents()
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
	cmd.Flags().BoolVar(&o.tree, "tree", false, "with the runs it delegated to (and theirs), in the one file")
	return cmd
}

// storedExport is the export of a stored run (on --db or the --server):
// every event, and every blob they reference, read through GetBlobs.
func storedExport(ctx context.Context, e *env, runID string) (*reinv1.RunExport, error) {
	cn, err := reader(ctx, &e.target, e.stderr)
	if err != nil {
		return nil, err
	}
	defer cn.close()
	evs, err := allEvents(ctx, cn.runs, runID, 0)
	if err != nil {
		return nil, err
	}
	blobs := serverBlobs{runs: cn.runs}
	return export.New(ctx, runID, evs, blobs)
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
		Use: "import FILE",
		Example: `  rein import run.rein --db other.db
  rein import run.rein --server rein.internal:7233`,
		Short: "Load a run from an export file into the --db store, or a --server",
		Long: `Load the run an export file holds (written by rein export) into the embedded
server's store, --db, or into a --server (ImportRun, which needs the admin role), and
print its summary. The file is checked whole before the store is opened. The run keeps
its tenant, which must be the caller's. A run that is already there is refused, and
nothing changes.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			x, err := readExportFile(args[0])
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			cn, err := connect(context.WithoutCancel(ctx), &e.target, e.stderr, nil)
			if err != nil {
				return err
			}
			defer cn.close()
			where := "db " + e.db
			if cn.remote {
				where = "server " + e.server
			}
			resp, err := cn.runs.ImportRun(ctx, &reinv1.ImportRunRequest{Export: x})
			if err != nil {
				return importError(err, args[0], where)
			}
			fmt.Fprintf(e.stderr, "rein: imported run %s (%d events) into %s\n", x.GetRunId(), len(x.GetEvents()), where)
			return writeJSON(e.stdout, summarize(resp.GetRun()), !e.json)
		},
	}
}

// importError says what a refused ImportRun means for the file and where it
// was sent: a run already there (exit 1), a file over the server's largest
// request (exit 1); anything else as it is.
func importError(err error, file, where string) error {
	st, _ := status.FromError(err)
	switch {
	case st.Code() == codes.AlreadyExists:
		return &exitErr{code: exitError, err: fmt.Errorf("%s, in %s; nothing was imported (inspect the run there, or import into another --db)", st.Message(), where)}
	case st.Code() == codes.ResourceExhausted && strings.Contains(st.Message(), "larger than max"):
		size := ""
		if info, serr := os.Stat(file); serr == nil {
			size = fmt.Sprintf(" (%d bytes)", info.Size())
		}
		return &exitErr{code: exitError, err: fmt.Errorf("%s%s is larger than %s takes in one request (%s); nothing was imported: raise the server's rein serve --max-msg-bytes",
			file, size, where, st.Message())}
	}
	return err
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

// serverBlobs reads a run's blobs from a rein server, embedded or not,
// through GetBlobs, as many a call as the server sends, asking for the ones
// it left out.
type serverBlobs struct {
	runs reinv1.RunServiceClient
}

func (b serverBlobs) Blobs(ctx context.Context, runID string, hashes []string) (map[string][]byte, error) {
	got := make(map[string][]byte, len(hashes))
	for left := hashes; len(left) > 0; {
		resp, err := b.runs.GetBlobs(ctx, &reinv1.GetBlobsRequest{RunId: runID, Hashes: left[:min(len(left), 1000)]})
		if err != nil {
			return nil, err
		}
		if len(resp.GetBlobs()) == 0 {
			return nil, fmt.Errorf("the server sent none of run %s's %d remaining blobs", runID, len(left))
		}
		maps.Copy(got, resp.GetBlobs())
		var rest []string
		for _, h := range left {
			if _, ok := got[h]; !ok {
				rest = append(rest, h)
			}
		}
		left = rest
	}
	return got, nil
}
