package webhook

import (
	"encoding/json"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/secret"
)

// Payload is the body of a standard delivery (docs/webhooks.md): Standard
// Webhooks' envelope of type, timestamp and data. It is made once, as
// the event is committed, and sent as made at every attempt.
type Payload struct {
	// Type is "run.<status>" for a status change, "event.<kind>" for an
	// event of a chosen kind.
	Type string `json:"type"`
	// Timestamp is when the event was committed.
	Timestamp time.Time `json:"timestamp"`
	Data      Data      `json:"data"`
}

// Data is what a delivery says of the run.
type Data struct {
	RunID          string            `json:"run_id"`
	Tenant         string            `json:"tenant"`
	Status         string            `json:"status"`
	PreviousStatus string            `json:"previous_status,omitempty"`
	Sequence       uint64            `json:"sequence"`
	EventKind      string            `json:"event_kind"`
	Time           time.Time         `json:"time"`
	Reason         string            `json:"reason,omitempty"`
	Labels         map[string]string `json:"labels,omitempty"`
	// StartedBy is the principal that started the run.
	StartedBy string `json:"started_by,omitempty"`
	// Approval is the proposal a run paused for approval waits on.
	Approval *Approval `json:"approval,omitempty"`
	// Question is what a run paused for input asks.
	Question string `json:"question,omitempty"`
	// Budget is the limit a run paused on its budget reached.
	Budget string `json:"budget,omitempty"`
	// EndsAt is when the pause ends if no one acts.
	EndsAt *time.Time `json:"ends_at,omitempty"`
	// ConsoleURL links to the run in the console (rein serve --public-url).
	ConsoleURL string `json:"console_url,omitempty"`
}

// Approval is what a person must decide.
type Approval struct {
	ProposalID string `json:"proposal_id"`
	Tool       string `json:"tool"`
	// Arguments summarises the tool's arguments: each value at most
	// maxArgument bytes of JSON, secrets redacted.
	Arguments map[string]json.RawMessage `json:"arguments,omitempty"`
	// Preview is the tool's preview of the write, at most maxPreview
	// bytes of JSON, secrets redacted (a large one is the summary the run
	// keeps inline).
	Preview json.RawMessage `json:"preview,omitempty"`
	// Message is what the policy that asked for the approval says.
	Message string `json:"message,omitempty"`
	// Hash binds a decision to what was shown (DecideApproval's hash).
	Hash      string     `json:"hash"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	Approvals uint32     `json:"approvals_needed,omitempty"`
	// ApprovedBy are those who approved so far, of Approvals.
	ApprovedBy []string `json:"approved_by,omitempty"`
}

// maxArgument bounds each argument's JSON in a body, and maxPreview the
// preview's; a longer one is cut and sent as a string ending in "…".
const (
	maxArgument = 512
	maxPreview  = 2500
)

func eventTime(ev *reinv1.Event, st *runstate.State) time.Time {
	if t := ev.GetRecordedAt(); t != nil {
		return t.AsTime().UTC()
	}
	return st.UpdatedAt.UTC()
}

// body is the JSON of one delivery. What a pause waits on is taken from
// the state after the append, when the change is to its status.
func (m *Matcher) body(typ, kind string, ev *reinv1.Event, prev, status reinv1.RunStatus, after *runstate.State) []byte {
	at := eventTime(ev, after)
	d := Data{
		RunID: after.RunID, Tenant: after.Tenant, Status: StatusName(status), Sequence: ev.GetSequence(),
		EventKind: kind, Time: at, Labels: after.Contract.GetLabels(), StartedBy: after.Principal,
	}
	if prev != status && prev != reinv1.RunStatus_RUN_STATUS_UNSPECIFIED {
		d.PreviousStatus = StatusName(prev)
	}
	if sc := ev.GetStatusChanged(); sc != nil {
		d.Reason = m.Secrets.Redact(sc.GetReason())
	}
	if p := after.Pending; p != nil && status == after.Status {
		if e := p.GetEndsAt(); e != nil {
			t := e.AsTime().UTC()
			d.EndsAt = &t
		}
		switch {
		case p.GetProposal() != nil:
			d.Approval = m.approval(p.GetProposal())
		case p.GetQuestion() != nil:
			d.Question = m.Secrets.Redact(p.GetQuestion().GetText())
		case p.GetBudget() != nil:
			d.Budget = p.GetBudget().GetLimit()
		}
	}
	if m.PublicURL != "" {
		d.ConsoleURL = strings.TrimRight(m.PublicURL, "/") + "/#/runs/" + url.PathEscape(after.RunID)
	}
	b, err := json.Marshal(Payload{Type: typ, Timestamp: at, Data: d})
	if err != nil {
		// Only strings, times and raw JSON made by protojson: no value
		// here fails to encode.
		panic("webhook: encode a body: " + err.Error())
	}
	return b
}

func (m *Matcher) approval(p *reinv1.Proposal) *Approval {
	p = secret.Message(m.Secrets, p)
	a := &Approval{ProposalID: p.GetProposalId(), Tool: p.GetTool(), Hash: p.GetHash(), Approvals: p.GetApprovals(),
		Message: p.GetPolicyMessage(), ApprovedBy: p.GetApprovedBy()}
	if e := p.GetExpiresAt(); e != nil {
		t := e.AsTime().UTC()
		a.ExpiresAt = &t
	}
	if fields := p.GetArguments().GetFields(); len(fields) > 0 {
		a.Arguments = make(map[string]json.RawMessage, len(fields))
		for k, v := range fields {
			if raw, ok := bounded(v, maxArgument); ok {
				a.Arguments[k] = raw
			}
		}
	}
	if pv := p.GetPreview(); pv != nil {
		a.Preview, _ = bounded(pv, maxPreview)
	}
	return a
}

// bounded is v's JSON in at most max bytes: cut, and quoted as a string
// ending in "…", when longer. ok is false for a value that does not encode.
func bounded(v *structpb.Value, max int) (raw json.RawMessage, ok bool) {
	// encoding/json, not protojson: the same value makes the same bytes,
	// whichever build makes them again (a store recovering from its log).
	raw, err := json.Marshal(v.AsInterface())
	if err != nil {
		return nil, false
	}
	whole := raw
	for n := max; len(raw) > max; n = n * 3 / 4 {
		// The cut JSON, quoted as a string, escapes again: cut shorter
		// until the quoted form fits.
		cut := whole[:min(n, len(whole))]
		for !utf8.Valid(cut) {
			cut = cut[:len(cut)-1]
		}
		raw, _ = json.Marshal(string(cut) + "…")
	}
	return raw, true
}
