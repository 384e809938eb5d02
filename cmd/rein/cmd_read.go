package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/eventkind"
	"github.com/reinhq/rein/internal/policy"
	"github.com/reinhq/rein/internal/runstate"
)

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// reader connects for a read-only command. On the embedded server the --db
// file is opened read-only (it is never written, and other readers may
// have it open too), and a missing one is not created: there is nothing to
// read.
func reader(ctx context.Context, t *target, stderr io.Writer) (*conn, error) {
	if t.server != "" {
		return connect(ctx, t, stderr, nil)
	}
	if !exists(t.db) {
		return nil, noStore(t.db)
	}
	return embeddedReadOnly(context.WithoutCancel(ctx), t.db)
}

// changer connects for a command that changes a run the store holds
// (cancel): as reader, but the embedded server's store is writable.
func changer(ctx context.Context, t *target, stderr io.Writer) (*conn, error) {
	if t.server != "" {
		return connect(ctx, t, stderr, nil)
	}
	if !exists(t.db) {
		return nil, noStore(t.db)
	}
	return embedded(context.WithoutCancel(ctx), t.db, nil)
}

// noStore is the error of a command that reads a --db that does not exist.
func noStore(db string) error {
	return &exitErr{code: exitNotFound, err: fmt.Errorf("no rein store at %s: start a run first, or pass --db", db)}
}

func newInspectCmd(e *env) *cobra.Command {
	var tree bool
	cmd := &cobra.Command{
		Use: "inspect RUN_ID|FILE",
		Example: `  rein inspect run_01M8…
  rein inspect run.rein --json
  rein inspect run_01M8… --tree`,
		Short: "Show a run's state, rebuilt by folding its stored events (or an export file's)",
		Long: `Show a run's state, rebuilt by folding its stored events (or an export file's).
With --tree, show the run and every run it delegated to, one line each: status,
steps, its own spend and its subtree's.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if tree {
				return inspectTree(cmd.Context(), e, args[0])
			}
			evs, err := inspectEvents(cmd.Context(), e, args[0])
			if err != nil {
				return err
			}
			st, err := runstate.ApplyAll(runstate.State{}, evs)
			if err != nil {
				return fmt.Errorf("run %s: its log does not fold: %w", args[0], err)
			}
			run := st.Proto(true)
			s := summarize(run)
			s.card = cardFor(run, evs)
			s.PolicyDigest = run.GetPolicyDigest()
			if len(run.GetToolDigests()) > 0 {
				var digests []any
				for _, d := range run.GetToolDigests() {
					digests = append(digests, protoJSON(d))
				}
				s.ToolDigests = digests
			}
			if e.json {
				// The run's summary, as every command prints it, with
				// the card of a paused run; the durations are in the
				// events (rein events --json).
				return writeJSON(e.stdout, s, false)
			}
			tm := timingOf(evs)
			w := tabwriter.NewWriter(e.stdout, 0, 2, 2, ' ', 0)
			fmt.Fprintf(w, "run\t%s\n", s.RunID)
			fmt.Fprintf(w, "goal\t%s\n", s.Goal)
			fmt.Fprintf(w, "status\t%s %s\n", s.Status, paren(s.StatusReason))
			fmt.Fprintf(w, "version\t%d events\n", s.Version)
			fmt.Fprintf(w, "steps\t%d of %d\n", s.Steps, run.GetContract().GetBudget().GetMaxSteps())
			if u := s.Usage; u.CacheWriteInputTokens+u.CacheReadInputTokens > 0 {
				fmt.Fprintf(w, "tokens\t%d (input %d, cache write %d, cache read %d, output %d)\n", s.Tokens,
					u.InputTokens, u.CacheWriteInputTokens, u.CacheReadInputTokens, u.OutputTokens)
			} else {
				fmt.Fprintf(w, "tokens\t%d (input %d, output %d)\n", s.Tokens, u.InputTokens, u.OutputTokens)
			}
			if line := prefixLine(evs); line != "" {
				fmt.Fprintf(w, "prefix\t%s\n", line)
			}
			cost := fmt.Sprintf("$%.6f", s.CostUSD)
			if m := run.GetContract().GetBudget().GetMaxCostUsd(); m > 0 {
				cost += fmt.Sprintf(" of $%.2f", m)
			}
			fmt.Fprintf(w, "cost\t%s\n", cost)
			fmt.Fprintf(w, "tool calls\t%d\n", s.ToolCalls)
			if line := tm.model.String(); line != "" {
				fmt.Fprintf(w, "model time\t%s\n", line)
			}
			if line := tm.tools.String(); line != "" {
				fmt.Fprintf(w, "tool time\t%s\n", line)
			}
			fmt.Fprintf(w, "created\t%s\n", s.CreatedAt)
			fmt.Fprintf(w, "updated\t%s\n", s.UpdatedAt)
			if s.Deadline != "" {
				fmt.Fprintf(w, "deadline\t%s\n", s.Deadline)
			}
			if id := run.GetTraceId(); id != "" {
				fmt.Fprintf(w, "trace\t%s\n", id)
			}
			toolLines(w, run, evs)
			// Every decision a policy made, and who approved each write.
			for _, ev := range evs {
				if pd := ev.GetPolicyDecided(); pd != nil {
					fmt.Fprintf(w, "policy	#%d %s\n", ev.GetSequence(), eventkind.PolicyText(pd))
				}
				if ad := ev.GetApprovalDecided(); ad != nil && ad.GetApproved() {
					fmt.Fprintf(w, "approved	#%d %s by %s\n", ev.GetSequence(), ad.GetProposalId(), ev.GetActor())
				}
				if ag := ev.GetApprovalGiven(); ag != nil {
					fmt.Fprintf(w, "approved	#%d %s by %s (%d of %d)\n", ev.GetSequence(), ag.GetProposalId(), ev.GetActor(), ag.GetGiven(), ag.GetNeeded())
				}
			}
			if p := run.GetPending(); p != nil {
				if pr := p.GetProposal(); pr != nil {
					fmt.Fprintf(w, "pending\tapproval of %s (proposal %s, hash %s)\n", pr.GetTool(), pr.GetProposalId(), pr.GetHash())
					if n := runstate.Needed(pr); n > 1 {
						fmt.Fprintf(w, "approvals\t%d of %d %s\n", len(pr.GetApprovedBy()), n, paren(strings.Join(pr.GetApprovedBy(), ", ")))
					}
				} else {
					fmt.Fprintf(w, "pending\tinput: %q\n", p.GetQuestion().GetText())
				}
				if ends := pauseEnds(p); ends != "" {
					fmt.Fprintf(w, "pause\t%s\n", ends)
				}
				s.card.writeRows(w, "")
			}
			if r := run.GetResult(); r != nil {
				fmt.Fprintf(w, "result\t%s\n", r.GetText())
			}
			if s.LastError != "" {
				fmt.Fprintf(w, "last error\t%s\n", s.LastError)
			}
			delegationLines(w, run)
			return w.Flush()
		},
	}
	cmd.Flags().BoolVar(&tree, "tree", false, "show the run's delegation tree: each run's status, steps and spend")
	return cmd
}

// inspectEvents is every event of the run arg names: an export file's, or
// a stored run's.
func inspectEvents(ctx context.Context, e *env, arg string) ([]*reinv1.Event, error) {
	if isExportFile(arg) {
		return fileEvents(arg, 0)
	}
	cn, err := reader(ctx, &e.target, e.stderr)
	if err != nil {
		return nil, err
	}
	defer cn.close()
	return allEvents(ctx, cn.runs, arg, 0)
}

func paren(s string) string {
	if s == "" {
		return ""
	}
	return "(" + s + ")"
}

// allEvents reads every event of a run after a sequence, page by page.
func allEvents(ctx context.Context, runs reinv1.RunServiceClient, runID string, after uint64) ([]*reinv1.Event, error) {
	var out []*reinv1.Event
	req := &reinv1.ListEventsRequest{RunId: runID, AfterSequence: after, PageSize: 10000}
	for {
		resp, err := runs.ListEvents(ctx, req)
		if err != nil {
			return nil, err
		}
		out = append(out, resp.GetEvents()...)
		if resp.GetNextPageToken() == "" {
			return out, nil
		}
		req.PageToken = resp.GetNextPageToken()
	}
}

func newEventsCmd(e *env) *cobra.Command {
	var after uint64
	cmd := &cobra.Command{
		Use: "events RUN_ID|FILE",
		Example: `  rein events run_01M8…
  rein events run_01M8… --json | jq -c 'select(.model_returned)'`,
		Short: "Print a run's events, or an export file's (NDJSON with --json, one event a line)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if isExportFile(args[0]) {
				evs, err := fileEvents(args[0], after)
				if err != nil {
					return err
				}
				return printEvents(e.stdout, e.json, evs)
			}
			cn, err := reader(ctx, &e.target, e.stderr)
			if err != nil {
				return err
			}
			defer cn.close()
			req := &reinv1.ListEventsRequest{RunId: args[0], AfterSequence: after, PageSize: 1000}
			for {
				resp, err := cn.runs.ListEvents(ctx, req)
				if err != nil {
					return err
				}
				if err := printEvents(e.stdout, e.json, resp.GetEvents()); err != nil {
					return err
				}
				if resp.GetNextPageToken() == "" {
					return nil
				}
				req.PageToken = resp.GetNextPageToken()
			}
		},
	}
	cmd.Flags().Uint64Var(&after, "after", 0, "only events with a greater sequence")
	return cmd
}

// printEvents prints events as `events` does: NDJSON with --json, else one
// line each.
func printEvents(w io.Writer, json bool, evs []*reinv1.Event) error {
	for _, ev := range evs {
		var err error
		if json {
			err = writeJSON(w, eventJSON(ev), false)
		} else {
			_, err = fmt.Fprintln(w, eventLine(ev))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func newListCmd(e *env) *cobra.Command {
	var statuses, labels []string
	var limit int
	var after, parent string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List runs, newest first",
		Long: `List runs, newest first: all of them, or those in --status and carrying every
--label. When more runs match than --limit, stderr gives the cursor of the rest
(rein list --after CURSOR, with the same filter).`,
		Example: `  rein list
  rein list --status needs_approval --output json
  rein list --label team=billing --label env=prod --limit 20
  rein list --label team=billing --limit 20 --after CURSOR
  rein list --parent run_01M8…`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			st, err := parseStatuses(statuses)
			if err != nil {
				return err
			}
			req := &reinv1.ListRunsRequest{Statuses: st, PageToken: after, ParentRunId: parent}
			for _, kv := range labels {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return usageError("--label %q: expected KEY=VALUE", kv)
				}
				if req.Labels == nil {
					req.Labels = map[string]string{}
				}
				req.Labels[k] = v
			}
			if limit <= 0 {
				return usageError("--limit must be positive")
			}
			var runs []summary
			if _, err := os.Stat(e.db); err == nil || e.server != "" {
				cn, err := reader(ctx, &e.target, e.stderr)
				if err != nil {
					return err
				}
				defer cn.close()
				var next string
				if runs, next, err = listRuns(ctx, cn.runs, req, limit); err != nil {
					return err
				}
				if next != "" {
					fmt.Fprintf(e.stderr, "rein: more runs: rein list --after %s (with the same --status and --label)\n", next)
				}
			} else if after != "" {
				return usageError("--after %q: no runs to page through (no store at %s)", after, e.db)
			}
			if e.json {
				return writeJSON(e.stdout, runs, false)
			}
			w := tabwriter.NewWriter(e.stdout, 0, 2, 2, ' ', 0)
			fmt.Fprintln(w, "RUN_ID\tSTATUS\tSTEPS\tTOKENS\tUPDATED\tGOAL")
			for _, r := range runs {
				goal := clip(firstLine(r.Goal), 60)
				if r.Archived != "" {
					goal = "(archived: rein inspect " + r.RunID + ")"
				}
				status := r.Status
				if r.QueuePosition > 0 {
					status += fmt.Sprintf(" #%d", r.QueuePosition)
				}
				fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%s\t%s\n", r.RunID, status, r.Steps, r.Tokens, r.UpdatedAt, goal)
			}
			return w.Flush()
		},
	}
	cmd.Flags().StringSliceVar(&statuses, "status", nil, "only runs in these statuses (repeat or comma-separate)")
	cmd.Flags().IntVar(&limit, "limit", 50, "at most this many runs")
	cmd.Flags().StringArrayVar(&labels, "label", nil, "only runs carrying this label, as KEY=VALUE; repeatable (all must match)")
	cmd.Flags().StringVar(&after, "after", "", "the cursor a previous rein list printed on stderr: the runs after those it listed")
	cmd.Flags().StringVar(&parent, "parent", "", "only the runs this run delegated to (its children)")
	return cmd
}

// listRuns pages through ListRuns and returns up to limit summaries (an
// empty list, not nil, when there are none) and the cursor of the runs
// after them ("" when there are none).
func listRuns(ctx context.Context, runs reinv1.RunServiceClient, req *reinv1.ListRunsRequest, limit int) ([]summary, string, error) {
	got, next, err := listRunProtos(ctx, runs, req, limit)
	if err != nil {
		return nil, "", err
	}
	out := make([]summary, 0, len(got))
	for _, r := range got {
		out = append(out, summarize(r))
	}
	return out, next, nil
}

// listRunProtos is listRuns with the runs as the server gave them.
func listRunProtos(ctx context.Context, runs reinv1.RunServiceClient, req *reinv1.ListRunsRequest, limit int) ([]*reinv1.Run, string, error) {
	var out []*reinv1.Run
	for len(out) < limit {
		req.PageSize = int32(min(limit-len(out), 1000))
		resp, err := runs.ListRuns(ctx, req)
		if err != nil {
			return nil, "", err
		}
		out = append(out, resp.GetRuns()...)
		if resp.GetNextPageToken() == "" {
			return out, "", nil
		}
		req.PageToken = resp.GetNextPageToken()
	}
	return out, req.GetPageToken(), nil
}

// parseStatuses reads --status values: names, repeated or comma-separated.
func parseStatuses(values []string) ([]reinv1.RunStatus, error) {
	var out []reinv1.RunStatus
	for _, v := range values {
		for _, n := range strings.Split(v, ",") {
			s, ok := runstate.ParseStatus(strings.TrimSpace(n))
			if !ok {
				return nil, usageError("--status %q: not a status; use running, needs_input, needs_approval, completed, budget_exhausted, failed, denied, expired or cancelled", n)
			}
			out = append(out, s)
		}
	}
	return out, nil
}

func clip(s string, n int) string {
	if len([]rune(s)) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

// prefixLine says how much of each model call's input began with the
// previous call's, byte for byte (model_requested.prefix_bytes), and the
// caching the last call asked for; "" for a run of fewer than two calls.
func prefixLine(evs []*reinv1.Event) string {
	var last *reinv1.ModelRequested
	var calls, bytes, tokens uint64
	for _, ev := range evs {
		if mr := ev.GetModelRequested(); mr != nil {
			if last != nil {
				calls++
				bytes += mr.GetPrefixBytes()
				tokens += mr.GetPrefixTokens()
			}
			last = mr
		}
	}
	if calls == 0 {
		return ""
	}
	line := fmt.Sprintf("last call %d bytes (~%d tokens) of the previous call's input; %d bytes (~%d tokens) a call on average",
		last.GetPrefixBytes(), last.GetPrefixTokens(), bytes/calls, tokens/calls)
	if ttl := last.GetCacheTtl(); ttl != nil {
		line += fmt.Sprintf("; cached for %s at breakpoints %v", ttl.AsDuration(), last.GetCacheBreakpoints())
	} else {
		line += "; no caching asked"
	}
	return line
}

// toolLines are the definitions of the granted tools the run holds, the
// digest of the server's policy at its start, and each change of a tool
// met under the run (docs/upgrading.md, "When a tool changes under a run"). A run recorded before rein
// kept digests has none: its tools are not checked.
func toolLines(w io.Writer, run *reinv1.Run, evs []*reinv1.Event) {
	if d := run.GetPolicyDigest(); d != "" {
		fmt.Fprintf(w, "digest\tpolicy %s\n", d)
	}
	for _, d := range run.GetToolDigests() {
		line := fmt.Sprintf("%s %s", d.GetName(), d.GetDigest())
		var notes []string
		if s := d.GetServer(); s != "" {
			notes = append(notes, "served by "+s)
		}
		if t := d.GetTier(); t != reinv1.ToolTier_TOOL_TIER_UNSPECIFIED {
			notes = append(notes, "declares "+policy.TierName(t))
		}
		if len(notes) > 0 {
			line += " (" + strings.Join(notes, ", ") + ")"
		}
		fmt.Fprintf(w, "tool\t%s\n", line)
	}
	for _, ev := range evs {
		switch {
		case ev.GetToolChanged() != nil, ev.GetToolAdopted() != nil:
			fmt.Fprintf(w, "tool event\t#%d %s\n", ev.GetSequence(), eventkind.Summary(ev))
		}
	}
}
