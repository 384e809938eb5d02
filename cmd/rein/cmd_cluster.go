package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

func newClusterCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Show and finalize the store format of the servers sharing a store",
		Long: `The store format is one number, bumped whenever a rein release writes
something an older one cannot read (docs/upgrading.md). Each server says
which formats its build reads and writes; the store's active format is the
one every server writes now. A newer format becomes active once it is
finalized: by the servers themselves once every live server has run a build
that writes it for --finalize-after, or at once with rein cluster finalize.
Both commands need the admin role.`,
		Example: `  rein cluster status --server rein.internal:7233
  rein cluster finalize --server rein.internal:7233`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newClusterStatusCmd(e), newClusterFinalizeCmd(e))
	return cmd
}

func newClusterStatusCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "List the live servers with their builds and store formats, and the store's active format",
		Long: `List the live servers sharing the store, with each one's build, the store
formats it reads and writes, the runs it drives and how long it has held its
lease; then the store's active format and whether a finalization is pending
(and what blocks it). On a bbolt store it lists the one server. --json
prints GetClusterStatusResponse.`,
		Example: `  rein cluster status --server rein.internal:7233
  rein cluster status --server rein.internal:7233 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := reader(cmd.Context(), &e.target, e.stderr)
			if err != nil {
				return err
			}
			defer c.close()
			resp, err := c.Cluster.GetClusterStatus(cmd.Context(), &reinv1.GetClusterStatusRequest{})
			if err != nil {
				return err
			}
			if e.json {
				return writeJSON(e.stdout, protoJSON(resp), true)
			}
			printClusterStatus(e.stdout, resp, time.Now())
			return nil
		},
	}
}

func newClusterFinalizeCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "finalize",
		Short: "Make the newest format every live server writes the store's active one now",
		Long: `Finalize the pending store format now, without waiting for the servers'
--finalize-after: the newest format every live server writes becomes the
store's active one. From then on a build that cannot write it refuses to
start on the store (exit 2): a downgrade past it is no longer possible.
Nothing is done when nothing is pending. Refused (exit 1) while a live
server's name key cannot be read or believed; rein cluster status names it.`,
		Example: `  rein cluster finalize --server rein.internal:7233`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := connect(cmd.Context(), &e.target, e.stderr, nil)
			if err != nil {
				return err
			}
			defer c.close()
			resp, err := c.Cluster.FinalizeCluster(cmd.Context(), &reinv1.FinalizeClusterRequest{})
			if err != nil {
				return err
			}
			if e.json {
				return writeJSON(e.stdout, protoJSON(resp), false)
			}
			if resp.GetFromFormat() == resp.GetToFormat() {
				fmt.Fprintf(e.stdout, "nothing to finalize: the store's active format is %d, and no newer one is written by every live server\n", resp.GetToFormat())
				return nil
			}
			fmt.Fprintf(e.stdout, "finalized: the store's active format is now %d (was %d)\n", resp.GetToFormat(), resp.GetFromFormat())
			return nil
		},
	}
}

func rangeText(r *reinv1.FormatRange) string {
	if r.GetMin() == r.GetMax() {
		return fmt.Sprint(r.GetMax())
	}
	return fmt.Sprintf("%d..%d", r.GetMin(), r.GetMax())
}

// printClusterStatus prints a status as a table of servers, then the
// store's format.
func printClusterStatus(w io.Writer, s *reinv1.GetClusterStatusResponse, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVER\tBUILD\tREADS\tWRITES\tRUNS\tLEASED FOR\t")
	for _, r := range s.GetReplicas() {
		name := r.GetName()
		if name == "" {
			name = "(this server)"
		} else if r.GetSelf() {
			name += " (this server)"
		}
		build := r.GetBuild()
		if r.GetLegacy() {
			build = "(a build from before store formats)"
		}
		reads, writes := rangeText(r.GetFormats().GetReads()), rangeText(r.GetFormats().GetWrites())
		if r.GetError() != "" {
			reads, writes = "?", "?"
		}
		runs := "?"
		if r.GetRunsDriven() >= 0 {
			runs = fmt.Sprint(r.GetRunsDriven())
		}
		age := "?"
		if r.GetLeased() != nil {
			age = now.Sub(r.GetLeased().AsTime()).Round(time.Second).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", name, build, reads, writes, runs, age)
	}
	_ = tw.Flush()
	for _, r := range s.GetReplicas() {
		if r.GetError() != "" {
			fmt.Fprintf(w, "server %q: not believed: %s\n", r.GetName(), r.GetError())
		}
	}
	how := "never finalized"
	if s.GetFinalized() {
		how = "finalized"
	}
	if s.GetBackend() == "bbolt" {
		how = "recorded in the file"
	}
	fmt.Fprintf(w, "store: %s, active format %d (%s)\n", s.GetBackend(), s.GetActiveFormat(), how)
	switch {
	case s.GetBlocked() != "":
		fmt.Fprintf(w, "finalization: blocked: %s\n", s.GetBlocked())
	case s.GetFinalizationPending():
		when := "only with rein cluster finalize (--finalize-after 0)"
		if d := s.GetFinalizeAfter().AsDuration(); d > 0 {
			when = fmt.Sprintf("automatic once every live server has written it for %s", d)
			if t := s.GetPendingSince(); t != nil {
				when += fmt.Sprintf(" (pending for %s)", now.Sub(t.AsTime()).Round(time.Second))
			}
		}
		fmt.Fprintf(w, "finalization: pending, to format %d: %s\n", s.GetTargetFormat(), when)
	default:
		fmt.Fprintln(w, "finalization: none pending")
	}
	if off := s.GetFeaturesOff(); len(off) > 0 {
		fmt.Fprintf(w, "features off until a newer format is active: %s\n", strings.Join(off, ", "))
	}
}
