package runstate

import (
	"time"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// State is a run's state after its first Version events. The zero State is
// the state before any event. The pointers it holds (Contract, Pending,
// Result) are never mutated once set; Apply replaces them.
type State struct {
	RunID        string
	Status       reinv1.RunStatus
	StatusReason string
	// Version is the sequence of the last event applied; 0 before any.
	Version   uint64
	Contract  *reinv1.TaskContract
	Principal string
	Tenant    string
	RequestID string
	// TraceID is the run's trace (run_started.trace_id), and TraceParent
	// the caller's span it hangs from.
	TraceID, TraceParent string

	Steps        uint32
	InputTokens  uint64
	OutputTokens uint64
	ToolCalls    uint32

	// CacheWriteTokens and CacheReadTokens are the input tokens the
	// provider wrote to and read from its prompt cache (InputTokens is the
	// rest of the input).
	CacheWriteTokens, CacheReadTokens uint64

	// CostUSD is the sum of model_returned's cost_usd, in log order.
	CostUSD float64
	// Deadline is zero when the run has no timeout.
	Deadline time.Time

	// ModelInFlight is true between model_requested and model_returned: a
	// call was sent and its reply is not in the log.
	ModelInFlight bool
	// ApprovedWrite is the proposal a person approved, until its write is
	// committed. WriteOperationID is the key it was dispatched with: set
	// with ApprovedWrite and no Pending, the write was dispatched and its
	// outcome is not settled; it stays set after an unknown outcome, so a
	// second dispatch reuses the key.
	ApprovedWrite    *reinv1.Proposal
	WriteOperationID string
	Pending          *reinv1.PendingAction
	// Policy is the policy decision of the step's tool call (policy_decided),
	// until the next model call; nil when no policy decided it.
	Policy    *reinv1.PolicyDecided
	Result    *reinv1.FinalAnswer
	LastError string

	// What the step loop derives from the log (the API's RunProgress).
	// OpenCall is the tool call whose tool_requested is stored with no
	// outcome yet, requested at OpenCallTier.
	OpenCall     *reinv1.ToolCall
	OpenCallTier reinv1.ToolTier
	// CallsByTool counts the calls requested of each tool. It is never
	// mutated once set; Apply replaces it.
	CallsByTool map[string]uint32
	// FailingChecks is ChecksHash of the last failing checks_completed since
	// the last committed write ("" when none), and FailingChecksRepeated
	// how many in a row had it.
	FailingChecks         string
	FailingChecksRepeated uint32
	// Price is the price the last model_requested recorded; nil when none did.
	Price *reinv1.ModelPrice
	// Steers are the request IDs of the messages people sent the run, in
	// order (never mutated once set; Apply replaces it), and SteersWaiting
	// how many of them wait for the next model call.
	Steers        []string
	SteersWaiting uint32

	// Raised is what people added to the contract's budget (Limits).
	Raised Spend

	// DelegatedBy names, for a child run, the run that delegated it; nil
	// for a root.
	DelegatedBy *reinv1.DelegatedBy
	// PromptCacheKey is run_started.prompt_cache_key: a fork's parent's
	// CacheKey; empty for any other run.
	PromptCacheKey string
	// ChildrenStarted counts the children the run delegated to; Children
	// are those that have not returned, with what each was lent (never
	// mutated once set; Apply replaces it). Lent is their sum, which the
	// run may not spend, and Returned what the returned children spent.
	ChildrenStarted uint32
	Children        []ChildLoan
	Lent, Returned  Spend

	CreatedAt time.Time
	UpdatedAt time.Time

	// Archive is set by the store, never by the fold, once the run left the
	// live store for the archive (store.Lifecycle.Archive).
	Archive *reinv1.RunArchive

	// ToolDigests are the definitions of the granted tools the run holds
	// (run_started's, then each tool_adopted's), in run_started's order;
	// empty for a run recorded before rein kept them, whose tools are not
	// checked. Never mutated once set; Apply replaces it. PolicyDigest is
	// the server's policy rules' digest at the start.
	ToolDigests  []*reinv1.ToolDigest
	PolicyDigest string
}

// ToolDigest is the definition of tool the run holds; nil when it holds
// none (a run recorded before digests, an ask_human grant, a tool that was
// removed and adopted as removed).
func (s State) ToolDigest(tool string) *reinv1.ToolDigest {
	for _, d := range s.ToolDigests {
		if d.GetName() == tool {
			return d
		}
	}
	return nil
}

// WriteInFlight reports whether an approved write was dispatched and its
// outcome is not recorded yet (no proposal waits for a person again): until
// it is, the run takes no status change but the one its outcome brings.
func (s State) WriteInFlight() bool {
	return s.ApprovedWrite != nil && s.WriteOperationID != "" && s.Pending == nil
}

// Tokens is the run's token usage: input (uncached, written to the
// cache, read from it) plus output. A token budget counts all four.
func (s State) Tokens() uint64 {
	return s.InputTokens + s.CacheWriteTokens + s.CacheReadTokens + s.OutputTokens
}

// Proto is the state as the API's Run message. withContract chooses whether
// the contract is included; a snapshot leaves it out because it is stored
// once beside it.
func (s State) Proto(withContract bool) *reinv1.Run {
	r := &reinv1.Run{
		RunId:             s.RunID,
		Status:            s.Status,
		StatusReason:      s.StatusReason,
		Principal:         s.Principal,
		Tenant:            s.Tenant,
		RequestId:         s.RequestID,
		TraceId:           s.TraceID,
		TraceParentSpanId: s.TraceParent,
		Version:           s.Version,
		Steps:             s.Steps,
		Usage:             &reinv1.Usage{InputTokens: s.InputTokens, OutputTokens: s.OutputTokens, CacheWriteInputTokens: s.CacheWriteTokens, CacheReadInputTokens: s.CacheReadTokens},
		ToolCalls:         s.ToolCalls,
		CostUsd:           s.CostUSD,
		Pending:           s.pendingProto(),
		Result:            s.Result,
		LastError:         s.LastError,
		ModelInFlight:     s.ModelInFlight,
		ApprovedWrite:     s.ApprovedWrite,
		WriteOperationId:  s.WriteOperationID,
		Progress:          s.progress(),
		DelegatedBy:       s.DelegatedBy,
		PromptCacheKey:    s.PromptCacheKey,
		Delegation:        s.delegationProto(),
		Archive:           s.Archive,
		ToolDigests:       s.ToolDigests,
		PolicyDigest:      s.PolicyDigest,
	}
	if !s.Raised.IsZero() {
		r.BudgetRaised = s.Raised.Proto()
	}
	if withContract {
		r.Contract = s.Contract
	}
	if !s.Deadline.IsZero() {
		r.Deadline = timestamppb.New(s.Deadline)
	}
	if !s.CreatedAt.IsZero() {
		r.CreatedAt = timestamppb.New(s.CreatedAt)
	}
	if !s.UpdatedAt.IsZero() {
		r.UpdatedAt = timestamppb.New(s.UpdatedAt)
	}
	return r
}

// FromProto is the inverse of Proto: it rebuilds a state from a stored
// snapshot. contract may be nil when the snapshot carries it.
func FromProto(r *reinv1.Run, contract *reinv1.TaskContract) State {
	if contract == nil {
		contract = r.GetContract()
	}
	s := State{
		RunID:            r.GetRunId(),
		Status:           r.GetStatus(),
		StatusReason:     r.GetStatusReason(),
		Version:          r.GetVersion(),
		Contract:         contract,
		Principal:        r.GetPrincipal(),
		Tenant:           r.GetTenant(),
		RequestID:        r.GetRequestId(),
		TraceID:          r.GetTraceId(),
		TraceParent:      r.GetTraceParentSpanId(),
		Steps:            r.GetSteps(),
		InputTokens:      r.GetUsage().GetInputTokens(),
		OutputTokens:     r.GetUsage().GetOutputTokens(),
		CacheWriteTokens: r.GetUsage().GetCacheWriteInputTokens(),
		CacheReadTokens:  r.GetUsage().GetCacheReadInputTokens(),
		ToolCalls:        r.GetToolCalls(),
		CostUSD:          r.GetCostUsd(),
		ModelInFlight:    r.GetModelInFlight(),
		ApprovedWrite:    r.GetApprovedWrite(),
		WriteOperationID: r.GetWriteOperationId(),
		Pending:          storedPending(r.GetPending()),
		Result:           r.GetResult(),
		LastError:        r.GetLastError(),
		DelegatedBy:      r.GetDelegatedBy(),
		PromptCacheKey:   r.GetPromptCacheKey(),
		Archive:          r.GetArchive(),
		ToolDigests:      r.GetToolDigests(),
		PolicyDigest:     r.GetPolicyDigest(),
	}
	s.delegationFrom(r.GetDelegation())
	if b := r.GetBudgetRaised(); b != nil {
		s.Raised = SpendFrom(b)
	}
	if p := r.GetProgress(); p != nil {
		s.Steers, s.SteersWaiting = p.GetSteerRequestIds(), p.GetSteersWaiting()
		s.OpenCall, s.OpenCallTier = p.GetOpenCall(), p.GetOpenCallTier()
		s.CallsByTool = p.GetToolCallsByTool()
		s.FailingChecks, s.FailingChecksRepeated = p.GetFailingChecksHash(), p.GetFailingChecksRepeated()
		s.Policy = p.GetPolicy()
		if pr := p.GetPrice(); pr != nil {
			s.Price = &reinv1.ModelPrice{InputPerMtok: pr.GetInputPerMtok(), OutputPerMtok: pr.GetOutputPerMtok()}
		}
	}
	if r.GetDeadline() != nil {
		s.Deadline = r.GetDeadline().AsTime()
	}
	if r.GetCreatedAt() != nil {
		s.CreatedAt = r.GetCreatedAt().AsTime()
	}
	if r.GetUpdatedAt() != nil {
		s.UpdatedAt = r.GetUpdatedAt().AsTime()
	}
	return s
}

// progress is the API form of the loop's view; nil when it is empty.
func (s State) progress() *reinv1.RunProgress {
	if s.OpenCall == nil && len(s.CallsByTool) == 0 && s.FailingChecks == "" && s.Price == nil && len(s.Steers) == 0 && s.Policy == nil {
		return nil
	}
	p := &reinv1.RunProgress{
		OpenCall: s.OpenCall, OpenCallTier: s.OpenCallTier, ToolCallsByTool: s.CallsByTool,
		FailingChecksHash: s.FailingChecks, FailingChecksRepeated: s.FailingChecksRepeated,
		SteerRequestIds: s.Steers, SteersWaiting: s.SteersWaiting, Policy: s.Policy,
	}
	if s.Price != nil {
		p.Price = &reinv1.RunProgress_Price{InputPerMtok: s.Price.GetInputPerMtok(), OutputPerMtok: s.Price.GetOutputPerMtok()}
	}
	return p
}

// CacheKey is the key a provider's prompt cache groups the run's model
// calls by: one for a whole delegation tree (its root's ID), a fork's
// parent's for a fork, so that calls that share a prefix share a cache,
// else the run's own ID.
func (s State) CacheKey() string {
	switch {
	case s.PromptCacheKey != "":
		return s.PromptCacheKey
	case s.DelegatedBy.GetRootRunId() != "":
		return s.DelegatedBy.GetRootRunId()
	}
	return s.RunID
}
