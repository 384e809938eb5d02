package model

import (
	"fmt"
	"strings"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// ToolNames maps a run's granted tool names to names a provider accepts
// (^[a-zA-Z0-9_-]{1,64}$, as OpenAI's functions and Anthropic's tools
// require) and back.
type ToolNames struct {
	toWire   map[string]string
	fromWire map[string]string
}

// Wire is the name tool is sent under. A tool no grant names (a call the
// harness refused) is only ever history, so it needs no way back.
func (n *ToolNames) Wire(tool string) string {
	if w, ok := n.toWire[tool]; ok {
		return w
	}
	if validToolName(tool) {
		return tool
	}
	return unique(Sanitize(tool), maxToolName, nil)
}

// Contract is the granted name a wire name stands for (itself when none).
func (n *ToolNames) Contract(wire string) string {
	if t, ok := n.fromWire[wire]; ok {
		return t
	}
	return wire
}

// Granted says whether tool is one of the run's grants.
func (n *ToolNames) Granted(tool string) bool {
	_, ok := n.toWire[tool]
	return ok
}

// maxToolName is the longest tool name the providers accept.
const maxToolName = 64

// NewToolNames gives each grant a name the providers accept
// (^[a-zA-Z0-9_-]{1,64}$): a name that is not one has every other character
// replaced by "_" (so "kb.write" becomes "kb_write"), is cut to 64, and gets
// a "_2", "_3"… suffix if that clashes with another tool's name.
// reserved are names the provider also offers (ask_human), which no
// mapped name may take.
func NewToolNames(grants []*reinv1.ToolGrant, reserved ...string) *ToolNames {
	n := &ToolNames{toWire: map[string]string{}, fromWire: map[string]string{}}
	taken := map[string]bool{}
	for _, r := range reserved {
		taken[r] = true
	}
	for _, g := range grants {
		taken[g.GetName()] = true
	}
	for _, g := range grants {
		name := g.GetName()
		w := name
		if !validToolName(name) {
			w = unique(Sanitize(name), maxToolName, taken)
			taken[w] = true
		}
		n.toWire[name] = w
		n.fromWire[w] = name
	}
	return n
}

func validToolName(s string) bool {
	return s != "" && len(s) <= maxToolName && Sanitize(s) == s
}

// Sanitize replaces every character outside [a-zA-Z0-9_-] with "_".
func Sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			return r
		}
		return '_'
	}, s)
}

// unique returns base, cut to max bytes, or with the first "_N" suffix that
// is not taken. base is ASCII.
func unique(base string, max int, taken map[string]bool) string {
	if base == "" {
		base = "tool"
	}
	if len(base) > max {
		base = base[:max]
	}
	if !taken[base] {
		return base
	}
	for i := 2; ; i++ {
		suffix := fmt.Sprintf("_%d", i)
		b := base
		if len(b)+len(suffix) > max {
			b = b[:max-len(suffix)]
		}
		if !taken[b+suffix] {
			return b + suffix
		}
	}
}
