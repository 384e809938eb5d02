package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/reinhq/rein/client"
	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
)

type runOptions struct {
	model     string
	baseURL   string
	host      hostFlags
	requestID string
	detach    bool
}

func newRunCmd(e *env) *cobra.Command {
	o := &runOptions{}
	cmd := &cobra.Command{
		Use: "run TASK.json",
		Example: `  rein run examples/invoice/task.json --model script:examples/invoice/model.jsonl --tools fixture:examples/invoice/tools.json
  rein run task.json --server rein.internal:7233 --request-id order-42`,
		Short: "Start a run from a task file and follow it until it pauses or ends",
		Long: `Start a run from a task file (the protojson form of a TaskContract) and follow it:
one progress line per event on stderr, then the run's JSON summary on stdout.
The exit code says how the run stands: 0 completed, 10 paused for a person,
11 budget exhausted, 12 failed, 13 denied or expired, 130 cancelled (Ctrl+C
cancels the run and records it). With --detach (and --server) it prints the
run as started, queued or not, and exits 0 without following it.

With --server, a server that is unavailable (restarting, unreachable) is
tried again for up to --command-timeout, then rein exits 5. The start is
sent with one request ID (--request-id, or one made up once), so a start
whose answer was lost is found again, never doubled.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), e, args[0])
		},
	}
	cmd.Flags().StringVar(&o.model, "model", "", "the model, overriding the task's: script:FILE (JSONL, one reply per line), openai:NAME or anthropic:NAME")
	cmd.Flags().StringVar(&o.baseURL, "base-url", "", "the model provider's base URL, for OpenAI-compatible servers (vLLM, Ollama, llama.cpp, LM Studio)")
	o.host.register(cmd.Flags())
	cmd.Flags().BoolVar(&o.detach, "detach", false, "with --server, start the run, print it and exit 0 without following it (a queued run says its place), for scripts that start many")
	cmd.Flags().StringVar(&o.requestID, "request-id", "", "idempotency key; the same key returns the same run (default: random, the same for every retry)")
	e.commandTimeoutFlag(cmd)
	return cmd
}

func (o *runOptions) run(ctx context.Context, e *env, path string) error {
	c, err := loadTask(path)
	if err != nil {
		return err
	}
	if c.Model, err = modelFlag(c.GetModel(), o.model, o.baseURL); err != nil {
		return err
	}
	if err := validateTask(path, c); err != nil {
		return err
	}
	if e.server != "" && o.host.given() {
		return errServerFlags
	}
	if o.detach && e.server == "" {
		return usageError("--detach needs --server: the embedded server stops when rein run exits, and a detached run would wait for the next command to carry it on")
	}
	var s *setup
	if e.server == "" {
		if s, err = o.host.open(ctx, ""); err != nil {
			return err
		}
		defer s.close()
	}
	if o.requestID == "" {
		o.requestID = randomID()
	}
	if ctx.Err() != nil {
		return &exitErr{code: exitCancelled, err: errors.New("interrupted before the run started; nothing was written")}
	}
	cn, err := connect(context.WithoutCancel(ctx), &e.target, e.stderr, s)
	if err != nil {
		return err
	}
	defer cn.close()
	req := &reinv1.StartRunRequest{RequestId: o.requestID, Contract: c}
	var resp *reinv1.StartRunResponse
	err = cn.retry(ctx, func(ctx context.Context) (err error) {
		resp, err = cn.runs.StartRun(ctx, req)
		return err
	})
	if err != nil && ctx.Err() != nil {
		// Interrupted while starting: the run may exist. The request ID
		// finds it (or starts it) so that it can be cancelled, not left
		// running.
		err = cn.retry(context.WithoutCancel(ctx), func(ctx context.Context) (err error) {
			resp, err = cn.runs.StartRun(ctx, req)
			return err
		})
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
	for _, warning := range resp.GetWarnings() {
		fmt.Fprintf(e.stderr, "rein: warning: %s\n", warning)
	}
	if o.detach {
		return writeJSON(e.stdout, summarize(resp.GetRun()), !e.json)
	}
	run, err := follow(ctx, e.stderr, cn.Client, runID, 0)
	if err != nil && ctx.Err() != nil {
		run, err = cancelOnInterrupt(e.stderr, cn.runs, runID)
	}
	if err != nil {
		return err
	}
	return finish(e, run)
}

// errFollowed ends follow's Watch when the run pauses or ends.
var errFollowed = errors.New("the run paused or ended")

// follow prints each event of the run after sequence after on w until the
// run waits for a person or ends, and returns the run as it then stands. A
// run that waits for a person is a pause whatever put it there: a status
// change to needs_*, but also one approval of a proposal that needs more
// (approval_given), a write whose outcome is unknown, or a decision that
// recorded nothing (an approver's second approval, counted once). It
// follows through client.Watch, so a dropped stream is resumed from the
// last event printed, for as long as the client's Backoff.Patience allows
// (--command-timeout).
func follow(ctx context.Context, w io.Writer, c *client.Client, runID string, after uint64) (*reinv1.Run, error) {
	// A run that delegates waits for its children: when one of them (or
	// theirs) pauses for a person, following stops there too.
	wctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	kids := &childWatch{c: c, w: w, stop: stop}
	defer kids.wait()
	if got, err := c.Runs.GetRun(ctx, &reinv1.GetRunRequest{RunId: runID}); err == nil {
		if run := got.GetRun(); run.GetVersion() == after && client.WaitsForPerson(run) {
			return run, nil // nothing to follow: it waits for a person as it stands
		}
		for _, ch := range got.GetRun().GetDelegation().GetOpenChildren() {
			kids.follow(wctx, ch.GetRunId())
		}
	}
	err := c.Watch(wctx, runID, after, func(ev *reinv1.Event) error {
		fmt.Fprintln(w, eventLine(ev))
		for _, ch := range ev.GetDelegationStarted().GetChildren() {
			kids.follow(wctx, ch.GetRunId())
		}
		if runstate.Terminal(ev.GetStatusChanged().GetTo()) {
			return errFollowed
		}
		if !mayWait(ev) {
			return nil
		}
		run, waits, err := waitsAt(wctx, c, runID, ev.GetSequence())
		if err != nil {
			return err
		}
		if waits {
			if line := pauseLine(run); line != "" {
				fmt.Fprintln(w, line)
			}
			return errFollowed
		}
		return nil
	})
	if errors.Is(context.Cause(wctx), errChildPaused) && ctx.Err() == nil {
		err = nil
	}
	if err != nil && !errors.Is(err, errFollowed) {
		return nil, err
	}
	var got *reinv1.GetRunResponse
	if err := c.Retry(ctx, func(ctx context.Context) (err error) {
		got, err = c.Runs.GetRun(ctx, &reinv1.GetRunRequest{RunId: runID})
		return err
	}); err != nil {
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
	if waitsForChildren(run) {
		if !e.json {
			fmt.Fprintf(e.stderr, "rein: run %s waits for its children, one of which waits for a person\n", run.GetRunId())
		}
		return &exitErr{code: exitPaused}
	}
	if code := statusExit(run.GetStatus()); code != exitOK {
		if !e.json {
			fmt.Fprintf(e.stderr, "rein: run %s is %s%s\n", run.GetRunId(), runstate.StatusName(run.GetStatus()), nextStep(run))
		}
		return &exitErr{code: code}
	}
	return nil
}

// nextStep says what answers a paused run, as the end of a line: the
// command to give it next.
func nextStep(run *reinv1.Run) string {
	id := run.GetRunId()
	switch p := run.GetPending(); {
	case p.GetProposal() != nil:
		return proposalStep(run, p.GetProposal())
	case p.GetQuestion() != nil:
		return fmt.Sprintf("; answer it: rein input %s TEXT", id)
	case p.GetBudget() != nil:
		return fmt.Sprintf(" (%s: %s); raise it: rein budget %s --add-steps N (or --add-tokens, --add-tool-calls, --add-usd, --extend-deadline)",
			p.GetBudget().GetLimit(), p.GetBudget().GetDetail(), id)
	}
	return ""
}

func randomID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// modelFlag applies --model and --base-url to the task's model spec:
// script:FILE reads a script; openai:NAME and anthropic:NAME name a provider's
// model, keeping the task's output cap and temperature.
func modelFlag(spec *reinv1.ModelSpec, value, baseURL string) (*reinv1.ModelSpec, error) {
	if value == "" {
		if baseURL != "" {
			if spec == nil {
				return nil, usageError("--base-url needs a model: give --model openai:NAME, or a model in the task")
			}
			spec = proto.Clone(spec).(*reinv1.ModelSpec)
			spec.BaseUrl = baseURL
		}
		return spec, nil
	}
	provider, rest, _ := strings.Cut(value, ":")
	switch provider {
	case "script":
		if baseURL != "" {
			return nil, usageError("--base-url does not apply to a scripted model")
		}
		file, err := flagFile("model", value, "script")
		if err != nil {
			return nil, err
		}
		replies, err := loadScript(file)
		if err != nil {
			return nil, err
		}
		return scriptSpec(replies), nil
	case "openai", "anthropic":
		if rest == "" {
			return nil, usageError("--model %q: name the model, such as openai:gpt-4o-mini or anthropic:claude-sonnet-4-5", value)
		}
		out := &reinv1.ModelSpec{Provider: provider, Name: rest, BaseUrl: baseURL}
		if spec != nil {
			out.MaxOutputTokens, out.Temperature = spec.GetMaxOutputTokens(), spec.Temperature
		}
		return out, nil
	}
	return nil, usageError("--model %q: expected script:FILE, openai:NAME or anthropic:NAME", value)
}
