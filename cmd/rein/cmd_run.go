package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
)

type runOptions struct {
	model     string
	tools     string
	workspace string
	requestID string
}

func newRunCmd(e *env) *cobra.Command {
	o := &runOptions{}
	cmd := &cobra.Command{
		Use:   "run TASK.json",
		Short: "Start a run from a task file and follow it until it pauses or ends",
		Long: `Start a run from a task file (the protojson form of a TaskContract) and follow it:
one progress line per event on stderr, then the run's JSON summary on stdout.
The exit code says how the run stands: 0 completed, 10 paused for a person,
11 budget exhausted, 12 failed, 13 denied or expired, 130 cancelled (Ctrl+C
cancels the run and records it).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), e, args[0])
		},
	}
	cmd.Flags().StringVar(&o.model, "model", "", "the model, as script:FILE (JSONL, one reply per line); overrides the task's model")
	cmd.Flags().StringVar(&o.tools, "tools", "", "tools for the run, as fixture:FILE (a JSON object: tool name → results)")
	cmd.Flags().StringVar(&o.workspace, "workspace", "", "the workspace root for the file tools (fs.read, fs.list, fs.search, fs.write, fs.patch)")
	cmd.Flags().StringVar(&o.requestID, "request-id", "", "idempotency key; the same key returns the same run (default: random)")
	return cmd
}

func (o *runOptions) run(ctx context.Context, e *env, path string) error {
	c, err := loadTask(path)
	if err != nil {
		return err
	}
	if o.model != "" {
		file, err := flagFile("model", o.model, "script")
		if err != nil {
			return err
		}
		replies, err := loadScript(file)
		if err != nil {
			return err
		}
		c.Model = scriptSpec(replies)
	}
	if err := validateTask(path, c); err != nil {
		return err
	}
	executor, err := toolsFlag(o.tools, o.workspace)
	if err != nil {
		return err
	}
	e.workspace = o.workspace
	if o.requestID == "" {
		o.requestID = randomID()
	}
	if ctx.Err() != nil {
		return &exitErr{code: exitCancelled, err: errors.New("interrupted before the run started; nothing was written")}
	}
	cn, err := connect(context.WithoutCancel(ctx), e, executor)
	if err != nil {
		return err
	}
	defer cn.close()
	req := &reinv1.StartRunRequest{RequestId: o.requestID, Contract: c}
	resp, err := cn.runs.StartRun(ctx, req)
	if err != nil && ctx.Err() != nil {
		// Interrupted while starting: the run may exist. The request ID
		// finds it (or starts it) so that it can be cancelled, not left
		// running.
		resp, err = cn.runs.StartRun(context.WithoutCancel(ctx), req)
		if err == nil {
			run, cerr := cancelOnInterrupt(e.stderr, cn.runs, resp.GetRun().GetRunId())
			if cerr != nil {
				return cerr
			}
			return finish(e, run)
		}
	}
	if err != nil {
		return err
	}
	runID := resp.GetRun().GetRunId()
	where := "db " + e.db
	if cn.remote {
		where = "server " + e.server
	}
	fmt.Fprintf(e.stderr, "rein: run %s started (%s)\n", runID, where)
	run, err := follow(ctx, e.stderr, cn.runs, runID, 0)
	if err != nil && ctx.Err() != nil {
		run, err = cancelOnInterrupt(e.stderr, cn.runs, runID)
	}
	if err != nil {
		return err
	}
	return finish(e, run)
}

// follow prints each event of the run on w until the run pauses or ends, and
// returns the run as it then stands.
func follow(ctx context.Context, w io.Writer, runs reinv1.RunServiceClient, runID string, after uint64) (*reinv1.Run, error) {
	stream, err := runs.WatchRun(ctx, &reinv1.WatchRunRequest{RunId: runID, AfterSequence: after})
	if err != nil {
		return nil, err
	}
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		ev := resp.GetEvent()
		fmt.Fprintln(w, eventLine(ev))
		if sc := ev.GetStatusChanged(); sc != nil && sc.GetTo() != reinv1.RunStatus_RUN_STATUS_RUNNING {
			break
		}
	}
	got, err := runs.GetRun(ctx, &reinv1.GetRunRequest{RunId: runID})
	if err != nil {
		return nil, err
	}
	return got.GetRun(), nil
}

// cancelOnInterrupt records cancelled for a run the user interrupted. A run
// that ended first keeps its status.
func cancelOnInterrupt(w io.Writer, runs reinv1.RunServiceClient, runID string) (*reinv1.Run, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := runs.CancelRun(ctx, &reinv1.CancelRunRequest{RunId: runID, Reason: "interrupted (Ctrl+C)"})
	if status.Code(err) == codes.FailedPrecondition {
		got, gerr := runs.GetRun(ctx, &reinv1.GetRunRequest{RunId: runID})
		if gerr != nil {
			return nil, gerr
		}
		return got.GetRun(), nil
	}
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "rein: run %s cancelled\n", runID)
	return resp.GetRun(), nil
}

// finish prints the run's summary on stdout and exits with its status's code.
func finish(e *env, run *reinv1.Run) error {
	if err := writeJSON(e.stdout, summarize(run), !e.json); err != nil {
		return err
	}
	if code := statusExit(run.GetStatus()); code != exitOK {
		if !e.json {
			fmt.Fprintf(e.stderr, "rein: run %s is %s\n", run.GetRunId(), runstate.StatusName(run.GetStatus()))
		}
		return &exitErr{code: code}
	}
	return nil
}

func randomID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
