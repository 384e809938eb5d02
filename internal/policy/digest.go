package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// Digest is the digest of the server's rules: the hex SHA-256 of the
// canonical JSON (encoding/json's) of each rule's name, tenants, tools,
// effect, condition, message and approvals, in order. Comments and layout
// of the file are not part of it; a file with no rules, and no file, have
// the digest of an empty list.
func (s *Server) Digest() string {
	type rule struct {
		Name      string   `json:"name"`
		Tenants   []string `json:"tenants"`
		Tools     []string `json:"tools"`
		Effect    string   `json:"effect"`
		When      string   `json:"when"`
		Message   string   `json:"message"`
		Approvals uint32   `json:"approvals"`
	}
	rules := []rule{}
	if s != nil {
		for _, r := range s.rules {
			rules = append(rules, rule{Name: r.Name, Tenants: r.tenants, Tools: r.tools, Effect: EffectWord(r.Effect),
				When: r.When, Message: r.Message, Approvals: r.Approvals})
		}
	}
	b, _ := json.Marshal(rules) // strings, lists and numbers only: never fails
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Digester is a Decider that names the digest of the rules it decides by
// (a replay's recording, which knows the rules only by their digests).
type Digester interface {
	// Digest is the digest of the rules in force now.
	Digest() string
	// DigestFor is the digest of the rules that decide call.
	DigestFor(call Call) string
}

// Digest is the digest of the server's rules in force now ("" when the
// checker's server rules cannot name one).
func (c *Checker) Digest() string {
	if c == nil || c.Server == nil {
		return (*Server)(nil).Digest()
	}
	switch s := c.Server.(type) {
	case *Holder:
		return s.Current().Digest()
	case *Server:
		return s.Digest()
	case Digester:
		return s.Digest()
	}
	return ""
}

// server is the checker's server rules to decide call by, and their
// digest: the rules of a Holder are taken once, so that a reload between
// the decision and its digest cannot make the one name the other's rules.
func (c *Checker) server(call Call) (Decider, string) {
	if c == nil || c.Server == nil {
		return nil, (*Server)(nil).Digest()
	}
	switch s := c.Server.(type) {
	case *Holder:
		cur := s.Current()
		return cur, cur.Digest()
	case *Server:
		return s, s.Digest()
	case Digester:
		return c.Server, s.DigestFor(call)
	}
	return c.Server, ""
}

// DigestFor is the digest of the server's rules a decision on call is
// made under now.
func (c *Checker) DigestFor(call Call) string {
	_, d := c.server(call)
	return d
}
