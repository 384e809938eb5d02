package model

import (
	"testing"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// TestToolNamesMapBothWays: every grant gets a distinct name the providers
// accept, and a call under it maps back; a name that clashes (with another
// grant's mapping or a reserved one) gets a suffix; an unknown wire name
// passes through, so the harness can refuse it.
func TestToolNamesMapBothWays(t *testing.T) {
	grants := []*reinv1.ToolGrant{{Name: "kb.write"}, {Name: "kb_write"}, {Name: "ask.human"}, {Name: "fs.read"}}
	n := NewToolNames(grants, "ask_human")
	seen := map[string]bool{}
	for _, g := range grants {
		w := n.Wire(g.GetName())
		if !validToolName(w) || seen[w] || w == "ask_human" {
			t.Fatalf("%s → %q: not a valid, distinct, unreserved name (seen %v)", g.GetName(), w, seen)
		}
		seen[w] = true
		if back := n.Contract(w); back != g.GetName() {
			t.Fatalf("%s → %q → %q", g.GetName(), w, back)
		}
		if !n.Granted(g.GetName()) {
			t.Fatalf("%s is not granted", g.GetName())
		}
	}
	if n.Wire("kb_write") != "kb_write" {
		t.Fatalf("a valid name was changed to %q", n.Wire("kb_write"))
	}
	if n.Contract("invented") != "invented" || n.Granted("invented") {
		t.Fatal("an invented name did not pass through as ungranted")
	}
}
