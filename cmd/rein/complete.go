package main

import (
	"strings"

	"github.com/spf13/cobra"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// completeRunIDs completes a command's first argument with the IDs of the
// runs in reach (ListRuns, newest first), each described by its status and
// goal. Completion runs no PersistentPreRun, so it resolves the settings
// itself.
func completeRunIDs(e *env) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		if err := e.resolve(cmd.Root(), cmd, true); err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		ctx := cmd.Context()
		cn, err := reader(ctx, &e.target, e.stderr)
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		defer cn.close()
		runs, _, err := listRuns(ctx, cn.runs, &reinv1.ListRunsRequest{}, 200)
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		var out []cobra.Completion
		for _, r := range runs {
			if strings.HasPrefix(r.RunID, toComplete) {
				out = append(out, cobra.CompletionWithDesc(r.RunID, r.Status+" "+clip(r.Goal, 40)))
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}
