package policy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/pelletier/go-toml/v2"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/configfile"
)

// Server is the server's own rules (rein serve --policy FILE), each for
// some tenants and tools, decided before a contract's.
type Server struct {
	rules []serverRule
}

type serverRule struct {
	Rule
	tenants, tools []string
}

// fileShape is the TOML shape of a policy file: a list of [[rules]].
type fileShape struct {
	Rules []fileRule `toml:"rules"`
}

type fileRule struct {
	Name      string   `toml:"name"`
	Tenants   []string `toml:"tenants"`
	Tools     []string `toml:"tools"`
	Effect    string   `toml:"effect"`
	When      string   `toml:"when"`
	Message   string   `toml:"message"`
	Approvals uint32   `toml:"approvals"`
}

// FileError is a refused policy file: the file, the line (0 when not
// known) and what is wrong.
type FileError = configfile.Error

// Effects are the effects a policy file writes, by name.
var effects = map[string]reinv1.PolicyEffect{
	"allow": reinv1.PolicyEffect_POLICY_EFFECT_ALLOW,
	"ask":   reinv1.PolicyEffect_POLICY_EFFECT_ASK,
	"deny":  reinv1.PolicyEffect_POLICY_EFFECT_DENY,
}

// LoadFile reads and parses the policy file at path: a regular file of at
// most 1 MiB, mode 0600 or stricter (configfile.Read).
func LoadFile(p string) (*Server, error) {
	data, err := configfile.Read(p, "a policy file")
	if err != nil {
		return nil, err
	}
	return ParseFile(p, data)
}

// ParseFile parses a policy file's data; name is the file in errors, each
// of which is a *FileError naming the line of the rule at fault.
func ParseFile(name string, data []byte) (*Server, error) {
	var f fileShape
	dec := toml.NewDecoder(bytes.NewReader(data)).DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, decodeError(name, err)
	}
	at := ruleLines(data)
	line := func(i int) int {
		if i < len(at) {
			return at[i]
		}
		return 0
	}
	s := &Server{}
	seen := map[string]bool{}
	for i, fr := range f.Rules {
		fail := func(msg string) error {
			return &FileError{File: name, Line: line(i), Msg: fmt.Sprintf("rule %d (%q): %s", i+1, fr.Name, msg)}
		}
		effect, ok := effects[fr.Effect]
		if !ok {
			return nil, fail(fmt.Sprintf("effect %q; want \"allow\", \"ask\" or \"deny\"", fr.Effect))
		}
		if seen[fr.Name] && fr.Name != "" {
			return nil, fail("a second rule by this name: give each rule its own, so that a decision names one")
		}
		seen[fr.Name] = true
		for _, t := range fr.Tools {
			if _, err := path.Match(t, ""); err != nil || t == "" {
				return nil, fail(fmt.Sprintf("tools: %q is not a tool name or pattern (such as \"refunds.*\")", t))
			}
		}
		r, err := compileRule(fr.Name, effect, fr.When, fr.Message, fr.Approvals)
		if err != nil {
			return nil, fail(err.Error())
		}
		s.rules = append(s.rules, serverRule{Rule: r, tenants: fr.Tenants, tools: fr.Tools})
	}
	return s, nil
}

// ruleLines are the lines of the file's [[rules]] headers, in order.
func ruleLines(data []byte) []int {
	var out []int
	for i, l := range strings.Split(string(data), "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "[[") && strings.Trim(strings.TrimSuffix(strings.TrimPrefix(l, "[["), "]]"), " ") == "rules" {
			out = append(out, i+1)
		}
	}
	return out
}

func decodeError(name string, err error) error {
	var se *toml.StrictMissingError
	if errors.As(err, &se) && len(se.Errors) > 0 {
		e := se.Errors[0]
		row, _ := e.Position()
		return &FileError{File: name, Line: row, Msg: fmt.Sprintf("unknown key %q; a rule's keys are name, tenants, tools, effect, when, message and approvals", strings.Join(e.Key(), "."))}
	}
	var de *toml.DecodeError
	if errors.As(err, &de) {
		row, _ := de.Position()
		return &FileError{File: name, Line: row, Msg: strings.TrimPrefix(de.Error(), "toml: ")}
	}
	return &FileError{File: name, Msg: err.Error()}
}

// Len is how many rules the file holds.
func (s *Server) Len() int {
	if s == nil {
		return 0
	}
	return len(s.rules)
}

// applies reports whether r is for tenant and tool: a rule with no tenants
// is for every tenant, one with no tools for every tool.
func (r serverRule) applies(tenant, tool string) bool {
	if len(r.tenants) > 0 && !slices.Contains(r.tenants, tenant) {
		return false
	}
	if len(r.tools) == 0 {
		return true
	}
	for _, pat := range r.tools {
		if ok, _ := path.Match(pat, tool); ok {
			return true
		}
	}
	return false
}

// Decide is the decision of the first of the server's rules for the run's
// tenant and the call's tool that matches; nil when none does.
func (s *Server) Decide(ctx context.Context, call Call, run *reinv1.PolicyRun) *reinv1.PolicyDecided {
	if s.Len() == 0 {
		return nil
	}
	in := newInput(call, run)
	var rs Rules
	for _, r := range s.rules {
		if r.applies(in.run.GetTenant(), call.Tool) {
			rs = append(rs, r.Rule)
		}
	}
	return rs.decide(ctx, in, reinv1.PolicySource_POLICY_SOURCE_SERVER)
}

// Holder holds the server's policy file and reloads it on request (on
// SIGHUP). Readers take the rules in force without a lock; a reload swaps
// in a whole new set, or, when the file is refused, keeps the set in force.
type Holder struct {
	path string
	cur  atomic.Pointer[Server]
	mu   sync.Mutex
}

// NewHolder loads the policy file at path. With path "" there are no
// server rules, and Reload does nothing.
func NewHolder(p string) (*Holder, error) {
	h := &Holder{path: p}
	s := &Server{}
	if p != "" {
		var err error
		if s, err = LoadFile(p); err != nil {
			return nil, err
		}
	}
	h.cur.Store(s)
	return h, nil
}

// Path is the file's path ("" for none).
func (h *Holder) Path() string { return h.path }

// Current is the rules in force.
func (h *Holder) Current() *Server {
	if h == nil {
		return nil
	}
	return h.cur.Load()
}

// Decide decides call by the rules in force (Server.Decide).
func (h *Holder) Decide(ctx context.Context, call Call, run *reinv1.PolicyRun) *reinv1.PolicyDecided {
	return h.Current().Decide(ctx, call, run)
}

// Reload reads the file again. When it is refused, the rules in force
// stay and the error says why; otherwise the new rules are in force when
// it returns.
func (h *Holder) Reload() (*Server, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.path == "" {
		return h.Current(), nil
	}
	s, err := LoadFile(h.path)
	if err != nil {
		return nil, err
	}
	h.cur.Store(s)
	return s, nil
}

// EffectWord is an effect as a policy file writes it.
func EffectWord(e reinv1.PolicyEffect) string {
	for w, v := range effects {
		if v == e {
			return w
		}
	}
	return ""
}
