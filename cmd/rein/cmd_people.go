package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/secret"
	"github.com/reinhq/rein/internal/tools"
	"github.com/reinhq/rein/internal/tools/workspace"
)

// decideOptions are the flags of approve and deny.
type decideOptions struct {
	reason    string
	hash      string
	end       bool
	arguments string
	host      hostFlags
}

func newApproveCmd(e *env) *cobra.Command {
	o := &decideOptions{}
	cmd := &cobra.Command{
		Use: "approve RUN_ID PROPOSAL_ID",
		Example: `  rein approve run_01M8… prop_01M8… --reason "checked the invoice"
  rein approve run_01M8… prop_01M8… --hash f280fdd5916b… --tools fixture:examples/refund/tools.json
  rein approve run_01M8… prop_01M8… --arguments fixed.json`,
		Short: "Approve a proposed write: it is committed once, then the run goes on",
		Long: `Approve a run's pending proposal. rein records the decision and the write's
operation ID (its idempotency key) before the write is sent, commits it once,
records the receipt, and carries the run on until it pauses or ends; the exit
code is the run's. An approval that is not the last the write needs (a grant's
approvals of 2 or more) leaves the run waiting for another approver: rein
exits 10 at once and says how many more approvals it needs and who may not
give them. --hash pins the proposal you reviewed (the hash "rein
pending" shows); without it, the pending proposal's hash is used. On the
embedded server, give the same --tools the run was started with: they commit
the write. With --server, a server that is unavailable is tried again for up
to --command-timeout; a decision the server recorded before its answer was
lost is found in the run's log and carried on, never made twice.

With --arguments FILE (- for stdin), the proposal is revised instead: the
file holds the write's arguments in full, as a JSON object. rein checks them
against the tool's input schema, asks the tool for a new preview, and
records the revised proposal (a new ID and hash, with what changed and who
changed it, and --reason, why); the run waits for approval of the revision,
which prints with its pending proposal (exit 10). Approve it as any other.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.decide(cmd.Context(), e, args[0], args[1], true)
		},
	}
	o.flags(e, cmd, false)
	return cmd
}

func newDenyCmd(e *env) *cobra.Command {
	o := &decideOptions{}
	cmd := &cobra.Command{
		Use: "deny RUN_ID PROPOSAL_ID",
		Example: `  rein deny run_01M8… prop_01M8… --reason "wrong charge"
  rein deny run_01M8… prop_01M8… --reason "not ours" --end`,
		Short: "Reject a proposed write: the reason goes to the model (or --end ends the run denied)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.decide(cmd.Context(), e, args[0], args[1], false)
		},
	}
	o.flags(e, cmd, true)
	return cmd
}

func (o *decideOptions) flags(e *env, cmd *cobra.Command, deny bool) {
	cmd.Flags().StringVar(&o.reason, "reason", "", "why; recorded (with a revision, beside it), and shown to the model on a rejection")
	cmd.Flags().StringVar(&o.hash, "hash", "", "the proposal hash you reviewed (default: the pending proposal's)")
	o.host.register(cmd.Flags())
	e.commandTimeoutFlag(cmd)
	if deny {
		cmd.Flags().BoolVar(&o.end, "end", false, "end the run as denied instead of letting the model go on")
	} else {
		cmd.Flags().StringVar(&o.arguments, "arguments", "", "revise the proposal: a JSON file of the write's arguments in full (- for stdin); the revision waits for approval")
	}
}

func (o *decideOptions) decide(ctx context.Context, e *env, runID, proposalID string, approve bool) error {
	cn, err := readerWith(ctx, e, &o.host)
	if err != nil {
		return err
	}
	defer cn.close()
	got, err := getRun(ctx, cn, runID)
	if err != nil {
		return err
	}
	hash := o.hash
	if hash == "" {
		hash = got.GetRun().GetPending().GetProposal().GetHash()
	}
	if hash == "" {
		return fmt.Errorf("run %s is %s; it has no proposal waiting for a decision", runID, runstate.StatusName(got.GetRun().GetStatus()))
	}
	if o.arguments != "" {
		return o.revise(ctx, e, cn, runID, proposalID, hash, got.GetRun().GetVersion())
	}
	verdict := reinv1.ApprovalVerdict_APPROVAL_VERDICT_REJECT
	if approve {
		verdict = reinv1.ApprovalVerdict_APPROVAL_VERDICT_APPROVE
	}
	req := &reinv1.DecideApprovalRequest{
		RunId: runID, ProposalId: proposalID, ProposalHash: hash, Verdict: verdict, Reason: o.reason, EndRun: o.end,
	}
	after := got.GetRun().GetVersion()
	if err := once(ctx, cn, runID, after, func(ctx context.Context) error {
		_, err := cn.runs.DecideApproval(ctx, req)
		return err
	}, func(ev *reinv1.Event) bool {
		d := ev.GetApprovalDecided()
		return d != nil && d.GetProposalId() == proposalID && d.GetApproved() == approve && d.GetReason() == o.reason && d.GetEndRun() == o.end
	}); err != nil {
		return err
	}
	return carryOn(ctx, e, cn, runID, after)
}

// revise sends the proposal's revised arguments (--arguments), and prints
// the run waiting for approval of the revision.
func (o *decideOptions) revise(ctx context.Context, e *env, cn *conn, runID, proposalID, hash string, after uint64) error {
	b, err := readFileOrStdin(e.stdin, o.arguments)
	if err != nil {
		return usageError("--arguments: %v", err)
	}
	args := &structpb.Struct{}
	if err := protojson.Unmarshal(b, args); err != nil {
		return usageError("--arguments %s: not a JSON object of the write's arguments: %v", o.arguments, err)
	}
	req := &reinv1.DecideApprovalRequest{RunId: runID, ProposalId: proposalID, ProposalHash: hash,
		Verdict: reinv1.ApprovalVerdict_APPROVAL_VERDICT_REVISE, Reason: o.reason, Arguments: args}
	if err := once(ctx, cn, runID, after, func(ctx context.Context) error {
		_, err := cn.runs.DecideApproval(ctx, req)
		return err
	}, func(ev *reinv1.Event) bool {
		return ev.GetProposalRevised().GetSupersededProposalId() == proposalID
	}); err != nil {
		return err
	}
	got, err := getRun(ctx, cn, runID)
	if err != nil {
		return err
	}
	return finish(e, got.GetRun())
}

// readFileOrStdin is the content of the file name, or stdin's for "-", up
// to maxArgumentsFile bytes.
func readFileOrStdin(stdin io.Reader, name string) ([]byte, error) {
	r := stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxArgumentsFile+1))
	if err == nil && len(b) > maxArgumentsFile {
		err = fmt.Errorf("%s is over %d bytes", name, maxArgumentsFile)
	}
	return b, err
}

// maxArgumentsFile bounds the arguments file of a revision.
const maxArgumentsFile = 4 << 20

// getRun is GetRun, tried again while a --server is unavailable.
func getRun(ctx context.Context, cn *conn, runID string) (got *reinv1.GetRunResponse, err error) {
	err = cn.retry(ctx, func(ctx context.Context) error {
		got, err = cn.runs.GetRun(ctx, &reinv1.GetRunRequest{RunId: runID})
		return err
	})
	return got, err
}

// once sends a decision or an answer (call), tried again while a --server is
// unavailable. A try whose answer was lost may have been applied: then the
// next one is refused (the run no longer waits). So when a retried call is
// refused, the run's log after version after is read, and an event that
// records this very call (mine: the same proposal, verdict, reason and end,
// or the same answer) makes the call a success.
func once(ctx context.Context, cn *conn, runID string, after uint64, call func(context.Context) error, mine func(*reinv1.Event) bool) error {
	tries := 0
	err := cn.retry(ctx, func(ctx context.Context) error {
		tries++
		return call(ctx)
	})
	if err == nil || tries == 1 || status.Code(err) == codes.Unavailable {
		return err
	}
	found, lerr := logged(ctx, cn, runID, after, mine)
	if lerr != nil || !found {
		return err
	}
	fmt.Fprintln(cn.stderr, "rein: the server had recorded this before the connection broke; carrying on")
	return nil
}

// logged reports whether an event of the run after version after matches.
func logged(ctx context.Context, cn *conn, runID string, after uint64, match func(*reinv1.Event) bool) (bool, error) {
	req := &reinv1.ListEventsRequest{RunId: runID, AfterSequence: after}
	for {
		var resp *reinv1.ListEventsResponse
		if err := cn.retry(ctx, func(ctx context.Context) (err error) {
			resp, err = cn.runs.ListEvents(ctx, req)
			return err
		}); err != nil {
			return false, err
		}
		for _, ev := range resp.GetEvents() {
			if match(ev) {
				return true, nil
			}
		}
		if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
			return false, nil
		}
	}
}

func newInputCmd(e *env) *cobra.Command {
	var h hostFlags
	cmd := &cobra.Command{
		Use: "input RUN_ID TEXT|-",
		Example: `  rein input run_01M8… "the second invoice"
  echo "INV-42" | rein input run_01M8… -`,
		Short: "Answer a run's question (- reads the answer from stdin), then carry the run on",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			text, err := argOrStdin(e.stdin, args[1], "answer")
			if err != nil {
				return err
			}
			cn, err := readerWith(ctx, e, &h)
			if err != nil {
				return err
			}
			defer cn.close()
			got, err := getRun(ctx, cn, args[0])
			if err != nil {
				return err
			}
			after := got.GetRun().GetVersion()
			if err := once(ctx, cn, args[0], after, func(ctx context.Context) error {
				_, err := cn.runs.ProvideInput(ctx, &reinv1.ProvideInputRequest{RunId: args[0], Text: text})
				return err
			}, func(ev *reinv1.Event) bool {
				return ev.GetInputProvided() != nil && ev.GetInputProvided().GetText() == text
			}); err != nil {
				return err
			}
			return carryOn(ctx, e, cn, args[0], after)
		},
	}
	h.register(cmd.Flags())
	e.commandTimeoutFlag(cmd)
	return cmd
}

func newCancelCmd(e *env) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:     "cancel RUN_ID",
		Example: `  rein cancel run_01M8… --reason "superseded"`,
		Short:   "Cancel a running or paused run (one cancelled already: exit 0, nothing changes)",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			cn, err := changer(ctx, &e.target, e.stderr)
			if err != nil {
				return err
			}
			defer cn.close()
			var run *reinv1.Run
			err = cn.retry(ctx, func(ctx context.Context) error {
				resp, err := cn.runs.CancelRun(ctx, &reinv1.CancelRunRequest{RunId: args[0], Reason: reason})
				run = resp.GetRun()
				return err
			})
			if status.Code(err) == codes.FailedPrecondition {
				// Cancelled already (by an earlier try whose answer was
				// lost, say): the run is as asked.
				if got, gerr := getRun(ctx, cn, args[0]); gerr == nil && got.GetRun().GetStatus() == reinv1.RunStatus_RUN_STATUS_CANCELLED {
					run, err = got.GetRun(), nil
				}
			}
			if err != nil {
				return err
			}
			return writeJSON(e.stdout, summarize(run), !e.json)
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why; recorded in the run's log")
	e.commandTimeoutFlag(cmd)
	return cmd
}

func newPendingCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "pending",
		Example: `  rein pending
  rein pending --server rein.internal:7233 --json`,
		Short: "List the proposals, questions and budget pauses waiting for a person, across your runs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			var waiting []summary
			if e.server != "" || exists(e.db) {
				cn, err := reader(ctx, &e.target, e.stderr)
				if err != nil {
					return err
				}
				defer cn.close()
				runs, _, err := listRunProtos(ctx, cn.runs, &reinv1.ListRunsRequest{Statuses: []reinv1.RunStatus{
					reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL, reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT, reinv1.RunStatus_RUN_STATUS_NEEDS_BUDGET,
				}}, math.MaxInt)
				if err != nil {
					return err
				}
				for _, run := range runs {
					if run.GetPending() == nil {
						continue
					}
					r := summarize(run)
					if r.Parents, err = parentChain(ctx, cn.runs, r.Parent); err != nil {
						return err
					}
					// The evidence is in the events before the
					// proposal, which were recorded before the run
					// was listed: events only grow.
					var evs []*reinv1.Event
					if run.GetPending().GetProposal() != nil {
						if evs, err = allEvents(ctx, cn.runs, run.GetRunId(), 0); err != nil {
							return err
						}
					}
					r.card = cardFor(run, evs)
					waiting = append(waiting, r)
				}
			}
			if e.json {
				if waiting == nil {
					waiting = []summary{}
				}
				return writeJSON(e.stdout, waiting, false)
			}
			w := tabwriter.NewWriter(e.stdout, 0, 2, 2, ' ', 0)
			fmt.Fprintln(w, "RUN_ID\tWAITS FOR\tDETAIL")
			for _, s := range waiting {
				p, _ := s.Pending.(map[string]any)
				ends := ""
				if at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(p["ends_at"])); err == nil {
					ends = fmt.Sprintf(", ends %s by %v", at.UTC().Format(time.RFC3339), p["ends_by"])
				}
				if pr, ok := p["proposal"].(map[string]any); ok {
					fmt.Fprintf(w, "%s\tapproval\t%v %v (hash %v%s)%s\n", s.RunID, pr["tool"], pr["proposal_id"], pr["hash"], ends, chainNote(s.Parents))
				} else if q, ok := p["question"].(map[string]any); ok {
					fmt.Fprintf(w, "%s\tinput\t%q%s%s\n", s.RunID, q["text"], ends, chainNote(s.Parents))
				} else if b, ok := p["budget"].(map[string]any); ok {
					fmt.Fprintf(w, "%s\tbudget\t%v: %v (raise by %v)%s\n", s.RunID, b["limit"], b["detail"], b["expires_at"], chainNote(s.Parents))
				}
				s.card.writeRows(w, "\t")
			}
			return w.Flush()
		},
	}
}

// carryOn follows a run a decision or an answer resumed, from the version
// it had before, until it pauses or ends; it prints the summary and exits
// with the run's code, as rein run does.
func carryOn(ctx context.Context, e *env, cn *conn, runID string, after uint64) error {
	run, err := follow(ctx, e.stderr, cn.Client, runID, after)
	if err != nil && ctx.Err() != nil {
		run, err = cancelOnInterrupt(e.stderr, cn.runs, runID)
	}
	if err != nil {
		return err
	}
	if by := run.GetDelegatedBy(); by != nil && runstate.Terminal(run.GetStatus()) {
		// A child's end carries its tree on: follow the root to its rest.
		root, err := cn.runs.GetRun(ctx, &reinv1.GetRunRequest{RunId: by.GetRootRunId()})
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stderr, "rein: delegated run %s is %s; following its tree's root %s\n", runID, runstate.StatusName(run.GetStatus()), by.GetRootRunId())
		run = root.GetRun()
		if !runstate.Terminal(run.GetStatus()) {
			if run, err = follow(ctx, e.stderr, cn.Client, by.GetRootRunId(), run.GetVersion()); err != nil {
				return err
			}
		}
	}
	return finish(e, run)
}

// workspaceFlag opens a --workspace DIR, whose tools show no value of
// secrets (the server's); "" means none (a nil Executor).
func workspaceFlag(dir string, secrets *secret.Redactor) (tools.Executor, error) {
	if dir == "" {
		return nil, nil
	}
	ws, err := workspace.New(dir, secrets)
	if err != nil {
		return nil, usageError("--workspace: %v", err)
	}
	return ws, nil
}

// readerWith is reader for commands that may carry a run on: the embedded
// server is set up as h says (its tools, workspace, prices and model keys).
// The setup is released with the connection.
func readerWith(ctx context.Context, e *env, h *hostFlags) (*conn, error) {
	if e.server != "" {
		if h.given() {
			return nil, errServerFlags
		}
		return reader(ctx, &e.target, e.stderr)
	}
	if !exists(e.db) {
		return nil, &exitErr{code: exitNotFound, err: fmt.Errorf("no rein store at %s: start a run first, or pass --db", e.db)}
	}
	s, err := h.open(ctx, "")
	if err != nil {
		return nil, err
	}
	cn, err := connect(ctx, &e.target, e.stderr, s)
	if err != nil {
		s.close()
		return nil, err
	}
	inner := cn.close
	cn.close = func() { inner(); s.close() }
	return cn, nil
}
