package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

func newSteerCmd(e *env) *cobra.Command {
	var requestID string
	cmd := &cobra.Command{
		Use: "steer RUN_ID TEXT|-",
		Example: `  rein steer run_01M8… "use the staging account, not production"
  echo "stop after the first invoice" | rein steer run_01M8… -`,
		Short: "Send a running run a message: the model reads it with its next call",
		Long: `Send a running run a message (- reads it from stdin). rein records it in the
run's log with your name and delivers it with the run's next model call,
never into a call in flight; messages sent before that call go together, in
order. The model reads who sent it and when. A paused run is answered with
rein input, rein approve or rein budget instead; a run that ended takes no
message. The message is sent with one request ID (--request-id, or one made
up once), so a retry after a lost answer records it once. Prints the run.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			text, err := argOrStdin(e.stdin, args[1], "message")
			if err != nil {
				return err
			}
			if requestID == "" {
				requestID = randomID()
			}
			cn, err := changer(ctx, &e.target, e.stderr)
			if err != nil {
				return err
			}
			defer cn.close()
			var run *reinv1.Run
			if err := cn.retry(ctx, func(ctx context.Context) error {
				resp, err := cn.runs.SteerRun(ctx, &reinv1.SteerRunRequest{RunId: args[0], Text: text, RequestId: requestID})
				run = resp.GetRun()
				return err
			}); err != nil {
				return err
			}
			return writeJSON(e.stdout, summarize(run), !e.json)
		},
	}
	cmd.Flags().StringVar(&requestID, "request-id", "", "idempotency key; the same key records the message once (default: random, the same for every retry)")
	e.commandTimeoutFlag(cmd)
	return cmd
}

// argOrStdin is arg, or stdin's content when arg is "-", without its
// trailing newlines; what names it in the error when it is empty.
func argOrStdin(stdin io.Reader, arg, what string) (string, error) {
	text := arg
	if text == "-" {
		b, err := io.ReadAll(stdin)
		if err != nil {
			return "", fmt.Errorf("read the %s from stdin: %w", what, err)
		}
		text = strings.TrimRight(string(b), "\n")
	}
	if text == "" {
		return "", usageError("the %s is empty", what)
	}
	return text, nil
}

// raiseOptions are the flags of rein budget.
type raiseOptions struct {
	steps  uint32
	calls  uint32
	tokens uint64
	usd    float64
	extend time.Duration
	reason string
	host   hostFlags
}

func newBudgetCmd(e *env) *cobra.Command {
	o := &raiseOptions{}
	cmd := &cobra.Command{
		Use: "budget RUN_ID",
		Example: `  rein budget run_01M8… --add-steps 10
  rein budget run_01M8… --add-usd 2.50 --extend-deadline 30m --reason "the report is worth it"`,
		Short: "Raise the budget of a run paused on it (needs_budget), then carry it on",
		Long: `Raise the budget of a run that paused on it (a contract whose
budget.on_exhausted is BUDGET_ACTION_PAUSE pauses as needs_budget instead of
ending). Each flag adds to the run's own limit; give at least one. A raise
that leaves the limit the run paused on still reached is refused, and
nothing is recorded. rein records the raise with your name and carries the
run on until it pauses or ends; the exit code is the run's.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.raise(cmd.Context(), e, args[0])
		},
	}
	cmd.Flags().Uint32Var(&o.steps, "add-steps", 0, "model calls to add to max_steps")
	cmd.Flags().Uint64Var(&o.tokens, "add-tokens", 0, "tokens to add to max_tokens")
	cmd.Flags().Uint32Var(&o.calls, "add-tool-calls", 0, "tool calls to add to max_tool_calls")
	cmd.Flags().Float64Var(&o.usd, "add-usd", 0, "US dollars to add to max_cost_usd")
	cmd.Flags().DurationVar(&o.extend, "extend-deadline", 0, "time to add to the run's deadline (such as 30m)")
	cmd.Flags().StringVar(&o.reason, "reason", "", "why; recorded in the run's log")
	o.host.register(cmd.Flags())
	e.commandTimeoutFlag(cmd)
	return cmd
}

func (o *raiseOptions) raise(ctx context.Context, e *env, runID string) error {
	switch {
	case o.steps == 0 && o.tokens == 0 && o.calls == 0 && o.usd == 0 && o.extend == 0:
		return usageError("give at least one of --add-steps, --add-tokens, --add-tool-calls, --add-usd, --extend-deadline")
	case o.usd < 0 || o.extend < 0:
		return usageError("a raise adds: --add-usd and --extend-deadline must not be negative")
	}
	cn, err := readerWith(ctx, e, &o.host)
	if err != nil {
		return err
	}
	defer cn.close()
	got, err := getRun(ctx, cn, runID)
	if err != nil {
		return err
	}
	req := &reinv1.RaiseBudgetRequest{RunId: runID, AddSteps: o.steps, AddTokens: o.tokens, AddToolCalls: o.calls, AddCostUsd: o.usd, Reason: o.reason}
	if o.extend > 0 {
		req.ExtendDeadline = durationpb.New(o.extend)
	}
	after := got.GetRun().GetVersion()
	if err := once(ctx, cn, runID, after, func(ctx context.Context) error {
		_, err := cn.runs.RaiseBudget(ctx, req)
		return err
	}, func(ev *reinv1.Event) bool {
		br := ev.GetBudgetRaised()
		return br != nil && br.GetAddSteps() == o.steps && br.GetAddTokens() == o.tokens && br.GetAddToolCalls() == o.calls && br.GetAddCostUsd() == o.usd && br.GetReason() == o.reason
	}); err != nil {
		return err
	}
	return carryOn(ctx, e, cn, runID, after)
}
