package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

type forkOptions struct {
	at                 uint64
	requestID          string
	maxSteps, maxCalls uint32
	maxTokens          uint64
	timeout            time.Duration
	host               hostFlags
}

func newForkCmd(e *env) *cobra.Command {
	o := &forkOptions{}
	cmd := &cobra.Command{
		Use: "fork RUN_ID --at SEQ",
		Example: `  rein fork run_01M8… --at 8
  rein fork run_01M8… --at 8 --tools fixture:examples/invoice/tools.json`,
		Short: "Start a new run from another's state at a sequence, without paying again for what it did",
		Long: `Start a new run whose log carries over RUN_ID's events up to --at: no model call or
tool result before it is paid for again, and its run_started names the parent
run and sequence. A fork at a pending write proposes it again; a committed write
is carried over with its receipt, never repeated. Budget flags replace the
parent's budget. The new run is followed until it pauses or ends, as rein run
does, and the exit code is its. On the embedded server, give --tools (and the other tool flags) for its
tools.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if o.at == 0 {
				return usageError("--at is required: the last sequence of the parent to carry over")
			}
			cn, err := readerWith(ctx, e, &o.host)
			if err != nil {
				return err
			}
			defer cn.close()
			req := &reinv1.ForkRunRequest{RunId: args[0], AtSequence: o.at, RequestId: o.requestID}
			if req.RequestId == "" {
				req.RequestId = randomID()
			}
			if cmd.Flags().Changed("max-steps") || cmd.Flags().Changed("max-tokens") || cmd.Flags().Changed("timeout") || cmd.Flags().Changed("max-tool-calls") {
				got, err := cn.runs.GetRun(ctx, &reinv1.GetRunRequest{RunId: args[0]})
				if err != nil {
					return err
				}
				b := got.GetRun().GetContract().GetBudget()
				if b == nil {
					b = &reinv1.Budget{}
				}
				if cmd.Flags().Changed("max-steps") {
					b.MaxSteps = o.maxSteps
				}
				if cmd.Flags().Changed("max-tokens") {
					b.MaxTokens = o.maxTokens
				}
				if cmd.Flags().Changed("max-tool-calls") {
					b.MaxToolCalls = o.maxCalls
				}
				if cmd.Flags().Changed("timeout") {
					b.Timeout = durationpb.New(o.timeout)
				}
				req.Budget = b
			}
			resp, err := cn.runs.ForkRun(ctx, req)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stderr, "rein: run %s forked from %s at sequence %d\n", resp.GetRun().GetRunId(), args[0], o.at)
			return carryOn(ctx, e, cn, resp.GetRun().GetRunId(), resp.GetRun().GetVersion())
		},
	}
	f := cmd.Flags()
	f.Uint64Var(&o.at, "at", 0, "the last sequence of the parent carried over")
	f.StringVar(&o.requestID, "request-id", "", "idempotency key; the same key returns the same fork (default: random)")
	f.Uint32Var(&o.maxSteps, "max-steps", 0, "replace the budget's max_steps")
	f.Uint64Var(&o.maxTokens, "max-tokens", 0, "replace the budget's max_tokens")
	f.Uint32Var(&o.maxCalls, "max-tool-calls", 0, "replace the budget's max_tool_calls")
	f.DurationVar(&o.timeout, "timeout", 0, "replace the budget's timeout")
	o.host.register(f)
	return cmd
}
