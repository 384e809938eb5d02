package main

import (
	"regexp"
	"strings"
	"testing"
)

// TestEveryCommandHasExamples: each command's --help has an Examples
// section, and every --flag an example types is one the command has (so the
// examples cannot drift from the flags).
func TestEveryCommandHasExamples(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	root := cli(t, "--help").mustExit(t, exitOK).stdout
	var cmds []string
	for _, m := range regexp.MustCompile(`(?m)^  (\w+)\s{2,}`).FindAllStringSubmatch(root, -1) {
		if m[1] != "help" && m[1] != "completion" {
			cmds = append(cmds, m[1])
		}
	}
	if len(cmds) < 20 {
		t.Fatalf("only %d commands in rein --help:\n%s", len(cmds), root)
	}
	flagRe := regexp.MustCompile(`(?:^|\s)--([a-z][a-z-]*)`)
	for _, c := range append(cmds, "config set", "config use", "config delete") {
		help := cli(t, append(strings.Fields(c), "--help")...).mustExit(t, exitOK).stdout
		i := strings.Index(help, "Examples:\n")
		if i < 0 {
			t.Errorf("rein %s --help has no examples", c)
			continue
		}
		examples := help[i:]
		if j := strings.Index(examples, "\nFlags:"); j >= 0 {
			examples = examples[:j]
		}
		for _, m := range flagRe.FindAllStringSubmatch(examples, -1) {
			if !strings.Contains(help, "--"+m[1]+" ") && !strings.Contains(help, "--"+m[1]+"\n") {
				t.Errorf("rein %s: an example types --%s, which the command does not have", c, m[1])
			}
		}
	}
}
