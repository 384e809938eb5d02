package slackapp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/auth"
)

// Path is where Slack posts the app's interactions: its Interactivity
// Request URL is https://HOST/hooks/slack/actions.
const Path = "/hooks/slack/actions"

// Runs makes the API's calls as a principal the handler mapped a Slack
// user to (server.Node's DecideApprovalAs and GetRunAs).
type Runs interface {
	DecideApprovalAs(ctx context.Context, p auth.Principal, req *reinv1.DecideApprovalRequest) (*reinv1.DecideApprovalResponse, error)
	GetRunAs(ctx context.Context, p auth.Principal, req *reinv1.GetRunRequest) (*reinv1.GetRunResponse, error)
}

// Options configure a Handler.
type Options struct {
	// SigningSecret is the Slack app's signing secret; required.
	SigningSecret []byte
	// Users maps Slack users to principals; required.
	Users *Users
	// Principal is the principal of tenant and ID with its roles (the
	// tokens file's, auth.Directory.Principal); required.
	Principal func(tenant, id string) (auth.Principal, bool)
	// Runs decides; required.
	Runs Runs
	// ResponseURLs are the prefixes a click's response_url may have; nil
	// means DefaultResponseURLs. The handler posts to no other address.
	ResponseURLs []string
	// Client posts to response_urls; nil means one with a 10 s timeout
	// that follows no redirect.
	Client *http.Client
	// AckAfter is how long a click waits for its decision before Slack is
	// answered (Slack wants an answer within 3 s); the outcome is posted
	// to the response_url either way. 0 means 2 s.
	AckAfter time.Duration
	// DecideTimeout bounds a decision, a committed write included. 0
	// means 2 minutes.
	DecideTimeout time.Duration
	// MaxBodyBytes bounds a request's body; 0 means 1 MiB.
	MaxBodyBytes int64
	// Now is the clock; nil means time.Now.
	Now    func() time.Time
	Logger *slog.Logger
}

// DefaultResponseURLs is where Slack's response_urls point.
var DefaultResponseURLs = []string{"https://hooks.slack.com/"}

// maxInFlight bounds the decisions in progress at once; a click over it is
// answered 503, and Slack shows the person it failed.
const maxInFlight = 64

// Handler takes Slack's clicks on Approve and Deny (POST Path).
type Handler struct {
	opts Options
	seen seen
	// slots holds a token per decision in progress.
	slots chan struct{}
	// ctx ends the decisions in progress at Close; wg waits for them.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// mu guards closed, and orders each start before Close's wait.
	mu     sync.Mutex
	closed bool
}

// New is a Handler of opts. Close it to end the decisions in progress.
func New(opts Options) (*Handler, error) {
	switch {
	case len(opts.SigningSecret) == 0:
		return nil, errors.New("slackapp: the Slack app's signing secret is required")
	case opts.Users == nil || opts.Principal == nil || opts.Runs == nil:
		return nil, errors.New("slackapp: Users, Principal and Runs are required")
	}
	if opts.ResponseURLs == nil {
		opts.ResponseURLs = DefaultResponseURLs
	}
	if opts.Client == nil {
		opts.Client = &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if opts.AckAfter <= 0 {
		opts.AckAfter = 2 * time.Second
	}
	if opts.DecideTimeout <= 0 {
		opts.DecideTimeout = 2 * time.Minute
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 1 << 20
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Handler{opts: opts, slots: make(chan struct{}, maxInFlight), ctx: ctx, cancel: cancel}, nil
}

// Close ends the decisions in progress and waits for them; a click after
// it is answered 503.
func (h *Handler) Close() {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.cancel()
	h.wg.Wait()
}

// start runs job in a slot of its own, unless every slot is taken or the
// handler is closed; done is closed when job returns.
func (h *Handler) start(job func(context.Context)) (done chan struct{}, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, false
	}
	select {
	case h.slots <- struct{}{}:
	default:
		return nil, false
	}
	done = make(chan struct{})
	h.wg.Go(func() {
		defer func() { <-h.slots }()
		defer close(done)
		job(h.ctx)
	})
	return done, true
}

// interaction is the part of Slack's block_actions payload the handler
// reads.
type interaction struct {
	Type string `json:"type"`
	User struct {
		ID     string `json:"id"`
		TeamID string `json:"team_id"`
	} `json:"user"`
	Team struct {
		ID string `json:"id"`
	} `json:"team"`
	Actions []struct {
		ActionID string `json:"action_id"`
		Value    string `json:"value"`
	} `json:"actions"`
	ResponseURL string `json:"response_url"`
	Message     struct {
		Text   string            `json:"text"`
		Blocks []json.RawMessage `json:"blocks"`
	} `json:"message"`
}

// click is a verified click on Approve or Deny, from a mapped user.
type click struct {
	approve     bool
	value       buttonValue
	principal   auth.Principal
	slackUser   string
	responseURL string
	message     []json.RawMessage
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST Slack's interaction payloads here", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.opts.MaxBodyBytes))
	if err != nil {
		http.Error(w, fmt.Sprintf("the body is over %d bytes, or could not be read", h.opts.MaxBodyBytes), http.StatusRequestEntityTooLarge)
		return
	}
	now := h.opts.Now()
	sig, sent, err := verify(h.opts.SigningSecret, r.Header, body, now)
	if err == nil {
		err = h.seen.take(sig, sent, now)
	}
	if err != nil {
		h.opts.Logger.Warn("Slack action refused", "remote", r.RemoteAddr, "error", err)
		code := http.StatusUnauthorized
		if errors.Is(err, errTooMany) {
			code = http.StatusServiceUnavailable
		}
		http.Error(w, err.Error(), code)
		return
	}
	c, reply, err := h.parse(r, body)
	if err != nil {
		h.opts.Logger.Warn("Slack action refused", "error", err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if c == nil {
		w.WriteHeader(http.StatusOK) // not a click of rein's buttons
		return
	}
	job := func(ctx context.Context) { h.decide(ctx, c) }
	if reply != nil {
		// Told to the person; nothing is decided.
		job = func(ctx context.Context) { h.post(ctx, c.responseURL, reply) }
	}
	done, ok := h.start(job)
	if !ok {
		http.Error(w, "too many decisions in progress, or the server is stopping; click again in a moment", http.StatusServiceUnavailable)
		return
	}
	t := time.NewTimer(h.opts.AckAfter)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	case <-r.Context().Done():
	}
	w.WriteHeader(http.StatusOK)
}

// parse reads a verified body. It returns the click to decide, or a reply
// for the person when the click cannot be decided (an unmapped user), or
// neither for an interaction that is not a click of rein's buttons. An
// error is a body that is not one Slack sends.
func (h *Handler) parse(r *http.Request, body []byte) (c *click, reply []byte, err error) {
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct != "application/x-www-form-urlencoded" {
		return nil, nil, fmt.Errorf("the Content-Type is %q, not application/x-www-form-urlencoded", ct)
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, nil, fmt.Errorf("the body is not a form: %v", err)
	}
	var in interaction
	if err := json.Unmarshal([]byte(form.Get("payload")), &in); err != nil {
		return nil, nil, fmt.Errorf("the form's payload is not Slack's JSON: %v", err)
	}
	if in.Type != "block_actions" {
		return nil, nil, nil
	}
	i := slices.IndexFunc(in.Actions, func(a struct {
		ActionID string `json:"action_id"`
		Value    string `json:"value"`
	}) bool {
		return a.ActionID == ActionApprove || a.ActionID == ActionDeny
	})
	if i < 0 {
		return nil, nil, nil
	}
	c = &click{approve: in.Actions[i].ActionID == ActionApprove, responseURL: in.ResponseURL, message: in.Message.Blocks, slackUser: in.User.ID}
	if !h.allowed(in.ResponseURL) {
		return nil, nil, fmt.Errorf("the response_url %q is not Slack's (allowed: %s); nothing was decided", cut(in.ResponseURL, 200), strings.Join(h.opts.ResponseURLs, ", "))
	}
	if err := json.Unmarshal([]byte(in.Actions[i].Value), &c.value); err != nil || c.value.RunID == "" || c.value.Tenant == "" || c.value.ProposalID == "" || c.value.Hash == "" {
		return nil, nil, fmt.Errorf("the button's value is not a rein proposal (run, tenant, proposal, hash)")
	}
	team := in.User.TeamID
	if team == "" {
		team = in.Team.ID
	}
	if in.User.ID == "" || team == "" {
		return nil, nil, fmt.Errorf("the payload names no Slack user and team")
	}
	m, contact, ok := h.opts.Users.lookup(team, in.User.ID)
	if !ok {
		if contact == "" {
			contact = "the operator of this rein server"
		}
		h.opts.Logger.Warn("Slack action from an unmapped user refused", "slack_team", team, "slack_user", in.User.ID, "run_id", c.value.RunID)
		return c, ephemeral(fmt.Sprintf("rein took no decision: your Slack user %s (team %s) is not mapped to a rein principal. Ask %s to add "+
			`{"team_id": "%s", "user_id": "%s", "principal": "…", "tenant": "%s"} to rein's Slack users file (--slack-users) and reload rein (SIGHUP).`,
			in.User.ID, team, contact, team, in.User.ID, c.value.Tenant)), nil
	}
	p, ok := h.opts.Principal(m.Tenant, m.Principal)
	if !ok {
		h.opts.Logger.Warn("Slack action from a user mapped to an unknown principal refused", "slack_user", in.User.ID, "principal", m.Principal, "tenant", m.Tenant)
		return c, ephemeral(fmt.Sprintf("rein took no decision: your Slack user is mapped to principal %s of tenant %s, which rein's tokens file does not list (or lists with different roles). Ask %s to fix the tokens file or the Slack users file.",
			m.Principal, m.Tenant, orOperator(contact))), nil
	}
	if p.Tenant != c.value.Tenant {
		return c, ephemeral(fmt.Sprintf("rein took no decision: you are principal %s of tenant %s, and this run is of tenant %s.", p.ID, p.Tenant, c.value.Tenant)), nil
	}
	c.principal = p
	return c, nil, nil
}

func orOperator(contact string) string {
	if contact == "" {
		return "the operator of this rein server"
	}
	return contact
}

// allowed reports whether u is a response_url the handler may post to:
// the scheme and host of one of Options.ResponseURLs exactly, and a path
// under its path.
func (h *Handler) allowed(u string) bool {
	parsed, err := url.Parse(u)
	if err != nil || parsed.User != nil || parsed.Host == "" {
		return false
	}
	for _, prefix := range h.opts.ResponseURLs {
		pre, err := url.Parse(prefix)
		if err == nil && parsed.Scheme == pre.Scheme && parsed.Host == pre.Host && strings.HasPrefix(parsed.Path, pre.Path) {
			return true
		}
	}
	return false
}

// decide makes c's decision as its principal and posts the outcome.
func (h *Handler) decide(ctx context.Context, c *click) {
	// The outcome is posted with ctx: a decision that ran out of time
	// still says so.
	dctx, cancel := context.WithTimeout(ctx, h.opts.DecideTimeout)
	defer cancel()
	req := &reinv1.DecideApprovalRequest{RunId: c.value.RunID, ProposalId: c.value.ProposalID, ProposalHash: c.value.Hash,
		Verdict: reinv1.ApprovalVerdict_APPROVAL_VERDICT_REJECT, Reason: "denied in Slack by " + c.principal.ID}
	if c.approve {
		req.Verdict, req.Reason = reinv1.ApprovalVerdict_APPROVAL_VERDICT_APPROVE, "approved in Slack by "+c.principal.ID
	}
	resp, err := h.opts.Runs.DecideApprovalAs(dctx, c.principal, req)
	log := h.opts.Logger.With("run_id", c.value.RunID, "proposal_id", c.value.ProposalID, "principal", c.principal.ID, "slack_user", c.slackUser, "approve", c.approve)
	if err != nil {
		log.Warn("Slack decision refused", "error", err)
		h.post(ctx, c.responseURL, h.refusal(dctx, c, err))
		return
	}
	log.Info("Slack decision taken")
	o := Outcome{Kind: Denied, By: c.principal.ID, At: h.opts.Now()}
	if c.approve {
		o.Kind = Approved
		run := resp.GetRun()
		if p := run.GetPending().GetProposal(); run.GetStatus() == reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL && p.GetProposalId() == c.value.ProposalID {
			o = waiting(run, o)
		}
	}
	h.post(ctx, c.responseURL, updated(c.message, o))
}

// waiting is o for a proposal of run that waits for more approvers.
func waiting(run *reinv1.Run, o Outcome) Outcome {
	p := run.GetPending().GetProposal()
	given, needed := len(p.GetApprovedBy()), max(int(p.GetApprovals()), 1)
	not := []string{run.GetPrincipal() + " (who started the run)"}
	for _, by := range p.GetApprovedBy() {
		if by != run.GetPrincipal() {
			not = append(not, by)
		}
	}
	o.Kind = Waiting
	o.Note = fmt.Sprintf("%d of %d approvals given; %d more approver(s) of tenant %s must approve, not %s", given, needed, needed-given, run.GetTenant(), strings.Join(not, ", "))
	return o
}

// refusal is the reply to c when the API refused its decision: the
// message updated when the proposal it shows is no longer pending, else a
// reply to the person alone.
func (h *Handler) refusal(ctx context.Context, c *click, err error) []byte {
	st := status.Convert(err)
	if st.Code() == codes.FailedPrecondition {
		if gone, ok := h.gone(ctx, c); ok {
			return updated(c.message, gone)
		}
	}
	if errors.Is(err, context.DeadlineExceeded) || st.Code() == codes.DeadlineExceeded {
		return ephemeral("rein could not finish your decision in time; the run's page in the console shows where it stands.")
	}
	return ephemeral("rein refused your decision: " + st.Message())
}

// gone is the outcome of a click on a message whose proposal is no longer
// the run's pending one, as the clicker may see it.
func (h *Handler) gone(ctx context.Context, c *click) (Outcome, bool) {
	resp, err := h.opts.Runs.GetRunAs(ctx, c.principal, &reinv1.GetRunRequest{RunId: c.value.RunID})
	if err != nil {
		return Outcome{}, false
	}
	run := resp.GetRun()
	p := run.GetPending().GetProposal()
	o := Outcome{Kind: Gone, At: h.opts.Now()}
	switch {
	case p != nil && p.GetProposalId() == c.value.ProposalID && p.GetHash() == c.value.Hash:
		return Outcome{}, false // still the one shown: refused for another reason
	case p != nil && p.GetRevisedBy() != "":
		o.Note = fmt.Sprintf("The proposal changed since this message was sent: %s revised it, and the revision (proposal %s) waits for its own decision; nothing was decided from this message", p.GetRevisedBy(), p.GetProposalId())
	case p != nil:
		o.Note = fmt.Sprintf("The proposal changed since this message was sent: proposal %s waits now; nothing was decided from this message", p.GetProposalId())
	default:
		o.Note = fmt.Sprintf("The proposal this message shows is no longer pending (decided elsewhere, or expired); the run is %s", statusName(run.GetStatus()))
	}
	return o, true
}

func statusName(s reinv1.RunStatus) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "RUN_STATUS_"))
}

// ephemeral is a reply to the person who clicked alone, leaving the
// message as it is.
func ephemeral(text string) []byte {
	replace := false
	data, _ := json.Marshal(message{ResponseType: "ephemeral", ReplaceOriginal: &replace, Text: text})
	return data
}

// updated is the message whose blocks were original with o in place of
// the buttons (above them when the proposal waits for another approver),
// to replace it.
func updated(original []json.RawMessage, o Outcome) []byte {
	replace := true
	m := message{ReplaceOriginal: &replace, Text: o.text()}
	var actions []json.RawMessage
	for _, b := range original {
		var id struct {
			BlockID string `json:"block_id"`
		}
		_ = json.Unmarshal(b, &id)
		switch id.BlockID {
		case outcomeBlock:
			continue
		case actionsBlock:
			actions = append(actions, b)
			continue
		}
		m.Blocks = append(m.Blocks, b)
	}
	if data, err := json.Marshal(o.block()); err == nil {
		m.Blocks = append(m.Blocks, data)
	}
	if o.Kind == Waiting {
		m.Blocks = append(m.Blocks, actions...)
	}
	data, _ := json.Marshal(m)
	return data
}

// post sends body to a response_url the handler allowed; a failure is
// logged, as Slack is told nothing else.
func (h *Handler) post(ctx context.Context, responseURL string, body []byte) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, responseURL, bytes.NewReader(body))
	if err != nil {
		h.opts.Logger.Warn("posting to Slack's response_url", "error", err)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.opts.Client.Do(req)
	if err != nil {
		h.opts.Logger.Warn("posting to Slack's response_url", "error", err)
		return
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		h.opts.Logger.Warn("Slack's response_url refused the update", "status", resp.Status)
	}
}
