package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/version"
)

func newVersionCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print rein's version, the revision it was built from, and with --server the server's",
		Long: `Print this rein's version: the module version (or "(devel)" for a build from a
checkout), the VCS revision and its time, whether the tree had changes, the Go
version and the API version. With --server, the server's too (GetServerInfo,
which any principal may call), with the store format it writes now and
the formats its build reads and writes (docs/upgrading.md). --json prints
{"client": …, "server": …, "server_formats": …}.`,
		Example: `  rein version
  rein version --server rein.internal:7233 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			local := version.Get()
			var remote *reinv1.BuildInfo
			var formats *reinv1.ServerFormats
			if e.server != "" {
				c, err := connect(cmd.Context(), &e.target, e.stderr, nil)
				if err != nil {
					return err
				}
				defer c.close()
				resp, err := c.runs.GetServerInfo(cmd.Context(), &reinv1.GetServerInfoRequest{})
				if err != nil {
					return err
				}
				remote, formats = resp.GetBuild(), resp.GetFormats()
			}
			if e.json {
				out := map[string]any{"client": protoJSON(local)}
				if remote != nil {
					out["server"] = protoJSON(remote)
				}
				if formats != nil {
					out["server_formats"] = protoJSON(formats)
				}
				return writeJSON(e.stdout, out, true)
			}
			if remote == nil {
				fmt.Fprintln(e.stdout, version.String(local))
				return nil
			}
			fmt.Fprintf(e.stdout, "client: %s\nserver: %s (%s)\n", version.String(local), version.String(remote), e.server)
			if formats != nil {
				fmt.Fprintf(e.stdout, "server store format: active %d; its build reads %s, writes %s\n",
					formats.GetActive(), rangeText(formats.GetBuild().GetReads()), rangeText(formats.GetBuild().GetWrites()))
				if off := formats.GetFeaturesOff(); len(off) > 0 {
					fmt.Fprintf(e.stdout, "server features off until a newer store format is active: %s\n", strings.Join(off, ", "))
				}
			}
			return nil
		},
	}
}
