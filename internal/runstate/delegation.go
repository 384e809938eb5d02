package runstate

import (
	"fmt"
	"slices"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// Spend is an amount of each budget limit: what a run spent, lent or got
// back from its children.
type Spend struct {
	Steps     uint32
	Tokens    uint64
	CostUSD   float64
	ToolCalls uint32
}

// Add returns s plus o.
func (s Spend) Add(o Spend) Spend {
	return Spend{s.Steps + o.Steps, s.Tokens + o.Tokens, s.CostUSD + o.CostUSD, s.ToolCalls + o.ToolCalls}
}

// Sub returns s minus o, never below zero.
func (s Spend) Sub(o Spend) Spend {
	sub32 := func(a, b uint32) uint32 { return a - min(a, b) }
	sub64 := func(a, b uint64) uint64 { return a - min(a, b) }
	return Spend{sub32(s.Steps, o.Steps), sub64(s.Tokens, o.Tokens), max(s.CostUSD-o.CostUSD, 0), sub32(s.ToolCalls, o.ToolCalls)}
}

// IsZero reports whether every amount is zero.
func (s Spend) IsZero() bool { return s == Spend{} }

// Proto is the API form of s.
func (s Spend) Proto() *reinv1.Spend {
	return &reinv1.Spend{Steps: s.Steps, Tokens: s.Tokens, CostUsd: s.CostUSD, ToolCalls: s.ToolCalls}
}

// SpendFrom is the inverse of Spend.Proto.
func SpendFrom(p *reinv1.Spend) Spend {
	return Spend{p.GetSteps(), p.GetTokens(), p.GetCostUsd(), p.GetToolCalls()}
}

// BudgetSpend is the amount a budget lends (0 for a limit it does not set).
func BudgetSpend(b *reinv1.Budget) Spend {
	return Spend{b.GetMaxSteps(), b.GetMaxTokens(), b.GetMaxCostUsd(), b.GetMaxToolCalls()}
}

// ChildLoan is an open child of a run and the budget lent to it.
type ChildLoan struct {
	RunID string
	Lent  Spend
}

// Own is what the run spent itself.
func (s State) Own() Spend {
	return Spend{s.Steps, s.Tokens(), s.CostUSD, s.ToolCalls}
}

// Spent is what the run's tree spent as its log knows it: its own spend and
// what its returned children reported (their trees included).
func (s State) Spent() Spend { return s.Own().Add(s.Returned) }

// Committed is what the run may no longer spend: Spent plus what it lent to
// the children that have not returned. Its budget checks are against it.
func (s State) Committed() Spend { return s.Spent().Add(s.Lent) }

// Waiting reports whether the run waits for children to return.
func (s State) Waiting() bool { return len(s.Children) > 0 }

func applyDelegationStarted(s State, ev *reinv1.Event, ds *reinv1.DelegationStarted) (State, error) {
	if err := need(s, ev, reinv1.RunStatus_RUN_STATUS_RUNNING); err != nil {
		return s, err
	}
	switch {
	case s.ModelInFlight:
		return s, fmt.Errorf("%w: delegation_started while a model call is in flight", ErrIllegalTransition)
	case s.Waiting():
		return s, fmt.Errorf("%w: delegation_started while %d children of an earlier delegation are open", ErrIllegalTransition, len(s.Children))
	case len(ds.GetChildren()) == 0:
		return s, fmt.Errorf("%w: delegation_started without children", ErrInvalidEvent)
	}
	children := make([]ChildLoan, 0, len(ds.GetChildren()))
	for i, c := range ds.GetChildren() {
		if c.GetRunId() == "" || c.GetRequestId() == "" || c.GetContract() == nil {
			return s, fmt.Errorf("%w: delegation_started child %d lacks a run id, a request id or a contract", ErrInvalidEvent, i)
		}
		lent := BudgetSpend(c.GetBudget())
		children = append(children, ChildLoan{RunID: c.GetRunId(), Lent: lent})
		s.Lent = s.Lent.Add(lent)
	}
	s.Children = children
	s.ChildrenStarted += uint32(len(children))
	return s, nil
}

func applyDelegationReturned(s State, ev *reinv1.Event, dr *reinv1.DelegationReturned) (State, error) {
	if err := need(s, ev, reinv1.RunStatus_RUN_STATUS_RUNNING); err != nil {
		return s, err
	}
	i := slices.IndexFunc(s.Children, func(c ChildLoan) bool { return c.RunID == dr.GetRunId() })
	if i < 0 {
		return s, fmt.Errorf("%w: delegation_returned for run %q, which is not an open child of run %q", ErrIllegalTransition, dr.GetRunId(), s.RunID)
	}
	if !Terminal(dr.GetStatus()) {
		return s, fmt.Errorf("%w: delegation_returned with status %s; a child returns when it ends", ErrInvalidEvent, StatusName(dr.GetStatus()))
	}
	s.Lent = s.Lent.Sub(s.Children[i].Lent)
	s.Returned = s.Returned.Add(Spend{
		Steps: dr.GetSteps(), Tokens: UsageTokens(dr.GetUsage()),
		CostUSD: dr.GetCostUsd(), ToolCalls: dr.GetToolCalls(),
	})
	s.Children = slices.Delete(slices.Clone(s.Children), i, i+1)
	if len(s.Children) == 0 {
		// Nothing is lent: no rounding of the sums outlives the loans.
		s.Children, s.Lent = nil, Spend{}
	}
	return s, nil
}

// delegationProto is the API form of the run's delegations; nil when it has
// none.
func (s State) delegationProto() *reinv1.RunDelegation {
	if s.ChildrenStarted == 0 && len(s.Children) == 0 && s.Lent.IsZero() && s.Returned.IsZero() {
		return nil
	}
	d := &reinv1.RunDelegation{ChildrenStarted: s.ChildrenStarted, Lent: s.Lent.Proto(), Returned: s.Returned.Proto()}
	for _, c := range s.Children {
		d.OpenChildren = append(d.OpenChildren, &reinv1.ChildLoan{RunId: c.RunID, Lent: c.Lent.Proto()})
	}
	return d
}

func (s *State) delegationFrom(d *reinv1.RunDelegation) {
	if d == nil {
		return
	}
	s.ChildrenStarted = d.GetChildrenStarted()
	s.Lent, s.Returned = SpendFrom(d.GetLent()), SpendFrom(d.GetReturned())
	for _, c := range d.GetOpenChildren() {
		s.Children = append(s.Children, ChildLoan{RunID: c.GetRunId(), Lent: SpendFrom(c.GetLent())})
	}
}

// UsageTokens is the tokens a Usage counts toward a token budget: its
// input (uncached, written to the cache, read from it) and its output.
func UsageTokens(u *reinv1.Usage) uint64 {
	return u.GetInputTokens() + u.GetCacheWriteInputTokens() + u.GetCacheReadInputTokens() + u.GetOutputTokens()
}
