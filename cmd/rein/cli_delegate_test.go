package main

import (
	"strings"
	"testing"
)

// TestDelegateExampleTree runs the delegation example and reads its tree
// back: inspect --tree, list --parent, export --tree, and evaluate, whose
// tokens count over the tree.
func TestDelegateExampleTree(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	out := decodeOne(t, cli(t, append(exampleRun("delegate", db), "--json")...).mustExit(t, exitOK).stdout)
	runID := out["run_id"].(string)

	tree := decodeOne(t, cli(t, "inspect", runID, "--tree", "--db", db, "--json").mustExit(t, exitOK).stdout)
	kids, _ := tree["children"].([]any)
	if len(kids) != 2 {
		t.Fatalf("tree has %d children, want 2: %v", len(kids), tree)
	}
	spent := obj(t, tree["tree"], "tree")
	own := num(t, tree["tokens"], "tokens")
	if runs := num(t, spent["runs"], "tree.runs"); runs != 3 || num(t, spent["tokens"], "tree.tokens") <= own {
		t.Fatalf("tree spend %v (own tokens %d): want 3 runs and more tokens than the root's own", spent, own)
	}
	list := cli(t, "list", "--parent", runID, "--db", db, "--json").mustExit(t, exitOK).stdout
	for _, k := range kids {
		mustContain(t, "list --parent", list, obj(t, k, "child")["run_id"].(string))
	}
	// Its twin: a run with no children lists none.
	child := obj(t, kids[0], "child")["run_id"].(string)
	if got := strings.TrimSpace(cli(t, "list", "--parent", child, "--db", db, "--json").mustExit(t, exitOK).stdout); got != "[]" {
		t.Fatalf("list --parent of a leaf: %s", got)
	}
	text := cli(t, "inspect", runID, "--db", db).mustExit(t, exitOK).stdout
	mustContain(t, "inspect", text, "children    2 started, 0 open", "tree spend")

	file := writeFile(t, "tree.rein", "")
	cli(t, "export", runID, "--tree", "--db", db, "-o", file).mustExit(t, exitOK)
	mustContain(t, "inspect of the export", cli(t, "inspect", file).mustExit(t, exitOK).stdout, runID)
	// --tree reads a stored run, not a file.
	cli(t, "inspect", file, "--tree").mustExit(t, exitUsage)

	suite := writeFile(t, "suite.json", `{"cases": [`+exampleCase(t, "delegate", `{"status": "completed"}`)+`]}`)
	rep := decodeOne(t, cli(t, "evaluate", suite, "--json", "--db", newDB(t)).mustExit(t, exitOK).stdout)
	trial := obj(t, evalCases(t, rep)["delegate"]["trial_results"].([]any)[0], "trial")
	if got := num(t, trial["tokens"], "trial tokens"); got != num(t, spent["tokens"], "tree tokens") {
		t.Fatalf("evaluate counted %d tokens, want the tree's %d", got, num(t, spent["tokens"], "tree tokens"))
	}
}
