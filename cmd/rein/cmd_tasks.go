package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// newTasksCmd is `rein tasks [NAME]`: the catalog's tasks the caller may
// start (ListTasks), or one of them with its input schema (GetTask).
func newTasksCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "tasks [NAME]",
		Short: "List the catalog's tasks you may start (rein serve --tasks), or show one",
		Long: `List the tasks of the server's catalog (rein serve --tasks DIR) that your
principal may start: those naming your tenant (or none) and a role you hold
(or none). With NAME, show that task with its input schema. --json prints
the tasks as the API gives them.`,
		Example: `  rein tasks --server rein.internal:7233
  rein tasks refund --server rein.internal:7233 --json`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if e.server == "" {
				return usageError("the catalog of tasks is a server's (rein serve --tasks DIR): give --server ADDR")
			}
			ctx := cmd.Context()
			cn, err := connect(ctx, &e.target, e.stderr, nil)
			if err != nil {
				return err
			}
			defer cn.close()
			if len(args) == 1 {
				resp, err := cn.runs.GetTask(ctx, &reinv1.GetTaskRequest{Name: args[0]})
				if err != nil {
					return err
				}
				if e.json {
					return writeJSON(e.stdout, protoJSON(resp.GetTask()), false)
				}
				t := resp.GetTask()
				fmt.Fprintf(e.stdout, "%s\n  %s\n  digest: %s\n", t.GetName(), t.GetDescription(), t.GetDigest())
				if t.GetInputSchema() != nil {
					return writeJSON(e.stdout, protoJSON(t.GetInputSchema()), true)
				}
				return nil
			}
			resp, err := cn.runs.ListTasks(ctx, &reinv1.ListTasksRequest{})
			if err != nil {
				return err
			}
			if e.json {
				out := []any{}
				for _, t := range resp.GetTasks() {
					out = append(out, protoJSON(t))
				}
				return writeJSON(e.stdout, out, false)
			}
			w := tabwriter.NewWriter(e.stdout, 0, 2, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tDESCRIPTION")
			for _, t := range resp.GetTasks() {
				fmt.Fprintf(w, "%s\t%s\n", t.GetName(), t.GetDescription())
			}
			return w.Flush()
		},
	}
}
