package mcpface

import (
	"context"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// canElicit reports whether the client of ss declared the elicitation
// capability.
func canElicit(ss *mcp.ServerSession) bool {
	p := ss.InitializeParams()
	return p != nil && p.Capabilities != nil && p.Capabilities.Elicitation != nil
}

// maxAdopted bounds the runs a session is asked about when it opens: the
// newest page of its principal's waiting runs.
const maxAdopted = 50

// initialized adopts, for a session that can elicit, the runs its
// principal started through this face that wait for a person: a client
// that comes back in a new session (its host restarted, its transport
// gave up) is asked again about each decision still pending. A session
// whose transport only dropped and resumed keeps its own attendance, and
// the transport's event store replays what it missed (Handler).
func (s *session) initialized(_ context.Context, req *mcp.InitializedRequest) {
	ss := req.Session
	ctx := s.bind(ss)
	if !canElicit(ss) || !s.may("ListRuns") {
		return
	}
	go func() {
		resp, err := s.face.opts.Runs.ListRuns(s.out(ctx), &reinv1.ListRunsRequest{PageSize: maxAdopted, Statuses: []reinv1.RunStatus{
			reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL, reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT}})
		if err != nil {
			s.face.opts.Logger.Info("mcp: the runs waiting for a new session's principal could not be listed", "error", err)
			return
		}
		for _, run := range resp.GetRuns() {
			if run.GetPrincipal() == s.caller.ID && strings.HasPrefix(run.GetRequestId(), requestIDPrefix) {
				s.attend(ctx, ss, run.GetRunId())
			}
		}
	}()
}

// attend asks the session about each pause of run, until the run ends or
// the session closes: for a question, the question (accept answers it);
// for an approval, the tool, the arguments, the preview and the hash
// (accept approves, decline denies, cancel leaves it pending). The answer
// is the session's principal's decision, made through the API under every
// rule a decision has; a session that goes away leaves the run paused,
// decidable anywhere else.
func (s *session) attend(ctx context.Context, ss *mcp.ServerSession, runID string) {
	s.mu.Lock()
	if s.attending[runID] {
		s.mu.Unlock()
		return
	}
	s.attending[runID] = true
	s.mu.Unlock()
	go func() {
		defer func() {
			s.mu.Lock()
			delete(s.attending, runID)
			s.mu.Unlock()
		}()
		asked := map[string]bool{} // proposals and questions asked once
		var after uint64
		for ctx.Err() == nil {
			stream, err := s.face.opts.Runs.WatchRun(s.out(ctx), &reinv1.WatchRunRequest{RunId: runID, AfterSequence: after})
			if err != nil {
				return
			}
			for {
				resp, err := stream.Recv()
				if err != nil {
					if ctx.Err() != nil || err.Error() == "EOF" {
						return
					}
					break // cut: watch again from where it stopped
				}
				ev := resp.GetEvent()
				if ev == nil {
					continue
				}
				after = ev.GetSequence()
				if ev.GetProposalRevised() != nil {
					// A revision waits without a change of status.
					s.ask(ctx, ss, runID, asked)
					continue
				}
				sc := ev.GetStatusChanged()
				if sc == nil {
					continue
				}
				switch sc.GetTo() {
				case reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL, reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT:
					s.ask(ctx, ss, runID, asked)
				default:
					if isTerminal(sc.GetTo()) {
						return
					}
				}
			}
		}
	}()
}

func isTerminal(st reinv1.RunStatus) bool {
	switch st {
	case reinv1.RunStatus_RUN_STATUS_COMPLETED, reinv1.RunStatus_RUN_STATUS_FAILED, reinv1.RunStatus_RUN_STATUS_CANCELLED,
		reinv1.RunStatus_RUN_STATUS_DENIED, reinv1.RunStatus_RUN_STATUS_EXPIRED, reinv1.RunStatus_RUN_STATUS_BUDGET_EXHAUSTED:
		return true
	}
	return false
}

// ask elicits the run's pending question or proposal, once each.
func (s *session) ask(ctx context.Context, ss *mcp.ServerSession, runID string, asked map[string]bool) {
	got, err := s.face.opts.Runs.GetRun(s.out(ctx), &reinv1.GetRunRequest{RunId: runID})
	if err != nil {
		return
	}
	run := got.GetRun()
	if p := run.GetPending().GetProposal(); p != nil && run.GetStatus() == reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL {
		if asked[p.GetProposalId()+p.GetHash()] {
			return
		}
		asked[p.GetProposalId()+p.GetHash()] = true
		s.askApproval(ctx, ss, run, p)
		return
	}
	if q := run.GetPending().GetQuestion(); q != nil && run.GetStatus() == reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT {
		key := fmt.Sprintf("question@%d", run.GetVersion())
		if asked[key] {
			return
		}
		asked[key] = true
		res, err := ss.Elicit(ctx, &mcp.ElicitParams{
			Message: fmt.Sprintf("rein run %s asks: %s", runID, q.GetText()),
			RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{
				"answer": map[string]any{"type": "string", "description": "your answer"}}, "required": []any{"answer"}},
		})
		if err != nil || res.Action != "accept" {
			s.face.opts.Logger.Debug("mcp: a question left unanswered", "run_id", runID, "error", err)
			return
		}
		answer, _ := res.Content["answer"].(string)
		if _, err := s.face.opts.Runs.ProvideInput(s.out(ctx), &reinv1.ProvideInputRequest{RunId: runID, Text: answer}); err != nil {
			s.face.opts.Logger.Info("mcp: an answer by elicitation was refused", "run_id", runID, "error", err)
		}
	}
}

// askApproval elicits a decision on proposal p of run, and makes it.
func (s *session) askApproval(ctx context.Context, ss *mcp.ServerSession, run *reinv1.Run, p *reinv1.Proposal) {
	args, _ := protojson.Marshal(p.GetArguments())
	preview, _ := protojson.Marshal(p.GetPreview())
	res, err := ss.Elicit(ctx, &mcp.ElicitParams{
		Message: fmt.Sprintf("rein run %s asks to call %s.\nArguments: %s\nPreview: %s\nProposal %s, hash %s.\n"+
			"Accept approves this write; decline denies it (give a reason); cancel leaves it pending.",
			run.GetRunId(), p.GetTool(), args, preview, p.GetProposalId(), p.GetHash()),
		RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{
			"reason": map[string]any{"type": "string", "description": "why (told to the model on a denial)"}}},
	})
	if err != nil {
		s.face.opts.Logger.Debug("mcp: an approval left pending", "run_id", run.GetRunId(), "error", err)
		return
	}
	reason, _ := res.Content["reason"].(string)
	req := &reinv1.DecideApprovalRequest{RunId: run.GetRunId(), ProposalId: p.GetProposalId(), ProposalHash: p.GetHash(), Reason: reason}
	switch res.Action {
	case "accept":
		req.Verdict = reinv1.ApprovalVerdict_APPROVAL_VERDICT_APPROVE
	case "decline":
		req.Verdict = reinv1.ApprovalVerdict_APPROVAL_VERDICT_REJECT
		if req.Reason == "" {
			req.Reason = "declined through MCP elicitation"
		}
	default:
		return // cancel: it stays pending
	}
	if _, err := s.face.opts.Runs.DecideApproval(s.out(ctx), req); err != nil {
		s.face.opts.Logger.Info("mcp: a decision by elicitation was refused", "run_id", run.GetRunId(), "error", err)
		_ = ss.Log(ctx, &mcp.LoggingMessageParams{Level: "warning", Logger: "rein", Data: fmt.Sprintf(
			"your decision on run %s, proposal %s with hash %s, was refused: %s (a proposal revised or decided since it was shown is asked again only if it still waits)",
			run.GetRunId(), p.GetProposalId(), p.GetHash(), status.Convert(err).Message())})
	}
}
