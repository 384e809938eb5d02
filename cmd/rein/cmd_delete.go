package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
)

// deletion is the JSON rein delete and rein deletions print for a record.
type deletion struct {
	RunID     string `json:"run_id"`
	Tenant    string `json:"tenant"`
	DeletedBy string `json:"deleted_by"`
	DeletedAt string `json:"deleted_at"`
	Reason    string `json:"reason"`
	Status    string `json:"status"`
	Archived  bool   `json:"archived"`
}

func deletionOf(d *reinv1.RunDeletion) deletion {
	return deletion{
		RunID: d.GetRunId(), Tenant: d.GetTenant(), DeletedBy: d.GetDeletedBy(), Reason: d.GetReason(),
		DeletedAt: timeText(d.GetDeletedAt().AsTime(), d.GetDeletedAt() != nil),
		Status:    runstate.StatusName(d.GetStatus()), Archived: d.GetArchived(),
	}
}

func newDeleteCmd(e *env) *cobra.Command {
	var reason string
	var tree bool
	cmd := &cobra.Command{
		Use: "delete RUN_ID --reason TEXT",
		Example: `  rein delete run_01M8… --reason "erasure request #4711"
  rein delete run_01M8… --reason "customer left" --tree`,
		Short: "Erase a run that ended, wholly, leaving a deletion record (admin; one deleted already: exit 0)",
		Long: `Erase a run that ended: its log, blobs and snapshot in the live store, or its
stub and its archived export, leaving only a deletion record with no content
(rein deletions). A run that has not ended is refused (cancel it first), and so
is a child whose parent has not ended; --tree deletes a whole tree from its
root. Deleting a deleted run prints its record and changes nothing. It needs
the admin role.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if reason == "" {
				return usageError("--reason is required: say why the run is deleted (it is kept in the deletion record)")
			}
			ctx := cmd.Context()
			cn, err := changer(ctx, &e.target, e.stderr)
			if err != nil {
				return err
			}
			defer cn.close()
			var recs []*reinv1.RunDeletion
			err = cn.retry(ctx, func(ctx context.Context) error {
				resp, err := cn.runs.DeleteRun(ctx, &reinv1.DeleteRunRequest{RunId: args[0], Reason: reason, Tree: tree})
				recs = resp.GetDeletions()
				return err
			})
			if err != nil {
				return err
			}
			return printDeletions(e, recs, "")
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why; kept in the deletion record (required)")
	cmd.Flags().BoolVar(&tree, "tree", false, "delete the run's whole tree: its root and every run delegated under it")
	e.commandTimeoutFlag(cmd)
	return cmd
}

func newDeletionsCmd(e *env) *cobra.Command {
	var limit int
	var after string
	cmd := &cobra.Command{
		Use:     "deletions",
		Example: `  rein deletions --json`,
		Short:   "List the deletion records, newest first (admin)",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit <= 0 || limit > 1000 {
				return usageError("--limit %d: give 1 to 1000", limit)
			}
			ctx := cmd.Context()
			cn, err := changer(ctx, &e.target, e.stderr)
			if err != nil {
				return err
			}
			defer cn.close()
			resp, err := cn.runs.ListDeletions(ctx, &reinv1.ListDeletionsRequest{PageSize: int32(limit), PageToken: after})
			if err != nil {
				return err
			}
			return printDeletions(e, resp.GetDeletions(), resp.GetNextPageToken())
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 50, "at most this many records")
	cmd.Flags().StringVar(&after, "after", "", "the cursor a previous rein deletions printed on stderr")
	e.commandTimeoutFlag(cmd)
	return cmd
}

func printDeletions(e *env, recs []*reinv1.RunDeletion, next string) error {
	out := make([]deletion, len(recs))
	for i, r := range recs {
		out[i] = deletionOf(r)
	}
	if next != "" {
		fmt.Fprintf(e.stderr, "rein: more records: rein deletions --after %s\n", next)
	}
	if e.json {
		return writeJSON(e.stdout, out, false)
	}
	w := tabwriter.NewWriter(e.stdout, 0, 2, 2, ' ', 0)
	fmt.Fprintln(w, "RUN_ID\tSTATUS\tDELETED_AT\tBY\tREASON")
	for _, d := range out {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", d.RunID, d.Status, d.DeletedAt, d.DeletedBy, clip(firstLine(d.Reason), 60))
	}
	return w.Flush()
}
