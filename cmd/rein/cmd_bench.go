package main

import "github.com/spf13/cobra"

func newBenchCmd(e *env) *cobra.Command {
	return &cobra.Command{Use: "bench SCENARIO", Hidden: true}
}
