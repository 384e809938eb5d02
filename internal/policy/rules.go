// Package policy decides tool calls by rules written in CEL and by policy
// services: a rule of a contract's tool grant, a rule of the server's
// policy file (rein serve --policy), or a team's PolicyService. A decision
// is allow, ask or deny, and names what decided it, so that the engine
// records it as a policy_decided event and a replay can show where another
// policy would decide otherwise (docs/design.md §15).
package policy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// CostLimit bounds what one rule's evaluation may cost, in CEL's cost
// units (about one per operation): a rule that would cost more stops with
// an error, which fails closed, so no rule can hang a run.
const CostLimit = 100_000

// Call is a tool call a policy decides.
type Call struct {
	ID   string
	Tool string
	Tier reinv1.ToolTier
	Args *structpb.Struct
}

// Rule is one compiled rule.
type Rule struct {
	Name, When, Message string
	Effect              reinv1.PolicyEffect
	Approvals           uint32
	prg                 cel.Program
}

// Rules are a list of compiled rules, decided first match first.
type Rules []Rule

var (
	envOnce sync.Once
	env     *cel.Env
	envErr  error
)

// celEnv is the one environment every rule compiles in: args (the call's
// arguments, a map), tool (rein.v1.PolicyTool) and run (rein.v1.PolicyRun),
// with numbers of different types comparable (run.step > 5).
func celEnv() (*cel.Env, error) {
	envOnce.Do(func() {
		env, envErr = cel.NewEnv(
			cel.Types(&reinv1.PolicyTool{}, &reinv1.PolicyRun{}),
			cel.Variable("args", cel.MapType(cel.StringType, cel.DynType)),
			cel.Variable("tool", cel.ObjectType("rein.v1.PolicyTool")),
			cel.Variable("run", cel.ObjectType("rein.v1.PolicyRun")),
			cel.CrossTypeNumericComparisons(true),
		)
	})
	return env, envErr
}

// CompileError is a rule that does not compile: Index is its place in the
// list, Rule its name.
type CompileError struct {
	Index int
	Rule  string
	Err   error
}

func (e *CompileError) Error() string {
	return fmt.Sprintf("rule %q: %v", e.Rule, e.Err)
}

func (e *CompileError) Unwrap() error { return e.Err }

// Compile type-checks and compiles rules. A rule whose condition does not
// parse, names a variable or field that does not exist, or is not a
// boolean is a *CompileError.
func Compile(rules []*reinv1.PolicyRule) (Rules, error) {
	if len(rules) == 0 {
		return nil, nil
	}
	out := make(Rules, 0, len(rules))
	for i, r := range rules {
		c, err := compileRule(r.GetName(), r.GetEffect(), r.GetWhen(), r.GetMessage(), r.GetApprovals())
		if err != nil {
			return nil, &CompileError{Index: i, Rule: r.GetName(), Err: err}
		}
		out = append(out, c)
	}
	return out, nil
}

func compileRule(name string, effect reinv1.PolicyEffect, when, message string, approvals uint32) (Rule, error) {
	switch {
	case name == "":
		return Rule{}, errors.New("the rule has no name: name it, so that its decisions can say which rule decided")
	case effect == reinv1.PolicyEffect_POLICY_EFFECT_UNSPECIFIED || reinv1.PolicyEffect_name[int32(effect)] == "":
		return Rule{}, errors.New("the rule has no effect: give POLICY_EFFECT_ALLOW, POLICY_EFFECT_ASK or POLICY_EFFECT_DENY")
	case strings.TrimSpace(when) == "":
		return Rule{}, errors.New("the rule has no condition (when): write one in CEL, such as \"true\" or \"args.amount <= 50.0\"")
	case approvals > 16:
		return Rule{}, fmt.Errorf("the rule needs %d approvals; at most 16", approvals)
	}
	e, err := celEnv()
	if err != nil {
		return Rule{}, err
	}
	ast, iss := e.Compile(when)
	if iss.Err() != nil {
		return Rule{}, fmt.Errorf("condition %q does not compile: %s", when, oneLine(iss.Err().Error()))
	}
	if t := ast.OutputType(); !t.IsExactType(cel.BoolType) && !t.IsExactType(cel.DynType) {
		return Rule{}, fmt.Errorf("condition %q is a %s, not a boolean: write a comparison, such as \"args.amount <= 50.0\"", when, t)
	}
	prg, err := e.Program(ast, cel.CostLimit(CostLimit), cel.InterruptCheckFrequency(100))
	if err != nil {
		return Rule{}, fmt.Errorf("condition %q: %v", when, err)
	}
	return Rule{Name: name, When: when, Message: message, Effect: effect, Approvals: approvals, prg: prg}, nil
}

// oneLine folds CEL's multi-line error (with its caret drawing) into one.
func oneLine(s string) string {
	var parts []string
	for _, l := range strings.Split(s, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.Trim(l, "|.^ ") == "" || strings.HasPrefix(l, "| ") {
			continue
		}
		parts = append(parts, l)
	}
	return strings.Join(parts, "; ")
}

// Match is what evaluating one rule said: whether it matched, and the
// error that made it match or not (an evaluation that failed).
type match struct {
	hit bool
	err error
}

// eval evaluates r on in. A condition that fails to evaluate (a missing
// argument, a type at run time that is not a boolean, the cost limit)
// fails closed: a deny or an ask rule matches, an allow rule does not.
func (r Rule) eval(ctx context.Context, in input) match {
	out, _, err := r.prg.ContextEval(ctx, in.activation())
	if err == nil {
		if b, ok := out.Value().(bool); ok {
			return match{hit: b}
		}
		err = fmt.Errorf("condition %q gave %v, not a boolean", r.When, out.Value())
	} else {
		err = fmt.Errorf("condition %q could not be evaluated: %v", r.When, err)
	}
	return match{hit: r.Effect != reinv1.PolicyEffect_POLICY_EFFECT_ALLOW, err: err}
}

// decide is the first of rs to match in, as a decision from source; nil
// when none does.
func (rs Rules) decide(ctx context.Context, in input, source reinv1.PolicySource) *reinv1.PolicyDecided {
	for _, r := range rs {
		m := r.eval(ctx, in)
		if !m.hit {
			continue
		}
		d := &reinv1.PolicyDecided{
			CallId: in.call.ID, Tool: in.call.Tool, Effect: r.Effect, Source: source,
			Rule: r.Name, When: r.When, Message: r.Message, Approvals: r.Approvals,
		}
		if m.err != nil {
			d.Error = m.err.Error()
		}
		return d
	}
	return nil
}

// Decide is the decision of the first rule of rs that matches call made
// by run, from a contract's grant; nil when none does.
func (rs Rules) Decide(ctx context.Context, call Call, run *reinv1.PolicyRun) *reinv1.PolicyDecided {
	return rs.decide(ctx, newInput(call, run), reinv1.PolicySource_POLICY_SOURCE_CONTRACT)
}

// input is what a rule sees.
type input struct {
	call Call
	tool *reinv1.PolicyTool
	run  *reinv1.PolicyRun
	args *structpb.Struct
}

func newInput(call Call, run *reinv1.PolicyRun) input {
	args := call.Args
	if args == nil {
		args = &structpb.Struct{}
	}
	if run == nil {
		run = &reinv1.PolicyRun{}
	}
	return input{call: call, tool: &reinv1.PolicyTool{Name: call.Tool, Tier: TierName(call.Tier)}, run: run, args: args}
}

func (in input) activation() map[string]any {
	return map[string]any{"args": in.args, "tool": in.tool, "run": in.run}
}

// TierName is a tier as rules see it: "read", "write" or "ask_human".
func TierName(t reinv1.ToolTier) string {
	return strings.ToLower(strings.TrimPrefix(t.String(), "TOOL_TIER_"))
}
