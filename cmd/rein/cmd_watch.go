package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/eventkind"
)

type watchOptions struct {
	after    uint64
	all      bool
	tree     bool
	statuses []string
	// output asks for the text of the run's model calls as it is written
	// (--model-output: on for lines, off for --json unless given).
	output bool
}

func newWatchCmd(e *env) *cobra.Command {
	o := &watchOptions{}
	cmd := &cobra.Command{
		Use: "watch RUN_ID | watch --all",
		Example: `  rein watch run_01M8…
  rein watch run_01M8… --tree
  rein watch --all --server rein.internal:7233`,
		Short: "Follow a run's events live, or status changes across runs",
		Long: `Follow a run's events: one line per event (time, sequence, type, a summary), or
NDJSON with --json. On a server it follows the run through its pauses to its end
and exits with the run's code (0 completed, 11 budget exhausted, …); on the
embedded server nothing can resume a paused run, so it stops at a pause (10).
A dropped connection is resumed from the last event seen: nothing is lost or
repeated.

On a server it also shows the text of the run's model call in flight as the
model writes it, each line under the call's model_requested after "┊", at most
ten updates a second; --model-output=false leaves it out. With --json it is left
out unless --model-output is given, and then comes as lines of "type":
"model_output" (no sequence: it is not an event, and nothing of it is stored).

With --tree it follows the run and every run it delegates to, each line prefixed
with its run, until all have ended; the client composes the tree (WatchRun
follows one run).

With --all it follows status changes across your runs until interrupted.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if o.all != (len(args) == 0) || len(args) > 1 {
				return usageError("give one RUN_ID, or --all")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.all {
				return o.watchAll(cmd.Context(), e)
			}
			if o.tree {
				return o.watchTree(cmd.Context(), e, args[0])
			}
			if cmd.Flags().Changed("model-output") || !e.json {
				on, _ := cmd.Flags().GetBool("model-output")
				o.output = on
			}
			return o.watchRun(cmd.Context(), e, args[0])
		},
	}
	cmd.Flags().Uint64Var(&o.after, "after", 0, "start after this sequence (with --all: after this cursor)")
	cmd.Flags().BoolVar(&o.all, "all", false, "follow status changes across runs")
	cmd.Flags().BoolVar(&o.tree, "tree", false, "follow the run and the runs it delegates to, each line prefixed with its run")
	cmd.Flags().StringSliceVar(&o.statuses, "status", nil, "with --all: only changes to these statuses")
	cmd.Flags().Bool("model-output", true, "show the text of the model call in flight as it is written (default: on, off with --json)")
	return cmd
}

var errPaused = errors.New("paused")

func (o *watchOptions) watchRun(ctx context.Context, e *env, runID string) error {
	cn, err := reader(ctx, &e.target, e.stderr)
	if err != nil {
		return err
	}
	defer cn.close()
	paint := painter(e.stdout)
	text := &outputPrinter{w: e.stdout}
	onEvent := func(ev *reinv1.Event) error {
		if err := text.end(); err != nil {
			return err
		}
		var err error
		if e.json {
			err = writeJSON(e.stdout, eventJSON(ev), false)
		} else {
			_, err = fmt.Fprintln(e.stdout, paint(ev, eventLine(ev)))
		}
		if err != nil {
			return err
		}
		if !e.json {
			if err := pauseNote(ctx, e.stdout, cn, runID, ev); err != nil {
				return err
			}
		}
		return pausedHere(ctx, cn, runID, ev)
	}
	if !cn.remote {
		// Nothing on the embedded server answers a person's pause: a run
		// that waits for one, with no event after --after, has nothing to
		// follow.
		if _, waits, err := waitsAt(ctx, cn.Client, runID, o.after); err != nil || waits {
			return watchEnd(ctx, cn, runID, err)
		}
	}
	if o.output {
		err = cn.WatchOutput(ctx, runID, o.after, onEvent, func(m *reinv1.ModelOutput) error {
			if e.json {
				return writeJSON(e.stdout, outputJSON(m), false)
			}
			return text.print(m)
		})
	} else {
		err = cn.Watch(ctx, runID, o.after, onEvent)
	}
	if ctx.Err() != nil {
		return &exitErr{code: exitCancelled}
	}
	if errors.Is(err, errPaused) {
		err = nil
	}
	return watchEnd(ctx, cn, runID, err)
}

// watchEnd ends a watch of one run that stopped with err: err itself, or
// the run's exit code as it stands.
func watchEnd(ctx context.Context, cn *conn, runID string, err error) error {
	if err != nil {
		return err
	}
	got, err := cn.runs.GetRun(context.WithoutCancel(ctx), &reinv1.GetRunRequest{RunId: runID})
	if err != nil {
		return err
	}
	if code := statusExit(got.GetRun().GetStatus()); code != exitOK {
		return &exitErr{code: code}
	}
	return nil
}

// pausedHere is errPaused when ev leaves the run waiting for a person on
// the embedded server, where nothing answers it while the watch lasts: a
// pause that holds now, not one that the log replays (the run went on).
// On a server the watch follows the run through its pauses.
func pausedHere(ctx context.Context, cn *conn, runID string, ev *reinv1.Event) error {
	if cn.remote || !mayWait(ev) {
		return nil
	}
	_, waits, err := waitsAt(ctx, cn.Client, runID, ev.GetSequence())
	if err == nil && waits {
		err = errPaused
	}
	return err
}

// pauseNote prints, under an event that left the run waiting for a
// person, when that pause ends (pauseLine).
func pauseNote(ctx context.Context, w io.Writer, cn *conn, runID string, ev *reinv1.Event) error {
	if !mayWait(ev) {
		return nil
	}
	run, waits, err := waitsAt(ctx, cn.Client, runID, ev.GetSequence())
	if err != nil || !waits {
		return err
	}
	if line := pauseLine(run); line != "" {
		_, err = fmt.Fprintln(w, line)
	}
	return err
}

func (o *watchOptions) watchAll(ctx context.Context, e *env) error {
	statuses, err := parseStatuses(o.statuses)
	if err != nil {
		return err
	}
	req := &reinv1.WatchRunsRequest{AfterCursor: o.after, Statuses: statuses}
	cn, err := reader(ctx, &e.target, e.stderr)
	if err != nil {
		return err
	}
	defer cn.close()
	err = cn.WatchRuns(ctx, req, func(ch *reinv1.RunChange) error {
		if e.json {
			m, _ := protoJSON(ch).(map[string]any)
			return writeJSON(e.stdout, m, false)
		}
		_, err := fmt.Fprintln(e.stdout, runChangeLine(ch))
		return err
	})
	if ctx.Err() != nil {
		return nil // interrupted: the normal way to stop following
	}
	return err
}

// painter colours an event line by what it means, only on a terminal and
// never with NO_COLOR.
func painter(w io.Writer) func(*reinv1.Event, string) string {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("NO_COLOR") != "" || !term.IsTerminal(int(f.Fd())) {
		return func(_ *reinv1.Event, s string) string { return s }
	}
	return func(ev *reinv1.Event, s string) string {
		code := toneCode(eventkind.Of(ev).Tone(ev))
		if code == "" {
			return s
		}
		return "\x1b[" + code + "m" + s + "\x1b[0m"
	}
}

// toneCode is the ANSI colour of an event line's tone; "" for the
// terminal's own.
func toneCode(t eventkind.Tone) string {
	switch t {
	case eventkind.Good:
		return "32" // green
	case eventkind.Waiting:
		return "33" // yellow
	case eventkind.Bad:
		return "31" // red
	case eventkind.Alert:
		return "35" // magenta
	}
	return ""
}
